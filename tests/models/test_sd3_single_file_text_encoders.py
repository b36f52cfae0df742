"""An SD 3 / 3.5 fine-tune saved as one file holds its text encoders, trained or not, under the
prefixes of SAI's `incl_clips` files and OneTrainer's converter, and they read back as saved:
through diffusers' `from_single_file` and through this trainer's own loading."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.config.schema import TrainConfig
from ot_gradio.models.sd3 import StableDiffusion3, StableDiffusion35
from ot_gradio.models.tiny import resolve_tiny
from ot_gradio.training.finetune_method import FineTuneMethod

# SAI's `incl_clips` files' and OneTrainer's convert_sd3_diffusers_to_ckpt's prefixes
TEXT_ENCODER_PREFIXES = {"text_encoder": "text_encoders.clip_l.transformer.", "text_encoder_2": "text_encoders.clip_g.transformer.",
                         "text_encoder_3": "text_encoders.t5xxl.transformer."}
TEXT_ENCODERS = tuple(TEXT_ENCODER_PREFIXES)
FAMILIES = {"tiny:sd3": StableDiffusion3, "tiny:sd35": StableDiffusion35}


def _fine_tuned(name: str, fmt: str, dtype: str = "FLOAT_32", excluded: tuple[str, ...] = ()):
    """The tiny model set up for FINE_TUNE with every included text encoder training, each trained
    weight moved as an optimizer step would move it; with the method and its config."""
    family = FAMILIES[name]
    model = family.load(str(resolve_tiny(name).diffusers_dir), offline=True, excluded=excluded)
    config = TrainConfig.model_validate({
        "model_type": family.model_type.value, "training_method": "FINE_TUNE", "output_model_format": fmt, "output_dtype": dtype,
        **{part: {"train": part not in excluded, "include": part not in excluded} for part in TEXT_ENCODERS}})
    method = FineTuneMethod()
    groups = method.setup(model, config, torch.device("cpu"))
    assert {g.name for g in groups} == {"transformer", *(p for p in TEXT_ENCODERS if p not in excluded)}
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for group in groups:
            for p in group.params:
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
    return model, method, config


def _text_keys(path) -> dict[str, set[str]]:
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
    return {part: {k.removeprefix(prefix) for k in keys if k.startswith(prefix)} for part, prefix in TEXT_ENCODER_PREFIXES.items()}


def _differing(expected: torch.nn.Module, got: torch.nn.Module) -> list[str]:
    a, b = expected.state_dict(), got.state_dict()
    assert a.keys() == b.keys()
    return [k for k in a if not torch.equal(a[k], b[k])]


@pytest.mark.parametrize("name", FAMILIES)
def test_trained_text_encoders_are_in_the_file_and_read_back_bit_equal(name, tmp_path):
    from diffusers import StableDiffusion3Pipeline

    model, method, config = _fine_tuned(name, "SAFETENSORS")
    path = method.save(model, config, tmp_path / "model.safetensors", {})
    keys = _text_keys(path)
    clip_l, clip_g, t5 = (model.parts[part].state_dict() for part in TEXT_ENCODERS)
    # transformers' names, under CLIP's `text_model.`; T5's tied embedding under both its names
    assert keys["text_encoder"] == set(clip_l) and "text_projection.weight" in keys["text_encoder"]
    assert keys["text_encoder_2"] == set(clip_g) and "text_model.encoder.layers.0.self_attn.q_proj.weight" in keys["text_encoder_2"]
    assert keys["text_encoder_3"] == set(t5) and {"shared.weight", "encoder.embed_tokens.weight"} <= keys["text_encoder_3"]
    folder = str(resolve_tiny(name).diffusers_dir)
    pipe = StableDiffusion3Pipeline.from_single_file(str(path), config=folder, local_files_only=True)
    # diffusers' reader puts the identity in CLIP-L's projection (SAI's reference code's, which the file's replaces in ComfyUI)
    assert _differing(model.text_encoder, pipe.text_encoder) == ["text_projection.weight"]
    assert torch.equal(pipe.text_encoder.text_projection.weight, torch.eye(clip_l["text_projection.weight"].shape[0]))
    assert _differing(model.text_encoder_2, pipe.text_encoder_2) == [] and _differing(model.text_encoder_3, pipe.text_encoder_3) == []
    again = FAMILIES[name].load(str(path), config_dir=folder, offline=True)
    for part in (*TEXT_ENCODERS, "transformer", "vae"):
        assert _differing(model.parts[part], again.parts[part]) == [], part
    assert again.text_encoder_3.shared.weight is again.text_encoder_3.encoder.embed_tokens.weight  # tied, as transformers loads T5


@pytest.mark.parametrize("fmt", ["ORIGINAL_SINGLE_FILE", "LEGACY_SAFETENSORS"])
def test_every_single_file_format_writes_them_in_the_output_dtype(fmt, tmp_path):
    model, method, config = _fine_tuned("tiny:sd35", fmt, dtype="FLOAT_16")
    path = method.save(model, config, tmp_path / "model.safetensors", {})
    keys = _text_keys(path)
    assert all(keys[part] == set(model.parts[part].state_dict()) for part in TEXT_ENCODERS)
    with safe_open(str(path), "pt") as f:
        dtypes = {f.get_tensor(prefix + key).dtype for part, prefix in TEXT_ENCODER_PREFIXES.items() for key in keys[part]}
    assert dtypes == {torch.float16}


def test_a_text_encoder_left_out_is_not_written_and_reads_from_the_config_folder(tmp_path):
    """CLIP-L left out of the run (include off): the file holds CLIP-G and T5 only (as OneTrainer
    writes what it loaded), and loading it with CLIP-L takes that from the config folder."""
    model, method, config = _fine_tuned("tiny:sd3", "SAFETENSORS", excluded=("text_encoder",))
    path = method.save(model, config, tmp_path / "model.safetensors", {})
    keys = _text_keys(path)
    assert not keys["text_encoder"] and keys["text_encoder_2"] and keys["text_encoder_3"]
    folder = str(resolve_tiny("tiny:sd3").diffusers_dir)
    again = StableDiffusion3.load(str(path), config_dir=folder, offline=True)
    base = StableDiffusion3.load(folder, offline=True)
    assert _differing(base.text_encoder, again.text_encoder) == []
    assert _differing(model.text_encoder_2, again.text_encoder_2) == [] and _differing(model.text_encoder_3, again.text_encoder_3) == []
