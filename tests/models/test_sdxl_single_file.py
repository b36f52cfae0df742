"""SDXL diffusers -> original (sgm) single-file layout, checked by loading the file back with
diffusers' own `from_single_file` (which knows the real SDXL layout)."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from ot_gradio.models.sdxl_single_file import save_sdxl_single_file, unet_module_names
from ot_gradio.models.tiny.sdxl import tiny_sdxl_inpainting_pipeline, tiny_sdxl_pipeline

PARTS = ("unet", "vae", "text_encoder", "text_encoder_2")


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, different[:5]


def _noisy(messages):
    words = ("missing", "unexpected", "not used", "not initialized", "were not")
    return [m for m in messages if any(w in m.lower() for w in words)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny SDXL as a diffusers folder (the configs) and as our single file."""
    root = tmp_path_factory.mktemp("sdxl-single")
    pipe = tiny_sdxl_pipeline(0)
    pipe.save_pretrained(root / "diffusers")
    path = save_sdxl_single_file(root / "sdxl.safetensors", pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2)
    return pipe, root / "diffusers", path


def test_round_trip_through_from_single_file(saved, library_warnings):
    from diffusers import StableDiffusionXLPipeline

    original, config_dir, path = saved
    loaded = StableDiffusionXLPipeline.from_single_file(str(path), config=str(config_dir), local_files_only=True)
    for part in PARTS:
        _assert_same_weights(getattr(original, part), getattr(loaded, part))
    assert not _noisy(library_warnings)


def test_original_names(saved):
    original, _, path = saved
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        projection = f.get_tensor("conditioner.embedders.1.model.text_projection")
        in_proj = f.get_tensor("conditioner.embedders.1.model.transformer.resblocks.2.attn.in_proj_weight")
    for key in (
        "model.diffusion_model.input_blocks.0.0.weight",
        "model.diffusion_model.label_emb.0.0.weight",
        "model.diffusion_model.label_emb.0.2.weight",
        "model.diffusion_model.time_embed.2.weight",
        "model.diffusion_model.input_blocks.3.0.op.weight",
        "model.diffusion_model.input_blocks.4.1.proj_in.weight",
        "model.diffusion_model.input_blocks.7.1.transformer_blocks.1.attn2.to_k.weight",
        "model.diffusion_model.middle_block.1.transformer_blocks.1.ff.net.0.proj.weight",
        "model.diffusion_model.middle_block.2.emb_layers.1.weight",
        "model.diffusion_model.output_blocks.2.2.conv.weight",
        "model.diffusion_model.output_blocks.5.2.conv.weight",
        "model.diffusion_model.output_blocks.8.0.skip_connection.weight",
        "model.diffusion_model.out.2.weight",
        "first_stage_model.decoder.up.3.upsample.conv.weight",
        "conditioner.embedders.0.transformer.text_model.embeddings.position_embedding.weight",
        "conditioner.embedders.0.transformer.text_model.encoder.layers.1.self_attn.q_proj.weight",
        "conditioner.embedders.0.transformer.text_model.final_layer_norm.weight",
        "conditioner.embedders.1.model.positional_embedding",
        "conditioner.embedders.1.model.token_embedding.weight",
        "conditioner.embedders.1.model.ln_final.weight",
        "conditioner.embedders.1.model.transformer.resblocks.0.mlp.c_fc.weight",
    ):
        assert key in keys, key
    assert not any(k.startswith(("cond_stage_model.", "model.diffusion_model.down_blocks")) for k in keys)
    # OpenCLIP stores the projection as x @ P (the Linear weight transposed) and q/k/v stacked
    torch.testing.assert_close(projection, original.text_encoder_2.text_projection.weight.t(), rtol=0, atol=0)
    assert tuple(in_proj.shape) == (3 * 48, 48)


def test_dtype_on_save(tmp_path):
    pipe = tiny_sdxl_pipeline(0)
    path = save_sdxl_single_file(
        tmp_path / "m.safetensors", pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, dtype="BFLOAT_16"
    )
    with safe_open(str(path), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert next(pipe.unet.parameters()).dtype == torch.float32  # the live model is not cast
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_inpainting_unet_round_trips(tmp_path, library_warnings):
    from diffusers import StableDiffusionXLInpaintPipeline

    original = tiny_sdxl_inpainting_pipeline(0)
    original.save_pretrained(tmp_path / "diffusers")
    path = save_sdxl_single_file(
        tmp_path / "inpaint.safetensors", original.unet, original.vae, original.text_encoder, original.text_encoder_2
    )
    with safe_open(str(path), "pt") as f:
        assert f.get_tensor("model.diffusion_model.input_blocks.0.0.weight").shape[1] == 9
    loaded = StableDiffusionXLInpaintPipeline.from_single_file(str(path), config=str(tmp_path / "diffusers"), local_files_only=True)
    for part in PARTS:
        _assert_same_weights(getattr(original, part), getattr(loaded, part))
    assert not _noisy(library_warnings)


def test_unet_module_names_are_the_single_file_names(saved):
    original, _, path = saved
    names = unet_module_names(original.unet)
    assert names["conv_in"] == "input_blocks.0.0"
    assert names["add_embedding.linear_1"] == "label_emb.0.0"
    assert names["time_embedding.linear_2"] == "time_embed.2"
    assert names["down_blocks.0.resnets.1.conv1"] == "input_blocks.2.0.in_layers.2"
    assert names["down_blocks.0.downsamplers.0.conv"] == "input_blocks.3.0.op"
    assert names["down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"] == "input_blocks.4.1.transformer_blocks.0.attn1.to_q"
    assert names["mid_block.resnets.1.time_emb_proj"] == "middle_block.2.emb_layers.1"
    assert names["up_blocks.0.upsamplers.0.conv"] == "output_blocks.2.2.conv"
    assert names["up_blocks.2.resnets.0.conv_shortcut"] == "output_blocks.6.0.skip_connection"
    assert names["conv_out"] == "out.2"
    with safe_open(str(path), "pt") as f:
        unet_keys = {k.removeprefix("model.diffusion_model.") for k in f.keys() if k.startswith("model.diffusion_model.")}
    linear_or_conv = [n for n, m in original.unet.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    assert all(names[n] + ".weight" in unet_keys for n in linear_or_conv)
