"""Our DIFFUSERS_LORA file of every flow family with a diffusers loader loads in that family's
pipeline with nothing ignored or unexpected, every part we may write with diffusers keys (the
transformer and the text encoders config/families.py lets through), at the trained strength:
the pipeline's fused weights are what training applied."""

from __future__ import annotations

import pytest
import torch

from tests.e2e.runs import lora_load_problems

FAMILIES = {"FLUX_DEV_1": "tiny:flux", "CHROMA_1": "tiny:chroma", "Z_IMAGE": "tiny:z-image", "QWEN": "tiny:qwen-image", "KREA_2": "tiny:krea2", "ANIMA": "tiny:anima",
            "SANA": "tiny:sana", "FLUX_2": "tiny:flux2-klein", "WAN_2_1": "tiny:wan", "WAN_2_2_TI2V_5B": "tiny:wan22-5b",
            "HUNYUAN_VIDEO": "tiny:hunyuan_video", "LTX_2": "tiny:ltx2", "IDEOGRAM_4": "tiny:ideogram4", "HI_DREAM_FULL": "tiny:hidream",
            "WAN_2_2_T2V_A14B": "tiny:wan22-a14b", "WAN_2_2_I2V_A14B": "tiny:wan22-i2v-a14b", "WAN_2_1_I2V": "tiny:wan21-i2v", "ERNIE": "tiny:ernie", "QWEN_IMAGE_EDIT": "tiny:qwen-image-edit",
            "STABLE_DIFFUSION_20_DEPTH": "tiny:sd2-depth"}


def _peft_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: m.base_layer.weight.detach().clone() for name, m in module.named_modules() if hasattr(m, "base_layer")}


def _merged(layer) -> torch.Tensor:
    """W + alpha / rank * B A (a conv's A is k x k, its B 1 x 1), alpha 1 and rank 4."""
    w, up, down = layer.base_layer.weight, layer.lora_B.default.weight, layer.lora_A.default.weight
    return w + (up.flatten(1) @ down.flatten(1)).reshape(w.shape) / 4


@pytest.mark.parametrize("model_type", FAMILIES)
def test_diffusers_lora_loads_whole_at_the_trained_strength(model_type, tmp_path):
    from ot_gradio.config.families import DIFFUSERS_LORA_TEXT_ENCODERS
    from ot_gradio.models.registry import get_family
    from ot_gradio.training.lora import add_lora, lora_layers
    from ot_gradio.training.lora_format import DIFFUSERS, save_lora

    family = get_family(model_type)
    model = family.load(FAMILIES[model_type], offline=True)
    parts = (model.denoiser, *DIFFUSERS_LORA_TEXT_ENCODERS[model.model_type][1])
    torch.manual_seed(0)
    expected = {}
    for part in parts:
        kind = "unet" if part == model.denoiser else "text_encoder"
        module = getattr(model, part)
        add_lora(module, kind=kind, rank=4, alpha=1.0, dropout=0.0, layer_preset="full", presets=model.lora_layer_presets.get(part))
        with torch.no_grad():
            for name, p in module.named_parameters():
                if "lora_B" in name:
                    torch.nn.init.normal_(p, std=0.1)
            expected[part] = {name: _merged(layer) for name, layer in lora_layers(module).items()}
    path = save_lora(tmp_path / "l.safetensors", {p: getattr(model, p) for p in parts}, lora_format=DIFFUSERS,
                     base_model_version=model.lora_base_model_version)

    pipe = family.load(FAMILIES[model_type], offline=True).pipeline()
    # diffusers notes (harmlessly) a text encoder the file has no part for, as for a UNet-only SD file
    problems = lora_load_problems(pipe, path)
    assert [p for p in problems if not (p.startswith("No LoRA keys associated to") and "text_encoder" not in parts)] == []
    # diffusers skips a part it has no hook for without a word: every layer of the file must be in the pipeline
    loaded = sum(len(_peft_weights(m)) for m in pipe.components.values() if isinstance(m, torch.nn.Module))
    assert loaded == sum(len(e) for e in expected.values())
    pipe.fuse_lora(components=list(parts))
    for part in parts:
        fused = _peft_weights(getattr(pipe, part))
        names = {n.removeprefix("text_model.") if n not in fused else n for n in expected[part]}
        assert names == set(fused), part
        for name, weight in expected[part].items():
            torch.testing.assert_close(fused[name.removeprefix("text_model.") if name not in fused else name], weight,
                                       rtol=1e-5, atol=1e-6, msg=f"{part}.{name}")
