"""The convert tool for the families with language-model text encoders: Z-Image,
Flux.2, Qwen-Image and Anima (with its LLM adapter) write the transformer alone as their single file and read it back with the
other parts from the config folder, losslessly; Sana, which has no single file here, is refused
naming why; LoRA keys converted either way are exactly what the trainer writes in that format."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.tools.jobs import JobError, run_inline
from tests.tools.lora_files import random_lora_files

FAMILIES = {"Z_IMAGE": "tiny:z-image", "FLUX_2": "tiny:flux2-klein", "QWEN": "tiny:qwen-image", "KREA_2": "tiny:krea2", "SANA": "tiny:sana", "ANIMA": "tiny:anima"}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert not different, different[:5]


def _transformer(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_llm_encoder_families_convert_checkpoints_and_lora_keys(model_type, tmp_path):
    from ot_gradio.models.tiny import resolve_tiny

    base = resolve_tiny(FAMILIES[model_type]).diffusers_dir
    single = {"operation": "checkpoint", "model_type": model_type, "input": str(base), "output": str(tmp_path / "m.safetensors")}
    if model_type == "SANA":
        with pytest.raises(JobError, match="^format: Sana is saved as a diffusers folder"):
            run_inline("convert", single)
    else:
        result = run_inline("convert", single)
        assert result["transformer_only"]
        back = {"operation": "checkpoint", "model_type": model_type, "input": result["output"], "config": str(base),
                "output": str(tmp_path / "back")}
        run_inline("convert", back)
        _same(_transformer(tmp_path / "back"), _transformer(base))

    files = random_lora_files(model_type, base, ("KOHYA_LORA", "DIFFUSERS_LORA"), tmp_path, layer_filter_preset="full",
                              text_encoder={"train": False})
    for source, target, to in (("KOHYA_LORA", "DIFFUSERS_LORA", "diffusers"), ("DIFFUSERS_LORA", "KOHYA_LORA", "kohya")):
        out = run_inline("convert", {"operation": "lora", "model_type": model_type, "input": str(files[source]), "base": str(base),
                                     "output": str(tmp_path / f"to-{to}.safetensors"), "to": to})
        _same(load_file(out["output"]), load_file(str(files[target])))


@pytest.mark.parametrize("model_type", ["QWEN", "Z_IMAGE", "SANA"])
def test_merge_reads_our_own_kohya_files_with_the_text_encoder(model_type, tmp_path):
    """Their language-model encoders' layers (`o_proj`, `gate_proj`, ...) are written
    `lora_te_text_model_...`; merge finds every one and applies it at alpha / rank."""
    from ot_gradio.config.enums import ModelFormat
    from ot_gradio.config.io import load_config
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.training.lora import lora_layers
    from ot_gradio.training.methods import get_method

    base = resolve_tiny(FAMILIES[model_type]).diffusers_dir
    cfg = load_config({"config_version": 2, "model_type": model_type, "training_method": "LORA", "base_model_name": str(base), "lora_rank": 4,
                       "lora_alpha": 1, "layer_filter_preset": "full", "text_encoder": {"train": True}}).config
    model, method = get_family(model_type).load(str(base)), get_method(cfg.training_method)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (p for g in method.setup(model, cfg, torch.device("cpu")) for p in g.params):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    lora = method.save(model, cfg.model_copy(update={"output_model_format": ModelFormat.KOHYA_LORA}), tmp_path / "k.safetensors", {})
    expected = {}
    with torch.no_grad():
        for name, layer in lora_layers(model.text_encoder).items():
            delta = layer.lora_B.default.weight @ layer.lora_A.default.weight
            expected[name] = layer.base_layer.weight + delta / 4
    assert any(name.endswith("mlp.down_proj") for name in expected)

    result = run_inline("convert", {"operation": "merge", "model_type": model_type, "base": str(base), "lora": str(lora),
                                    "output": str(tmp_path / "merged"), "format": "diffusers", "dtype": "float32"})
    total = sum(len(lora_layers(getattr(model, part))) for part in (model.denoiser, "text_encoder"))
    assert result["layers"] == total
    merged = dict(get_family(model_type).load(str(tmp_path / "merged")).text_encoder.named_modules())
    for name, weight in expected.items():
        torch.testing.assert_close(merged[name].weight, weight, rtol=1e-5, atol=1e-6)


# families whose KOHYA_LORA / COMFY_LORA write q, k and v as one layer on the fused qkv (training/lora_fusion.py)
FUSED_QKV = {"IDEOGRAM_4": "tiny:ideogram4", "HUNYUAN_VIDEO": "tiny:hunyuan_video"}


@pytest.mark.parametrize(("model_type", "preset"), [*((m, "full") for m in FUSED_QKV), ("HUNYUAN_VIDEO", "attn-only")])
def test_a_fused_qkv_comfy_lora_merges_and_converts_as_its_diffusers_twin(model_type, preset, tmp_path):
    """The COMFY_LORA file (q/k/v fused) and the DIFFUSERS_LORA file of one LoRA: merge puts the
    same weights into the base model, and each converts into the other exactly; also when the
    layer filter trains part of a fused weight (attn-only: linear1 without its MLP input)."""
    from ot_gradio.models.tiny import resolve_tiny

    base = resolve_tiny(FUSED_QKV[model_type]).diffusers_dir
    files = random_lora_files(model_type, base, ("COMFY_LORA", "DIFFUSERS_LORA"), tmp_path, layer_filter_preset=preset,
                              text_encoder={"train": False})
    assert any(".qkv." in k or ".linear1." in k for k in load_file(str(files["COMFY_LORA"])))
    trained = {k.split(".lora_")[0].removeprefix("transformer.") + ".weight" for k in load_file(str(files["DIFFUSERS_LORA"]))}
    merged = {}
    for fmt, path in files.items():
        result = run_inline("convert", {"operation": "merge", "model_type": model_type, "base": str(base), "lora": str(path),
                                        "output": str(tmp_path / f"merged-{fmt}"), "format": "diffusers", "dtype": "float32"})
        merged[fmt] = _transformer(tmp_path / f"merged-{fmt}")
        assert result["layers"] == len(load_file(str(files["DIFFUSERS_LORA"]))) // 2  # every q, k and v layer found in the fused one
    original = _transformer(base)
    assert merged["COMFY_LORA"].keys() == merged["DIFFUSERS_LORA"].keys() == original.keys()
    qkv = [k for k in original if k.endswith(".weight") and any(f".{n}." in k for n in ("to_q", "to_k", "to_v", "add_q_proj", "proj_mlp"))]
    assert qkv and all(torch.equal(merged["COMFY_LORA"][k], original[k]) != (k in trained) for k in qkv)
    assert preset == "full" or any(k not in trained for k in qkv)  # some fused weight trained in part
    for key, weight in merged["DIFFUSERS_LORA"].items():
        torch.testing.assert_close(merged["COMFY_LORA"][key], weight, rtol=1e-6, atol=1e-6)
    for source, target, to in (("COMFY_LORA", "DIFFUSERS_LORA", "diffusers"), ("DIFFUSERS_LORA", "COMFY_LORA", "kohya")):
        out = run_inline("convert", {"operation": "lora", "model_type": model_type, "input": str(files[source]), "base": str(base),
                                     "output": str(tmp_path / f"to-{to}.safetensors"), "to": to})
        _same(load_file(out["output"]), load_file(str(files[target])))
