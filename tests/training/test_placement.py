"""Where the parts wait while a run trains (training/placement.py): with latent caching on, the
VAE and a frozen, cached text encoder leave the train device for the training steps and come
back for samples. No GPU here: the tiny SD 1.5 trains on the CPU while `placement.HOST` is the
meta device and `placement.move` records each move instead of making it, so the test sees where
each part would be at every step and sample."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ot_gradio.training import placement

TRAIN = torch.device("cpu")
AWAY = torch.device("meta")


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model.diffusers_dir


@pytest.fixture(scope="module")
def shapes(four_shapes):
    return four_shapes


def _train(tiny: Path, data: Path, work: Path, monkeypatch, **overrides):
    """One epoch of the tiny SD 1.5 LoRA with a sample at the end; returns (trainer, where each
    part was at each step, at each sample, the phases in which the text encoder and the VAE ran)."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    located: dict[int, torch.device] = {}  # id(module) -> where the moves put it (on TRAIN until moved)
    monkeypatch.setattr(placement, "HOST", AWAY)
    monkeypatch.setattr(placement, "move", lambda module, device: located.__setitem__(id(module), torch.device(device)))
    config = {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"),
        "cache_dir": str(work / "cache"), "output_model_destination": str(work / "out" / "lora.safetensors"),
        "concepts": [{"name": "c", "path": str(data)}], "resolution": "64", "batch_size": 2, "epochs": 1,
        "learning_rate_warmup_steps": 0, "lora_rank": 2, "lora_alpha": 2,
        "text_encoder": {"train": False, "dropout_probability": 0.5},
        "unet": {"train": True, "gradient_checkpointing": False},
        "samples": [{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2, "cfg_scale": 2.0}],
        "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
    }
    for key, value in overrides.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    trainer = Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), Reporter())
    trainer.setup()
    model = trainer.model

    def where() -> dict[str, torch.device]:
        return {part: located.get(id(module), TRAIN) for part, module in model.parts.items()}

    at_steps, at_samples, ran = [], [], []
    phase = ["setup"]
    predict, sample = model.predict, model.sample
    model.predict = lambda *a, **k: (at_steps.append(where()), predict(*a, **k))[1]

    def sampling(*a, **k):
        phase[0] = "sample"
        at_samples.append(where())
        try:
            return sample(*a, **k)
        finally:
            phase[0] = "train"

    model.sample = sampling
    hooks = [model.text_encoder.register_forward_hook(lambda *_: ran.append(("text_encoder", phase[0])))]
    hooks += [coder.register_forward_pre_hook(lambda *_: ran.append(("vae", phase[0]))) for coder in (model.vae.encoder, model.vae.decoder)]
    phase[0] = "train"
    trainer.train()
    for hook in hooks:
        hook.remove()
    return trainer, at_steps, at_samples, ran


def test_frozen_cached_parts_wait_off_the_device_and_come_back_for_samples(tiny, shapes, tmp_path, monkeypatch):
    trainer, at_steps, at_samples, ran = _train(tiny, shapes, tmp_path, monkeypatch)
    assert at_steps and all(w == {"unet": TRAIN, "text_encoder": AWAY, "vae": AWAY} for w in at_steps)
    assert trainer.placement.parked == ["text_encoder", "vae"] and trainer.text_cache_off_reason is None
    # the VAE waits on the device for the samples; the text encoder is brought by each sample for its encoding
    assert at_samples and all(w == {"unet": TRAIN, "text_encoder": AWAY, "vae": TRAIN} for w in at_samples)
    # the text cache was filled before the steps: every caption and, with caption dropout, the empty one
    cache = trainer.diffusion.text_cache
    assert cache.encoded == 4 + 1 and cache.misses == 0 and cache.hits == 4
    assert ("text_encoder", "train") not in ran and ("vae", "train") not in ran
    assert ("text_encoder", "sample") in ran and ("vae", "sample") in ran
    assert "text_encoder, vae wait in RAM" in trainer.placement.message()


def test_a_trained_text_encoder_stays_on_the_device(tiny, shapes, tmp_path, monkeypatch):
    trainer, at_steps, at_samples, ran = _train(tiny, shapes, tmp_path, monkeypatch, text_encoder={"train": True})
    assert at_steps and all(w == {"unet": TRAIN, "text_encoder": TRAIN, "vae": AWAY} for w in at_steps)
    assert trainer.placement.parked == ["vae"] and trainer.diffusion.text_cache is None
    assert at_samples and all(w["vae"] == TRAIN for w in at_samples)
    assert ("text_encoder", "train") in ran and ("vae", "train") not in ran


def _model(inpainting: bool = False):
    parts = {name: torch.nn.Linear(2, 2) for name in ("unet", "text_encoder", "text_encoder_2", "vae")}
    return SimpleNamespace(parts=parts, denoiser="unet", text_encoder_names=("text_encoder", "text_encoder_2"),
                           inpainting=inpainting)


def _config(latent_caching: bool = True, temp_device: str = "cpu", **sections):
    part = lambda **k: SimpleNamespace(**{"weight_dtype": "FLOAT_32", "offload_fraction": 0.0,  # noqa: E731
                                          "activation_offloading": False, **k})
    names = ("unet", "text_encoder", "text_encoder_2", "vae")
    return SimpleNamespace(latent_caching=latent_caching, temp_device=temp_device, **{n: part(**sections.get(n, {})) for n in names})


@pytest.mark.parametrize("case, parked, kept", [
    ({}, ["text_encoder", "text_encoder_2", "vae"], []),
    ({"device": "cpu"}, [], []),  # on a CPU train device nothing moves
    ({"latent_caching": False}, [], ["text_encoder: latent caching", "text_encoder_2: latent caching", "vae: latent caching"]),
    ({"reason": "captions change at random"}, ["vae"], ["text_encoder: its outputs are not cached (captions change",
                                                        "text_encoder_2: its outputs are not cached"]),
    ({"trained": {"text_encoder"}}, ["text_encoder_2", "vae"], []),
    ({"text_encoder_2": {"weight_dtype": "NFLOAT_4"}}, ["text_encoder", "text_encoder_2", "vae"], []),  # bitsandbytes' too
    ({"text_encoder": {"weight_dtype": "INT_8"}}, ["text_encoder", "text_encoder_2", "vae"], []),
    ({"text_encoder": {"weight_dtype": "FLOAT_8"}}, ["text_encoder", "text_encoder_2", "vae"], []),
    # with layer offloading too: its offloaded blocks stay in RAM when it comes for samples (test_layer_offload.py)
    ({"text_encoder": {"offload_fraction": 0.5}}, ["text_encoder", "text_encoder_2", "vae"], []),
    ({"inpainting": True}, ["text_encoder", "text_encoder_2"], ["vae: an inpainting model"]),
    # temp_device naming the train device: nothing waits in RAM (OneTrainer's temp_device), each part says why
    ({"temp_device": "cuda"}, [], ["text_encoder: temp_device is cuda", "text_encoder_2: temp_device", "vae: temp_device"]),
    ({"temp_device": "cuda", "inpainting": True}, [], ["text_encoder: temp_device", "text_encoder_2: temp_device",
                                                       "vae: an inpainting model"]),
])
def test_which_parts_wait_in_ram(case, parked, kept):
    case = dict(case)
    model = _model(case.pop("inpainting", False))
    device = torch.device(case.pop("device", "cuda"))
    trained, reason = case.pop("trained", set()), case.pop("reason", None)
    config = _config(case.pop("latent_caching", True), case.pop("temp_device", "cpu"), **case)
    got_parked, got_kept = placement.parked_parts(model, config, device, trained, reason)
    assert got_parked == parked
    assert len(got_kept) == len(kept) and all(k.startswith(want) for k, want in zip(got_kept, kept, strict=True))


@pytest.mark.parametrize("forwarded", [False, True])
def test_an_int8_layer_keeps_its_quantized_weight_when_its_part_moves(forwarded):
    """bitsandbytes' 8-bit layer keeps its int8 weight and row scales beside the parameter
    (`weight.CB` before its first forward, `state.CB` after). A part's move (Module.to) gives the
    parameter new data on the other device and leaves those behind: `move` points them at the
    moved weight. No GPU here: a copy of the data stands for the move Module.to makes between the
    CPU and a GPU (it assigns the parameter's data), then `move` to the CPU runs what follows it."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.training.quantize import _bnb_linear

    torch.manual_seed(0)
    layer = _bnb_linear(torch.nn.Linear(64, 32), DataType.INT_8, torch.float32).to("cpu")
    x = torch.randn(3, 64)
    before = layer(x) if forwarded else None
    layer.weight.data = layer.weight.data.clone()  # what Module.to does to the parameter on a real move
    placement.move(layer, torch.device("cpu"))
    held = layer.state.CB if forwarded else layer.weight.CB
    assert held.data_ptr() == layer.weight.data_ptr()
    after = layer(x)
    assert layer.state.CB.data_ptr() == layer.weight.data_ptr()
    if forwarded:
        torch.testing.assert_close(after, before)


def test_modules_taking_turns_on_the_device_keep_their_int8_weights():
    """Ideogram 4's unconditional transformer (INT_8 in RAM) and the trained one take turns on the
    sampling device (models/sampling_parts.turns_on_device): each turn's move leaves an 8-bit layer's int8
    weight at the moved parameter. As above, a copy of the data before each turn stands for the
    move to a GPU."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.models.sampling_parts import turns_on_device
    from ot_gradio.training.quantize import _bnb_linear

    torch.manual_seed(0)
    active = torch.nn.Linear(64, 64)
    layer = _bnb_linear(torch.nn.Linear(64, 32), DataType.INT_8, torch.float32).to("cpu")
    waiting = torch.nn.Sequential(layer)  # a model: its `.to` does not reach the layer's own
    x = torch.randn(3, 64)
    want = waiting(x)

    def moved_by_the_gpu(_module, _args):
        layer.weight.data = layer.weight.data.clone()

    checks = []
    hooks = [waiting.register_forward_pre_hook(moved_by_the_gpu),
             # (before the layer's forward, which points its weight back at the int8 data it held)
             layer.register_forward_pre_hook(lambda *_: checks.append(layer.state.CB.data_ptr() == layer.weight.data_ptr()))]
    try:
        with turns_on_device(active, waiting, torch.device("cpu")):
            for _ in range(2):
                active(x)
                torch.testing.assert_close(waiting(x), want)
    finally:
        for hook in hooks:
            hook.remove()
    assert checks == [True, True]


def test_the_filled_text_cache_holds_every_text_a_step_can_ask_for(tmp_path):
    """Two text encoders, caption dropout on the second: the step asks for the caption for both,
    or the caption and an empty one; each is in the cache after `fill_text_cache`."""
    from ot_gradio.data.text_cache import TextEmbeddingCache
    from ot_gradio.training.diffusion import DiffusionStep

    step = SimpleNamespace(caption_transform=str.upper, model=_model(),
                           config=SimpleNamespace(text_encoder=SimpleNamespace(dropout_probability=0.0),
                                                  text_encoder_2=SimpleNamespace(dropout_probability=0.3)))
    step.text_variants = lambda caption: DiffusionStep.text_variants(step, caption)
    calls = []

    def encode(texts):
        calls.append(texts)
        return {"hidden": torch.zeros(len(texts["text_encoder"]), 3)}

    cache = TextEmbeddingCache(tmp_path, "text-test")
    data = SimpleNamespace(captions=lambda: ["a cat", "", "a cat"])
    assert placement.fill_text_cache(cache, encode, [(step, data)]) == 3
    assert calls == [{"text_encoder": ["A CAT"], "text_encoder_2": ["A CAT"]},
                     {"text_encoder": ["A CAT"], "text_encoder_2": [""]}, {"text_encoder": [""], "text_encoder_2": [""]}]
    cache.encode({"text_encoder": ["A CAT", "A CAT", ""], "text_encoder_2": ["", "A CAT", ""]}, encode)
    assert cache.hits == 3 and cache.misses == 0 and len(calls) == 3
    assert placement.fill_text_cache(cache, encode, [(step, data)]) == 0  # nothing new: no encoder runs


def test_a_quantized_part_is_converted_in_ram_before_the_model_moves(tiny, shapes, tmp_path, monkeypatch):
    """A FLOAT_8 part reaches the device small: when the trainer moves the model, its Linear layers
    are already 8-bit (moved first, a Flux transformer would sit on the card whole in bf16)."""
    from ot_gradio.config.io import load_config
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.training.quantize import LinearFp8
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    seen = []
    to = StableDiffusion15.to
    monkeypatch.setattr(StableDiffusion15, "to", lambda self, device: (
        seen.append([type(m) for m in self.unet.modules() if isinstance(m, torch.nn.Linear)]), to(self, device))[1])
    config = {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny), "train_device": "cpu",
        "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(tmp_path / "lora.safetensors"), "concepts": [{"name": "c", "path": str(shapes)}],
        "resolution": "64", "unet": {"weight_dtype": "FLOAT_8"}, "text_encoder": {"train": False},
    }
    Trainer(load_config(config).config, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "o", None, []), Reporter()).setup()
    assert seen and seen[0] and all(kind is LinearFp8 for kind in seen[0])
