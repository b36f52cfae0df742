"""What only Ideogram 4 does: its prompts are encoded exactly as Ideogram4Pipeline encodes them
(13 tapped Qwen3-VL layers, the packed [left pad][text][image] ids), predict is the pipeline's
transformer call negated, latents are patchified and normalised as the pipeline undoes them, the
resolution shift is the pipeline's, the frozen unconditional transformer stays off the
device until a sample, is saved with the model, and never trains; the transformer file and the
KOHYA_LORA / COMFY_LORA files are OneTrainer's (original names, q/k/v fused)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def ideogram():
    from ot_gradio.models.ideogram4 import Ideogram4
    from ot_gradio.models.tiny.ideogram4 import tiny_ideogram4_components

    model = Ideogram4(tiny_ideogram4_components())
    model.text_encoder_sequence_length = 64
    return model


def _pipeline(model):
    """A plain Ideogram4Pipeline over the model's parts (its own encode_prompt, not ours)."""
    from diffusers import Ideogram4Pipeline

    return Ideogram4Pipeline(scheduler=model.scheduler, tokenizer=model.tokenizer, **model.saved_parts)


PROMPTS = ["a red circle", "  two blue squares, one above the other "]


def test_prompts_are_encoded_and_packed_as_the_pipeline_does(ideogram):
    from ot_gradio.models.ideogram4 import packed_text

    ours = ideogram.encode_text(PROMPTS)
    assert ours["encoder_hidden_states"].shape == (2, 64, 13 * 16)
    lengths = ours["attention_mask"].sum(dim=1)
    assert ours["attention_mask"][:, 0].all() and not ours["encoder_hidden_states"][0, int(lengths[0]):].any()  # prompt rows first
    reference = _pipeline(ideogram).encode_prompt(PROMPTS, 3, 2, 64, torch.device("cpu"))
    block = int(lengths.max())
    packed = packed_text(ours, 3, 2, "cpu", torch.float32)
    torch.testing.assert_close(packed[0], reference[0][:, 64 - block:])
    for mine, theirs in zip(packed[1:], reference[1:], strict=True):  # positions, segments, roles
        assert torch.equal(mine, theirs[:, 64 - block:])


def test_predict_is_the_pipelines_transformer_call_negated(ideogram):
    conditioning = ideogram.encode_text(PROMPTS)
    features, positions, segments, roles = _pipeline(ideogram).encode_prompt(PROMPTS, 3, 2, 64, torch.device("cpu"))
    latents, t = torch.randn(2, 32, 3, 2), torch.tensor([0.25, 0.8])
    tokens = latents.flatten(2).transpose(1, 2)
    with torch.no_grad():
        out = ideogram.transformer(hidden_states=torch.cat([torch.zeros(2, 64, 32), tokens], dim=1), timestep=1 - t,
                                   encoder_hidden_states=features, position_ids=positions, segment_ids=segments, indicator=roles,
                                   return_dict=False)[0][:, 64:]
        ours = ideogram.predict(latents, t, conditioning)
    torch.testing.assert_close(ours, -out.transpose(1, 2).reshape(2, 32, 3, 2))


def test_latents_are_normalised_as_the_pipeline_denormalises_them(ideogram):
    pixels = torch.rand(1, 3, 48, 32) * 2 - 1
    latents = ideogram.encode_images(pixels, sample=False)
    assert latents.shape == (1, 32, 3, 2)
    raw = ideogram.vae.encode(pixels).latent_dist.mean
    vae = ideogram.vae
    tokens = latents.flatten(2).transpose(1, 2)  # the pipeline's decode tail
    z = tokens * torch.sqrt(vae.bn.running_var + vae.config.batch_norm_eps).view(1, 1, -1) + vae.bn.running_mean.view(1, 1, -1)
    z = z.view(1, 3, 2, 2, 2, 8).permute(0, 5, 1, 3, 2, 4).reshape(1, 8, 6, 4)
    torch.testing.assert_close(z, raw)
    assert ideogram.decode_latents(latents).shape == (1, 3, 48, 32)


def test_the_resolution_shift_is_the_pipelines(ideogram):
    from diffusers.pipelines.ideogram4.pipeline_ideogram4 import _resolution_aware_mu

    from ot_gradio.training.flow_matching import FlowMatchingSchedule

    latents = torch.zeros(1, 128, 64, 48)  # 1024 x 768 px
    expected = math.exp(_resolution_aware_mu(1024, 768, 0.0))
    assert ideogram.resolution_shift(latents) == pytest.approx(expected)
    config = SimpleNamespace(timestep_shift=2.0, dynamic_timestep_shifting=True)  # replaces Timestep shift, as OneTrainer
    assert FlowMatchingSchedule(ideogram, config, torch.device("cpu")).shift(latents) == pytest.approx(expected)


def test_the_unconditional_transformer_waits_off_the_device_is_saved_and_never_trains(ideogram, tmp_path):
    from diffusers import Ideogram4Pipeline

    uncond = ideogram.unconditional_transformer
    # not a part: the trainer's placement, quantization and LoRA never reach it
    assert "unconditional_transformer" not in ideogram.parts and not any(p.requires_grad for p in uncond.parameters())
    seen = []
    hook = uncond.register_forward_hook(lambda *_: seen.append(1))
    try:
        image = ideogram.sample("a red circle", height=32, width=48, steps=2, cfg_scale=3.0)
    finally:
        hook.remove()
    assert image.size == (48, 32) and len(seen) == 2 and next(uncond.parameters()).device.type == "cpu"
    ideogram.save_diffusers(tmp_path / "saved", "FLOAT_32")
    again = Ideogram4Pipeline.from_pretrained(str(tmp_path / "saved"), local_files_only=True)
    assert all(torch.equal(a, b) for a, b in zip(again.unconditional_transformer.state_dict().values(), uncond.state_dict().values(),
                                                 strict=True))


@pytest.mark.parametrize(("weight_dtype", "layer"), [
    ("NFLOAT_4", "Linear4bit"), ("INT_8", "Linear8bitLt"), ("FLOAT_W8A8", "LinearW8A8"), ("BFLOAT_16", "Linear")])
def test_the_unconditional_transformer_is_stored_in_its_own_weight_type_where_it_waits(weight_dtype, layer):
    """OneTrainer's Ideogram 4 presets keep it in NFLOAT_4: quantized in RAM in that type, the rest
    of the model untouched; samples use it; a float type leaves it as it loaded."""
    from ot_gradio.config.enums import DataType
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.ideogram4 import Ideogram4
    from ot_gradio.models.tiny.ideogram4 import tiny_ideogram4_components
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model

    model = Ideogram4(tiny_ideogram4_components())
    model.text_encoder_sequence_length = 64
    before = model.sample("a red circle", height=32, width=48, steps=2, cfg_scale=3.0, seed=1)
    config = TrainConfig.model_validate({"model_type": "IDEOGRAM_4", "training_method": "LORA", "text_encoder": {"train": False},
                                         "unconditional_transformer": {"weight_dtype": weight_dtype}})
    cpu = torch.device("cpu")
    warnings = configure_model(model, config, cpu, Precision(DataType.FLOAT_32, cpu))
    assert not [w for w in warnings if w.startswith("unconditional_transformer")]

    def linear_kinds(module):  # (the embedders Ideogram keeps in full precision are Linear subclasses of its own)
        return {n: type(m).__name__ for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)
                and type(m).__name__ != "FullPrecisionLinear"}

    kinds = linear_kinds(model.unconditional_transformer)
    # all but its first layer, which float8 codes leave in the compute type: the pipeline casts its
    # inputs to the type of the model's first weight (training/quantize.py)
    assert {k for n, k in kinds.items() if n != "input_proj"} == {layer}
    assert kinds["input_proj"] == ("Linear" if weight_dtype in ("FLOAT_W8A8", "BFLOAT_16") else layer)
    assert set(linear_kinds(model.transformer).values()) == {"Linear"}
    after = model.sample("a red circle", height=32, width=48, steps=2, cfg_scale=3.0, seed=1)
    changed = np.abs(np.asarray(before, dtype=np.int16) - np.asarray(after, dtype=np.int16)).max()
    assert (changed > 0) == (layer != "Linear") and changed < 64  # the rounding of the unconditional branch only


def test_text_encoder_training_and_layer_skips_are_refused(ideogram):
    with pytest.raises(ValueError, match="trains the transformer only"):
        ideogram.configure_flow(SimpleNamespace(text_encoder=SimpleNamespace(train=True)))
    with pytest.raises(ValueError, match="13 fixed hidden layers"):
        ideogram.layer_skips = {"text_encoder": 1}


def _original(path: str) -> str:
    """OneTrainer's original name of a diffusers Ideogram 4 key or layer (its IdeogramModel: q, k, v
    fused into `attention.qkv`, `attention.to_out.0` is `attention.o`, the rest diffusers')."""
    for n in ("to_q", "to_k", "to_v"):
        path = path.replace(f".attention.{n}", ".attention.qkv")
    return path.replace(".attention.to_out.0", ".attention.o")


def test_the_transformer_file_is_the_trained_transformer_in_onetrainers_original_names(ideogram, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = ideogram.save_single_file(tmp_path / "t.safetensors", "BFLOAT_16")
    saved, weights = load_file(str(path)), ideogram.transformer.state_dict()
    assert set(saved) == {_original(k) for k in weights}
    for i in range(len(ideogram.transformer.layers)):
        a = f"layers.{i}.attention"
        qkv = torch.cat([weights[f"{a}.to_{n}.weight"] for n in "qkv"]).to(torch.bfloat16)
        assert torch.equal(saved[f"{a}.qkv.weight"], qkv) and torch.equal(saved[f"{a}.o.weight"], weights[f"{a}.to_out.0.weight"].bfloat16())
    assert all(torch.equal(saved[k], v.bfloat16()) for k, v in weights.items() if _original(k) == k)
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["modelspec.architecture"] == "Ideogram"


def _layer_entry(key: str) -> tuple[str, str]:
    """`a.b.lora_up.weight` -> ("a.b", ".lora_up.weight"); `a.b.alpha` -> ("a.b", ".alpha")."""
    layer = key.rsplit(".", 2 if key.endswith(".weight") else 1)[0]
    return layer, key[len(layer):]


def test_kohya_and_comfy_lora_files_hold_onetrainers_names_with_one_exact_fused_qkv_layer(tmp_path):
    """Every layer is `diffusion_model.` + its original name; the q/k/v layers are one layer on the
    fused qkv whose delta is theirs stacked; the file reads back to what was trained, and so does
    it with OneTrainer's other spellings (KOHYA_LORA's `lora_unet_`, COMFY_LORA's lora_A / lora_B)."""
    from safetensors.torch import load_file, save_file

    from ot_gradio.models.ideogram4 import Ideogram4
    from ot_gradio.models.tiny.ideogram4 import tiny_ideogram4_components
    from ot_gradio.training.lora import add_lora, lora_state_dict
    from ot_gradio.training.lora_format import KOHYA, load_lora_file, save_lora

    model = Ideogram4(tiny_ideogram4_components())
    add_lora(model.transformer, kind="unet", rank=2, alpha=1.0, dropout=0.0, layer_preset="full",
             presets=model.lora_layer_presets["transformer"])
    gen = torch.Generator().manual_seed(0)
    for p in model.transformer.parameters():
        if p.requires_grad:
            p.data = torch.randn(p.shape, generator=gen)
    trained, names = lora_state_dict(model.transformer), model.lora_module_names()
    path = save_lora(tmp_path / "k.safetensors", {"transformer": model.transformer}, base_model_version="ideogram_4",
                     lora_format=KOHYA, module_names=names)
    saved = load_file(str(path))
    layers = {k.removesuffix(".lora_A.weight") for k in trained if k.endswith(".lora_A.weight")}
    assert {_layer_entry(k)[0] for k in saved} == {"diffusion_model." + _original(p) for p in layers}
    a = "diffusion_model.layers.0.attention.qkv"
    assert saved[f"{a}.lora_down.weight"].shape == (6, 32) and saved[f"{a}.alpha"].item() == 3.0
    fused = saved[f"{a}.lora_up.weight"] @ saved[f"{a}.lora_down.weight"] * (3.0 / 6)
    split = [trained[f"layers.0.attention.to_{n}.lora_B.weight"] @ trained[f"layers.0.attention.to_{n}.lora_A.weight"] * 0.5 for n in "qkv"]
    torch.testing.assert_close(fused, torch.cat(split), rtol=0, atol=1e-6)

    kohya = {"lora_unet_" + layer.removeprefix("diffusion_model.").replace(".", "_") + entry: v
             for k, v in saved.items() for layer, entry in [_layer_entry(k)]}
    comfy = {k.replace(".lora_down.", ".lora_A.").replace(".lora_up.", ".lora_B."): v for k, v in saved.items()}
    for i, spelling in enumerate((saved, kohya, comfy)):
        save_file(spelling, str(tmp_path / f"{i}.safetensors"))
        loaded = load_lora_file(tmp_path / f"{i}.safetensors", module_names=names, denoiser="transformer")
        assert (loaded.rank, loaded.alpha) == (2, 1.0) and loaded.parts["transformer"].keys() == trained.keys()
        assert all(torch.equal(loaded.parts["transformer"][k], trained[k]) for k in trained)


# ---------------------------------------------------------------- unconditional_transformer.include (OneTrainer's switch)

@pytest.fixture(scope="module")
def without_unconditional(tmp_path_factory):
    """A copy of the tiny Ideogram 4's diffusers folder without its unconditional_transformer folder
    (its model_index.json still lists it): a model that reads it fails to load."""
    import shutil

    from ot_gradio.models.tiny.ideogram4 import save_tiny_ideogram4

    folder = tmp_path_factory.mktemp("ideogram4-without-unconditional") / "model"
    shutil.copytree(save_tiny_ideogram4(tmp_path_factory.mktemp("tiny-ideogram4")).diffusers_dir, folder)
    shutil.rmtree(folder / "unconditional_transformer")
    return folder


def test_a_model_without_the_unconditional_transformer_is_refused_naming_the_switch(without_unconditional):
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.ideogram4 import Ideogram4

    with pytest.raises(ModelLoadError, match=r"has no unconditional_transformer.*turn unconditional_transformer\.include off"):
        Ideogram4.load(str(without_unconditional), offline=True)


def _transformer_calls(model):
    """The keyword inputs of each call of the trained transformer (LoRA layers included) while it is registered."""
    from ot_gradio.models.common import base_module

    calls = []
    hook = base_module(model.transformer).register_forward_pre_hook(lambda _m, _a, kwargs: calls.append(kwargs), with_kwargs=True)
    return calls, hook


def test_left_out_the_unconditional_transformer_is_not_read_a_lora_trains_and_cfg_negates_the_empty_prompt(
        without_unconditional, four_shapes, tmp_path):
    """OneTrainer's IdeogramModelLoader with include_unconditional_transformer off, and its
    IdeogramSampler without it: above CFG 1 the negative branch is the empty prompt's chat turn
    through the trained transformer, packed [text][image] as the prompt is; at CFG 1 no negative branch."""
    from ot_gradio.config.io import load_config
    from ot_gradio.models.ideogram4 import packed_text
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    config = {"model_type": "IDEOGRAM_4", "training_method": "LORA", "base_model_name": str(without_unconditional),
              "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
              "output_model_destination": str(tmp_path / "out" / "lora.safetensors"), "concepts": [{"name": "c", "path": str(four_shapes)}],
              "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate_warmup_steps": 0, "lora_rank": 2,
              "text_encoder_sequence_length": 64, "samples": [], "backup_after_unit": "NEVER", "backup_before_save": False,
              "tensorboard": False, "text_encoder": {"train": False}, "unconditional_transformer": {"include": False}}
    trainer = Trainer(load_config(config).config, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "o", None, []), Reporter())
    trainer.setup()
    model = trainer.model
    assert model.unconditional_transformer is None and "unconditional_transformer" not in model.saved_parts
    assert trainer.train() == "done"

    calls, hook = _transformer_calls(model)
    try:
        image = model.sample("a red circle", height=32, width=48, steps=2, cfg_scale=3.0)
        assert image.size == (48, 32) and len(calls) == 4  # each step: the prompt, then the empty prompt
        empty = model.encode_text([""])
        features, positions, segments, roles = packed_text(empty, 2, 3, "cpu", torch.float32)
        block = features.shape[1] - 6
        for positive, negative in (calls[0:2], calls[2:4]):
            assert torch.equal(negative["encoder_hidden_states"], features)
            assert all(torch.equal(negative[k], v) for k, v in (("position_ids", positions), ("segment_ids", segments), ("indicator", roles)))
            assert not negative["hidden_states"][:, :block].any()
            assert torch.equal(negative["hidden_states"][:, block:], positive["hidden_states"][:, -6:])  # the same latents
            assert torch.equal(negative["timestep"], positive["timestep"])
            assert positive["encoder_hidden_states"].shape[1] > features.shape[1]  # the prompt's turn, longer
        calls.clear()
        model.sample("a red circle", height=32, width=48, steps=2, cfg_scale=1.0)
        assert len(calls) == 2  # CFG 1: the conditional branch alone
    finally:
        hook.remove()


def test_a_model_left_out_the_unconditional_transformer_saves_without_it(without_unconditional, tmp_path):
    """A fine-tune's diffusers folder has no unconditional_transformer (model_index.json: null, as
    OneTrainer's saved pipeline); it loads again with the switch off, and is refused with it on."""
    import json

    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.ideogram4 import Ideogram4

    model = Ideogram4.load(str(without_unconditional), offline=True, excluded=("unconditional_transformer",))
    saved = model.save_diffusers(tmp_path / "saved", "FLOAT_32")
    assert not (saved / "unconditional_transformer").exists()
    assert json.loads((saved / "model_index.json").read_text())["unconditional_transformer"] == [None, None]
    assert Ideogram4.load(str(saved), offline=True, excluded=("unconditional_transformer",)).unconditional_transformer is None
    with pytest.raises(ModelLoadError, match=r"unconditional_transformer\.include"):
        Ideogram4.load(str(saved), offline=True)


def test_the_switch_is_acted_on_and_shown_for_ideogram_4_only():
    from ot_gradio.config.doctor import check
    from ot_gradio.config.fields import iter_fields
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.ui.visibility import applies, field_shown

    field = next(f for f in iter_fields(TrainConfig) if f.path == "unconditional_transformer.include")
    assert field.status == "ok" and "empty prompt" in field.tooltip
    assert field_shown(field.path, "training", "IDEOGRAM_4", "LORA") and applies(field.path, {"model_type": "IDEOGRAM_4"})
    assert not applies("text_encoder.include", {"model_type": "IDEOGRAM_4"})  # OneTrainer offers it for the unconditional transformer only
    assert applies("text_encoder_2.include", {"model_type": "FLUX_DEV_1"}) and not applies(field.path, {"model_type": "FLUX_DEV_1"})
    lora = TrainConfig.model_validate({"model_type": "IDEOGRAM_4", "training_method": "LORA", "unconditional_transformer": {"include": False}})
    assert not [w for w in check(lora) if "unconditional_transformer" in w]  # neither "not acted on" nor ignored
    fine_tune = TrainConfig.model_validate({"model_type": "IDEOGRAM_4", "training_method": "FINE_TUNE",
                                            "unconditional_transformer": {"include": False}})
    said = [w for w in check(fine_tune) if "unconditional_transformer" in w]
    assert len(said) == 1 and said[0].startswith("unconditional_transformer left out (Include off): the fine-tuned model is saved without it")
