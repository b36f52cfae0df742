"""Diffusers -> original single-file layout, checked by loading the file back with diffusers."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.models.sd_single_file import save_original_single_file, to_original_state_dict, unet_to_original


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, different[:5]


def _load_single_file(path, config_dir):
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline.from_single_file(
        str(path), config=str(config_dir), local_files_only=True, safety_checker=None, requires_safety_checker=False
    )


def test_tiny_sd15_single_file_loads_back_identically(tiny_sd15_paths, library_warnings):
    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline

    original = tiny_sd15_pipeline(0)
    loaded = _load_single_file(tiny_sd15_paths.single_file, tiny_sd15_paths.diffusers_dir)
    for part in ("unet", "vae", "text_encoder"):
        _assert_same_weights(getattr(original, part), getattr(loaded, part))
    noisy = [m for m in library_warnings if "missing" in m.lower() or "unexpected" in m.lower() or "not used" in m.lower()]
    assert not noisy


def test_single_file_uses_original_names(tiny_sd15_paths):
    with safe_open(str(tiny_sd15_paths.single_file), "pt") as f:
        keys = set(f.keys())
        q = f.get_tensor("first_stage_model.encoder.mid.attn_1.q.weight")
    assert q.ndim == 4 and q.shape[2:] == (1, 1)
    for key in (
        "model.diffusion_model.input_blocks.0.0.weight",
        "model.diffusion_model.input_blocks.1.1.proj_in.weight",
        "model.diffusion_model.input_blocks.3.0.op.weight",
        "model.diffusion_model.input_blocks.7.0.skip_connection.weight",
        "model.diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_k.weight",
        "model.diffusion_model.middle_block.2.emb_layers.1.weight",
        "model.diffusion_model.output_blocks.2.1.conv.weight",
        "model.diffusion_model.output_blocks.5.2.conv.weight",
        "model.diffusion_model.output_blocks.11.0.skip_connection.weight",
        "model.diffusion_model.out.2.weight",
        "first_stage_model.decoder.up.1.block.0.nin_shortcut.weight",
        "first_stage_model.decoder.up.3.upsample.conv.weight",
        "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight",
        "cond_stage_model.transformer.text_model.encoder.layers.1.self_attn.q_proj.weight",
    ):
        assert key in keys, key
    assert not any(".to_q." in k and k.startswith("first_stage_model.") for k in keys)


@pytest.mark.parametrize(("dtype", "expected"), [("FLOAT_16", torch.float16), ("BFLOAT_16", torch.bfloat16), ("FLOAT_32", torch.float32)])
def test_dtype_on_save(tmp_path, dtype, expected):
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    c = tiny_sd15_components(0)
    path = save_original_single_file(tmp_path / "m.safetensors", c["unet"], c["vae"], c["text_encoder"], dtype=dtype)
    with safe_open(str(path), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    assert dtypes == {expected}
    assert next(c["unet"].parameters()).dtype == torch.float32  # the live model is not cast
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # no temp file left behind


def test_sd2_shaped_model_round_trips(tmp_path, library_warnings):
    """OpenCLIP text encoder (fused q/k/v), linear projections, per-block heads."""
    from diffusers import StableDiffusionPipeline

    from ot_gradio.models.tiny.sd15 import tiny_sd2_components

    original = StableDiffusionPipeline(**tiny_sd2_components(0), safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    original.save_pretrained(tmp_path / "diffusers")
    path = save_original_single_file(tmp_path / "sd2.safetensors", original.unet, original.vae, original.text_encoder)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
    assert "cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight" in keys
    assert "cond_stage_model.model.positional_embedding" in keys
    loaded = _load_single_file(path, tmp_path / "diffusers")
    for part in ("unet", "vae", "text_encoder"):
        _assert_same_weights(getattr(original, part), getattr(loaded, part))
    assert not [m for m in library_warnings if "unexpected" in m.lower() or "not used" in m.lower()]


def test_block_numbering_follows_the_config(tmp_path):
    """Three levels, one layer per block, no attention at the top: not SD 1.5's shape."""
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel

    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    c = tiny_sd15_components(0)
    torch.manual_seed(1)
    c["unet"] = UNet2DConditionModel(
        sample_size=8,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(16, 24, 32),
        layers_per_block=1,
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    original = StableDiffusionPipeline(**c, safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    original.save_pretrained(tmp_path / "diffusers")
    keys = unet_to_original(original.unet.state_dict(), original.unet.config).keys()
    assert "input_blocks.2.0.op.weight" in keys and "input_blocks.5.1.proj_in.weight" in keys
    assert "output_blocks.1.2.conv.weight" in keys and "output_blocks.5.0.in_layers.0.weight" in keys
    path = save_original_single_file(tmp_path / "m.safetensors", original.unet, original.vae, original.text_encoder)
    _assert_same_weights(original.unet, _load_single_file(path, tmp_path / "diffusers").unet)


def test_unknown_weight_is_an_error():
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    c = tiny_sd15_components(0)
    c["unet"].register_buffer("surprise", torch.zeros(1))
    with pytest.raises(ValueError, match="surprise"):
        to_original_state_dict(c["unet"], c["vae"], c["text_encoder"])
