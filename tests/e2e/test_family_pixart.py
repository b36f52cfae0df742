"""PixArt-α × LoRA end to end: the worker trains the tiny PixArt, and its LoRA files reload into
diffusers' PixArtAlphaPipeline and change its output.

PixArtAlphaPipeline has no `load_lora_weights` (nor does PixArtTransformer2DModel have
`load_lora_adapter`), so the diffusers/PEFT file is applied with peft directly, as ComfyUI and
PEFT users do; the kohya file is merged the way kohya-format loaders (OneTrainer, ComfyUI)
apply one: W += alpha / rank * up @ down, the layer found by its `_`-joined module path.
"""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from ot_gradio.runner.supervisor import Supervisor

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_pixart(tmp_path_factory):
    from ot_gradio.models.tiny.pixart import save_tiny_pixart

    return save_tiny_pixart(tmp_path_factory.mktemp("tiny-pixart"))


def _config(tiny_pixart, shapes, tmp_path, **overrides):
    base = {
        "model_type": "PIXART_ALPHA",
        "training_method": "LORA",
        "base_model_name": str(tiny_pixart.diffusers_dir),
        "train_device": "cpu",
        "train_dtype": "FLOAT_32",
        "workspace_dir": str(tmp_path / "ws"),
        "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(tmp_path / "out" / "lora.safetensors"),
        "output_model_format": "KOHYA_LORA",
        "concepts": [{"name": "shapes", "path": str(shapes)}],
        "resolution": "64",
        "batch_size": 2,
        "epochs": 1,
        "learning_rate": 1e-2,
        "learning_rate_warmup_steps": 0,
        "lora_rank": 4,
        "lora_alpha": 2,
        "text_encoder": {"train": True},
        "transformer": {"train": True, "gradient_checkpointing": True},
        "text_encoder_sequence_length": 32,
        "samples": [{"prompt": "a red circle", "height": 64, "width": 80, "diffusion_steps": 2}],
        "sample_after": 0,
        "sample_after_unit": "NEVER",
        "backup_after": 0,
        "backup_after_unit": "NEVER",
        "tensorboard": False,
    }
    base.update(overrides)
    return base


def _train(config, tmp_path):
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert sup.wait(run, timeout=300) == 0, run.log_tail()
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    statuses = [e["status"] for e in events if e["type"] == "status"]
    assert statuses[-1] == "done", run.log_tail()
    return run, events


def _pipeline(tiny_pixart):
    from diffusers import PixArtAlphaPipeline

    pipe = PixArtAlphaPipeline.from_pretrained(str(tiny_pixart.diffusers_dir), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(pipe, seed=0):
    g = torch.Generator().manual_seed(seed)
    return pipe(
        "a red circle", num_inference_steps=2, height=64, width=64, generator=g, output_type="np",
        use_resolution_binning=False, clean_caption=False, max_sequence_length=32,
    ).images[0]


def _merge_kohya(pipe, path) -> set[str]:
    """Merge a kohya LoRA into the pipeline's weights, by the names ComfyUI gives PixArt layers
    (`transformer.<path>`, T5 `lora_te1_<path with _>`); returns the prefixes it touched."""
    tensors = load_file(str(path))
    targets = {"transformer.": pipe.transformer, "lora_te1_": pipe.text_encoder}
    modules = {prefix: {(n if prefix.endswith(".") else n.replace(".", "_")): m for n, m in root.named_modules()}
               for prefix, root in targets.items()}
    touched = set()
    with torch.no_grad():
        for key in tensors:
            if not key.endswith(".lora_down.weight"):
                continue
            name = key.removesuffix(".lora_down.weight")
            prefix = next(p for p in targets if name.startswith(p))
            module = modules[prefix][name.removeprefix(prefix)]  # KeyError = a name no loader can place
            down, up = tensors[key].float(), tensors[f"{name}.lora_up.weight"].float()
            scale = tensors[f"{name}.alpha"].item() / down.shape[0]
            delta = up.flatten(1) @ down.flatten(1)
            module.weight += scale * delta.reshape(module.weight.shape)
            touched.add(prefix)
    return touched


def test_pixart_lora_of_transformer_and_t5_in_kohya_format(tiny_pixart, shapes, tmp_path):
    run, events = _train(_config(tiny_pixart, shapes, tmp_path), tmp_path)
    progress = [e for e in events if e["type"] == "progress" and e.get("phase") == "training"]
    assert progress[-1]["global_step"] == progress[-1]["total_steps"] >= 3
    samples = [e for e in events if e["type"] == "sample"]
    from PIL import Image

    assert samples and Image.open(run.samples / samples[-1]["path"].split("/")[-1]).size == (80, 64)

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys, meta = list(f.keys()), f.metadata()
    assert any(k.startswith("transformer.transformer_blocks.") for k in keys)  # ComfyUI's PixArt map
    assert any(k.startswith("lora_te1_encoder_block_") for k in keys)  # T5 alone: ComfyUI's lora_te1_
    assert meta["ss_base_model_version"] == "pixart_alpha" and meta["ss_network_dim"] == "4"

    pipe = _pipeline(tiny_pixart)
    ids = pipe.tokenizer(["a red circle"], return_tensors="pt").input_ids
    with torch.no_grad():
        t5_before = pipe.text_encoder(ids)[0]
    before = _image(pipe)
    assert _merge_kohya(pipe, out) == {"transformer.", "lora_te1_"}
    with torch.no_grad():
        t5_after = pipe.text_encoder(ids)[0]
    after = _image(pipe)
    assert (t5_after - t5_before).abs().max() > 1e-4  # the T5 LoRA trained and loads
    assert abs(after - before).max() > 1e-3  # the trained LoRA changes the image


def test_pixart_lora_of_transformer_in_diffusers_format_loads_with_peft(tiny_pixart, shapes, tmp_path):
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict

    config = _config(
        tiny_pixart, shapes, tmp_path, output_model_format="SAFETENSORS", text_encoder={"train": False}, samples=[],
        layer_filter_preset="attn-mlp",
    )
    _train(config, tmp_path)
    out = tmp_path / "out" / "lora.safetensors"
    tensors = load_file(str(out))
    with safe_open(str(out), "pt") as f:
        adapter = json.loads(f.metadata()["lora_adapter_metadata"])
    assert tensors and all(k.startswith("transformer.transformer_blocks.") for k in tensors)  # attn1, attn2, ff only
    assert any(".ff.net.0.proj." in k for k in tensors) and not any("text_encoder" in k for k in tensors)

    pipe = _pipeline(tiny_pixart)
    before = _image(pipe)
    lora = LoraConfig(
        r=adapter["transformer.r"], lora_alpha=adapter["transformer.lora_alpha"],
        target_modules=adapter["transformer.target_modules"],
    )
    inject_adapter_in_model(lora, pipe.transformer)
    result = set_peft_model_state_dict(pipe.transformer, {k.removeprefix("transformer."): v for k, v in tensors.items()})
    assert not result.unexpected_keys
    assert not [k for k in result.missing_keys if "lora_" in k]
    after = _image(pipe)
    assert abs(after - before).max() > 1e-3


def test_pixart_part_options_reach_the_model(tiny_pixart, shapes, tmp_path):
    """The transformer's own settings, the T5 sequence length, the variance loss and the 16 px
    buckets, as the trainer sets them up (no training steps)."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    data = _config(
        tiny_pixart, shapes, tmp_path, text_encoder={"train": False}, text_encoder_sequence_length=24,
        transformer={"train": True, "learning_rate": 3e-4, "gradient_checkpointing": True},
    )
    paths = RunPaths(tmp_path / "samples", tmp_path / "backup", tmp_path / "save", None, [tmp_path])
    trainer = Trainer(load_config(data).config, paths, Reporter())
    trainer.setup()
    model = trainer.model
    assert [(g.name, g.lr) for g in trainer.param_groups] == [("transformer", 3e-4)]
    assert model.transformer.gradient_checkpointing and model.transformer.training
    assert not model.text_encoder.training
    assert model.encode_text(["a red circle"])["encoder_hidden_states"].shape[1] == 24
    assert trainer.diffusion.vb is not None  # vb_loss_strength 1.0 by default, as in OneTrainer
    sizes = {tuple(b.size) for b in trainer.dataset.epoch_batches(0)}
    assert sizes and all(h % 16 == 0 and w % 16 == 0 for h, w in sizes)
