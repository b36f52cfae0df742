"""ComfyUI's quantized transformer files (models/comfy_quant.py): its `fp8_scaled` files (a
`scaled_fp8` marker and a `scale_weight` per layer) and its mixed-precision ones (a `comfy_quant`
note per layer with its `weight_scale`) load with each weight read back to its value; diffusers'
single-file loader alone would read the FP8 numbers without their scales (a Wan transformer was
off by up to 448). A format not read is refused by name; so is a quantized whole checkpoint whose
loader cannot be given the values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.tiny import resolve_tiny


def comfy_quantized(weights: dict[str, torch.Tensor], mixed: bool, convs: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`weights` with every 2-D weight (with `convs`, every weight of a layer) as FP8 and its scale,
    in ComfyUI's scaled layout or (`mixed`) its mixed-precision one; and the values ComfyUI reads
    back from them."""
    out: dict[str, torch.Tensor] = {} if mixed else {"scaled_fp8": torch.zeros(0, dtype=torch.float8_e4m3fn)}
    values = {}
    for key, value in weights.items():
        if key.endswith(".weight") and (value.ndim == 2 or convs and value.ndim > 2) and value.abs().max() > 0:
            layer, scale = key.removesuffix(".weight"), value.abs().max().float() / 448
            out[key] = (value / scale).to(torch.float8_e4m3fn)
            if mixed:
                out[f"{layer}.weight_scale"] = scale.reshape(())
                out[f"{layer}.comfy_quant"] = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
            else:
                out[f"{layer}.scale_weight"] = scale.reshape(1)
            values[key] = out[key].float() * scale
        else:
            out[key] = value.contiguous()
            values[key] = value
    return out, values


def _close(module: torch.nn.Module, expected: dict[str, torch.Tensor]) -> float:
    got = module.state_dict()
    return max((got[k].float() - expected[k].float()).abs().max().item() for k in got)


@pytest.mark.parametrize("mixed", [False, True])
def test_a_wan_fp8_scaled_transformer_file_reads_back_to_its_values(tmp_path, mixed):
    """The generic path (diffusers' converter, given the values): Wan 2.1's original layout."""
    from ot_gradio.models.wan import Wan21

    folder = str(resolve_tiny("tiny:wan").diffusers_dir)
    base = Wan21.load(folder, offline=True)
    original = load_file(base.save_single_file(tmp_path / "wan.safetensors", None))
    quantized, values = comfy_quantized(original, mixed)
    save_file(quantized, tmp_path / "wan2.1_t2v_fp8_scaled.safetensors")
    model = Wan21.load(str(tmp_path / "wan2.1_t2v_fp8_scaled.safetensors"), offline=True, config_dir=folder)
    again = Wan21.load(folder, offline=True)  # the same values through the original layout's own path
    save_file({k: v.to(torch.float32).contiguous() for k, v in values.items()}, tmp_path / "values.safetensors")
    expected = Wan21.load(str(tmp_path / "values.safetensors"), offline=True, config_dir=folder).transformer.state_dict()
    assert _close(model.transformer, expected) == 0.0
    assert _close(model.transformer, again.transformer.state_dict()) < 0.05  # the FP8 rounding only, not 448 times off


def test_flux_reads_a_scaled_transformer_file_through_its_own_converter(tmp_path):
    from ot_gradio.models.flux import FluxDev1

    paths = resolve_tiny("tiny:flux")
    base = FluxDev1.load(str(paths.diffusers_dir), offline=True)
    quantized, values = comfy_quantized(load_file(str(paths.single_file)), mixed=False)
    save_file(quantized, tmp_path / "flux1-dev-fp8-scaled.safetensors")
    save_file({k: v.float().contiguous() for k, v in values.items()}, tmp_path / "values.safetensors")
    model = FluxDev1.load(str(tmp_path / "flux1-dev-fp8-scaled.safetensors"), offline=True, config_dir=str(paths.diffusers_dir))
    expected = FluxDev1.load(str(tmp_path / "values.safetensors"), offline=True, config_dir=str(paths.diffusers_dir))
    assert _close(model.transformer, expected.transformer.state_dict()) == 0.0
    assert 0 < _close(model.transformer, base.transformer.state_dict()) < 0.05


def test_an_sd35_fp8_scaled_file_and_refusals(tmp_path):
    """SAI's sd3.5 file in ComfyUI's scaled layout: transformer and VAE read back; an nvfp4 layer
    is refused by its format; a quantized SD 1.5 checkpoint is refused (its pipeline loader reads a path)."""
    from ot_gradio.models.sd3 import StableDiffusion35
    from ot_gradio.models.sd15 import StableDiffusion15

    folder = resolve_tiny("tiny:sd35").diffusers_dir
    base = StableDiffusion35.load(str(folder), offline=True)
    bare = load_file(base.save_single_file(tmp_path / "sd3.5.safetensors", None))
    quantized, values = comfy_quantized(bare, mixed=True)
    save_file(quantized, tmp_path / "sd3.5_large_fp8_scaled.safetensors")
    save_file({k: v.float().contiguous() for k, v in values.items()}, tmp_path / "values.safetensors")
    model = StableDiffusion35.load(str(tmp_path / "sd3.5_large_fp8_scaled.safetensors"), offline=True, config_dir=str(folder))
    expected = StableDiffusion35.load(str(tmp_path / "values.safetensors"), offline=True, config_dir=str(folder))
    assert _close(model.transformer, expected.transformer.state_dict()) == 0.0
    assert _close(model.vae, expected.vae.state_dict()) == 0.0
    # ComfyUI's all-in-one file (its text encoders in it, the marker under the checkpoint's prefix): transformer and VAE
    # read back to their values, the text encoders from the config folder (diffusers' pipeline loader would drop the scales)
    whole, _ = comfy_quantized(bare, mixed=False)
    whole["model.diffusion_model.scaled_fp8"] = whole.pop("scaled_fp8")
    for part, name in (("text_encoder", "clip_l"), ("text_encoder_2", "clip_g"), ("text_encoder_3", "t5xxl")):
        whole |= {f"text_encoders.{name}.transformer.{k}": v.clone() for k, v in base.parts[part].state_dict().items()}
    save_file(whole, tmp_path / "sd3.5_large_fp8_scaled_incl_clips.safetensors")
    allinone = StableDiffusion35.load(str(tmp_path / "sd3.5_large_fp8_scaled_incl_clips.safetensors"), offline=True, config_dir=str(folder))
    assert _close(allinone.transformer, expected.transformer.state_dict()) == 0.0
    layer = next(k for k in quantized if k.endswith(".comfy_quant"))
    quantized[layer] = torch.tensor(list(json.dumps({"format": "nvfp4"}).encode()), dtype=torch.uint8)
    save_file(quantized, tmp_path / "sd3.5_nvfp4.safetensors")
    with pytest.raises(ModelLoadError, match=r"sd3.5_nvfp4.safetensors holds weights quantized in a layout not read here \(.* is quantized as nvfp4\)"):
        StableDiffusion35.load(str(tmp_path / "sd3.5_nvfp4.safetensors"), offline=True, config_dir=str(folder))
    sd15 = resolve_tiny("tiny:sd15")
    checkpoint, _ = comfy_quantized(load_file(str(sd15.single_file)), mixed=False)
    save_file(checkpoint, tmp_path / "sd15_fp8_scaled.safetensors")
    with pytest.raises(ModelLoadError, match=r"'sd15_fp8_scaled.safetensors' holds weights in ComfyUI's scaled or mixed-precision layout"):
        StableDiffusion15.load(str(tmp_path / "sd15_fp8_scaled.safetensors"), offline=True, config_dir=str(sd15.diffusers_dir))
    assert Path(tmp_path / "sd15_fp8_scaled.safetensors").is_file()


def test_a_scaled_stable_cascade_stage_c_file_as_prior_model(tmp_path):
    from ot_gradio.models.stable_cascade import StableCascade

    paths = resolve_tiny("tiny:cascade")
    root = paths.diffusers_dir.parent
    quantized, values = comfy_quantized(load_file(str(paths.single_file)), mixed=False)
    save_file(quantized, tmp_path / "stage_c_fp8_scaled.safetensors")
    save_file({k: v.float().contiguous() for k, v in values.items()}, tmp_path / "values.safetensors")
    others = {"decoder": str(root / "decoder"), "effnet_encoder": str(root / "decoder" / "effnet_encoder.safetensors")}
    model = StableCascade.load(str(root / "prior"), offline=True, part_models={"prior": str(tmp_path / "stage_c_fp8_scaled.safetensors"), **others})
    expected = StableCascade.load(str(root / "prior"), offline=True, part_models={"prior": str(tmp_path / "values.safetensors"), **others})
    assert _close(model.prior, expected.prior.state_dict()) == 0.0


def test_a_scaled_fp8_vae_file_reads_back_to_its_values(tmp_path):
    from ot_gradio.models.wan import Wan21

    folder = str(resolve_tiny("tiny:wan").diffusers_dir)
    base = Wan21.load(folder, offline=True)
    quantized, values = comfy_quantized({f"vae.{k}": v for k, v in base.vae.state_dict().items()}, mixed=False, convs=True)
    assert sum(k.endswith(".scale_weight") for k in quantized) > 10
    quantized["vae.scaled_fp8"] = quantized.pop("scaled_fp8")  # a checkpoint's VAE part, marker under its prefix
    save_file(quantized, tmp_path / "vae_fp8_scaled.safetensors")
    model = Wan21.load(folder, offline=True, part_models={"vae": str(tmp_path / "vae_fp8_scaled.safetensors")})
    assert _close(model.vae, {k.removeprefix("vae."): v for k, v in values.items()}) < 1e-6
