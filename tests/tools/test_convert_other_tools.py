"""Tools → Convert reads other tools' LoRA files as *Base LoRA* does: sd-scripts' Flux.1 names
(`lora_unet_double_blocks_0_img_attn_qkv`, q/k/v fused) and ComfyUI's `diffusion_model.` names,
converted to our layouts and merged into the base, each layer's delta exact."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.tools.jobs import run_inline
from tests.training.test_lora_other_tools import COMFY, KOHYA_UNET, assert_deltas, bfl_file, loaded_deltas, model

BUILDERS = {"flux": ("FLUX_DEV_1", "ot_gradio.models.tiny.flux", "save_tiny_flux"),
            "zimage": ("Z_IMAGE", "ot_gradio.models.tiny.z_image", "save_tiny_z_image")}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    import importlib

    return {name: getattr(importlib.import_module(module), builder)(tmp_path_factory.mktemp(name)).diffusers_dir
            for name, (_, module, builder) in BUILDERS.items()}


# Flux.1 renames its layers, so its base is loaded for the names; Z-Image renames nothing and is
# loaded only because the file's names need its layout
@pytest.mark.parametrize(("name", "tool"), [("flux", KOHYA_UNET), ("flux", COMFY), ("zimage", COMFY)], ids=lambda v: v if isinstance(v, str) else v[0])
def test_convert_reads_original_layer_names(name, tool, bases, tmp_path):
    want = bfl_file(name, tmp_path / "other.safetensors", tool[1])
    for to in ("diffusers", "kohya"):
        out = run_inline("convert", {"operation": "lora", "model_type": BUILDERS[name][0], "input": str(tmp_path / "other.safetensors"),
                                     "base": str(bases[name]), "output": str(tmp_path / f"{to}.safetensors"), "to": to})
        assert_deltas(loaded_deltas(model(name), out["output"]), want)


def test_merge_reads_sd_scripts_flux_names(bases, tmp_path):
    want = bfl_file("flux", tmp_path / "kohya.safetensors", KOHYA_UNET[1])
    out = run_inline("convert", {"operation": "merge", "model_type": "FLUX_DEV_1", "base": str(bases["flux"]),
                                 "lora": str(tmp_path / "kohya.safetensors"), "output": str(tmp_path / "merged"), "weight": 0.5})
    before = load_file(str(bases["flux"] / "transformer" / "diffusion_pytorch_model.safetensors"))
    after = load_file(str(tmp_path / "merged" / "transformer" / "diffusion_pytorch_model.safetensors"))
    assert out["layers"] == len(want)
    for layer, delta in want.items():
        key = layer.removeprefix("transformer.") + ".weight"
        torch.testing.assert_close(after[key].float(), before[key].float() + 0.5 * delta, rtol=1e-5, atol=1e-5, msg=key)


def test_original_layer_names_without_base_are_refused(tmp_path):
    from ot_gradio.tools.jobs import JobError

    bfl_file("flux", tmp_path / "kohya.safetensors", KOHYA_UNET[1])
    with pytest.raises(JobError, match=r"^base: the file names its layers in the model's original layout \(lora_unet_double_blocks_0"):
        run_inline("convert", {"operation": "lora", "model_type": "FLUX_DEV_1", "input": str(tmp_path / "kohya.safetensors"),
                               "output": str(tmp_path / "out.safetensors"), "to": "diffusers"})


def test_an_sd15_file_in_comfyuis_names_without_a_base_is_refused_naming_base(tmp_path):
    """Without a base the UNet's names come from the standard SDXL UNet: an SD 1.5 file's original names need its own."""
    from safetensors.torch import save_file

    from ot_gradio.tools.jobs import JobError

    name = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q"
    save_file({f"{name}.lora_down.weight": torch.zeros(4, 32), f"{name}.lora_up.weight": torch.zeros(32, 4)},
              str(tmp_path / "comfy.safetensors"))
    with pytest.raises(JobError, match=r"^base: the file names its layers in the model's original layout \(diffusion_model"):
        run_inline("convert", {"operation": "lora", "model_type": "STABLE_DIFFUSION_15", "input": str(tmp_path / "comfy.safetensors"),
                               "output": str(tmp_path / "out.safetensors"), "to": "diffusers"})
