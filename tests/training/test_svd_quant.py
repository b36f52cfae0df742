"""SVDQuant (quantization.svd_dtype / svd_rank / cache_dir, training/svd_quant.py): a quantized
layer keeps its weight's largest singular directions unquantized, which shrinks its error; the
factors stay frozen, every reader of the full weight adds them, the SVD is cached by content."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.quantize import FP8, QUANTIZED, quantize_linear_layers, quantize_rows
from ot_gradio.training.svd_quant import SvdSpec, svd_spec

CPU = torch.device("cpu")
OUT, IN = 48, 80


def _weight() -> torch.Tensor:
    """A weight as trained ones are: a few strong directions plus small noise."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(OUT, 6, generator=g) @ torch.randn(6, IN, generator=g) + 0.05 * torch.randn(OUT, IN, generator=g)


def _quantized(data_type: str, svd: SvdSpec | None) -> nn.Linear:
    model = nn.Sequential(nn.Linear(IN, OUT))
    with torch.no_grad():
        model[0].weight.copy_(_weight())
        model[0].bias.uniform_(-1, 1)
    quantize_linear_layers(model, data_type, CPU, torch.float32, "unet", svd=svd)
    return model[0]


def _error(layer: nn.Module, x: torch.Tensor) -> float:
    reference = F.linear(x, _weight(), layer.bias.float())
    with torch.no_grad():
        return float((layer(x).float() - reference).norm() / reference.norm())


@pytest.mark.parametrize("data_type", [t.value for t in QUANTIZED])
def test_svd_shrinks_the_error_and_adds_a_frozen_low_rank_term(data_type):
    x = torch.randn(32, IN, generator=torch.Generator().manual_seed(1))
    plain, corrected = _quantized(data_type, None), _quantized(data_type, SvdSpec(torch.float32, 8))
    ratio = _error(corrected, x) / _error(plain, x)
    assert ratio < 0.3, f"{data_type}: the error with SVD is {ratio:.3f} of the error without"
    up, down = corrected.svd_up, corrected.svd_down
    assert up.shape == (OUT, 8) and down.shape == (8, IN)
    u, s, vh = torch.linalg.svd(_weight(), full_matrices=False)
    torch.testing.assert_close(up @ down, (u[:, :8] * s[:8]) @ vh[:8], atol=1e-4, rtol=1e-4)  # the best rank-8 part
    names = {n for n, _ in corrected.named_parameters()} | set(corrected.state_dict())
    assert not up.requires_grad and not down.requires_grad and not any("svd" in n for n in names)  # frozen, not saved
    with torch.no_grad():  # forward = the quantized layer's own forward (no hooks) + the low-rank term
        torch.testing.assert_close(corrected(x), corrected.forward(x) + F.linear(F.linear(x, down), up))


def test_factors_are_stored_in_the_svd_dtype_and_the_rank_is_capped():
    layer = _quantized("FLOAT_8", SvdSpec(torch.bfloat16, 500))
    assert layer.svd_up.dtype == layer.svd_down.dtype == torch.bfloat16
    assert layer.svd_up.shape == (OUT, OUT) and layer.svd_down.shape == (OUT, IN)  # min(out, in) directions at most


def test_the_factors_key_cached_text_encoder_outputs():
    """Another SVD rank or factor type changes what a quantized text encoder outputs, so its text
    cache entries are not reused (data/text_cache.py fingerprints the factors)."""
    from ot_gradio.data.text_cache import text_encoder_id

    def encoder_id(svd: SvdSpec | None, factor: float = 1.0) -> str:
        torch.manual_seed(0)  # the bias
        layer = _quantized("FLOAT_8", svd)
        if factor != 1.0:  # the same quantized weight, other factors
            layer.svd_up.mul_(factor)
        model = type("M", (), {})()
        model.text_encoder_names, model.parts = ["text_encoder"], {"text_encoder": nn.Sequential(layer)}
        return text_encoder_id(model)

    ids = [encoder_id(svd) for svd in (None, SvdSpec(torch.bfloat16, 4), SvdSpec(torch.bfloat16, 8), SvdSpec(torch.float16, 8))]
    assert len(set(ids)) == 4, ids
    assert encoder_id(SvdSpec(torch.float16, 8)) == ids[3]  # the same settings reuse their entries
    assert encoder_id(SvdSpec(torch.float16, 8), factor=2.0) != ids[3]  # the factors themselves are keyed


@pytest.mark.parametrize("data_type", ["FLOAT_8", "INT_8", "NFLOAT_4"])
def test_full_weight_readers_include_the_low_rank_part(data_type):
    """DoRA's norms (float_weight) and a quantized part saved whole (plain_state_dict) read ~W."""
    from ot_gradio.models.common import plain_state_dict
    from ot_gradio.training.float_weight import float_weight

    errors = {}
    for svd in (None, SvdSpec(torch.float32, 8)):
        layer = _quantized(data_type, svd)
        read, saved = float_weight(layer), plain_state_dict(layer, "unet")
        assert set(saved) == {"weight", "bias"}
        torch.testing.assert_close(saved["weight"], read)
        errors[svd is not None] = float((read - _weight()).norm() / _weight().norm())
    assert errors[True] < 0.3 * errors[False], errors


def test_the_meta_planner_runs_the_low_rank_term_and_counts_its_bytes():
    """OneTrainer's Flux LoRA preset (NF4 transformer and T5) planned on the meta device, with SVDQuant."""
    from ot_gradio.config.io import load_config
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny.flux import tiny_flux_components
    from ot_gradio.training.memory_meta import estimate_on_meta

    preset = Path(__file__).resolve().parents[1] / "config/data/onetrainer-training-presets/Flux Dev.1/#flux LoRA.json"
    plans = {}
    for svd in ("NONE", "BFLOAT_16"):
        config = load_config(preset).config.model_copy(update={"quantization": TrainConfig().quantization.model_copy(
            update={"svd_dtype": svd, "svd_rank": 4})})
        components = tiny_flux_components()
        for value in components.values():
            if isinstance(value, nn.Module):
                value.to("meta")
        model = get_family("FLUX_DEV_1")(components)
        plans[svd], _ = estimate_on_meta(model, config, 16 * 1024**3)
        assert not plans[svd].probe_error
    factors = sum((m.svd_up.numel() + m.svd_down.numel()) * 2 for m in model.transformer.modules() if hasattr(m, "svd_up"))
    assert factors > 0
    assert plans["BFLOAT_16"].weights["transformer"][1] - plans["NONE"].weights["transformer"][1] == factors


def test_the_cache_serves_later_runs_and_other_ranks(tmp_path, monkeypatch):
    first = _quantized("FLOAT_8", SvdSpec(torch.float32, 8, tmp_path))
    files = list(tmp_path.iterdir())
    assert [f.suffix for f in files] == [".safetensors"]

    def refuse(*_a, **_k):
        raise AssertionError("the SVD was computed again")

    monkeypatch.setattr(torch.linalg, "svd", refuse)
    again = _quantized("FLOAT_8", SvdSpec(torch.float32, 8, tmp_path))
    torch.testing.assert_close(again.svd_up, first.svd_up)
    torch.testing.assert_close(again.weight.float(), first.weight.float())
    wider = _quantized("FLOAT_8", SvdSpec(torch.float32, 16, tmp_path))  # rank 16 from the same file
    assert wider.svd_up.shape == (OUT, 16) and list(tmp_path.iterdir()) == files
    torch.testing.assert_close(wider.svd_up[:, :8], first.svd_up)
    files[0].write_bytes(b"cut short")  # a damaged file is computed again, not trusted
    monkeypatch.undo()
    torch.testing.assert_close(_quantized("FLOAT_8", SvdSpec(torch.float32, 8, tmp_path)).svd_up, first.svd_up)


def _config(**fields) -> TrainConfig:
    return TrainConfig.model_validate({"model_type": "FLUX_DEV_1", "training_method": "LORA", **fields})


def test_settings_refused_or_warned_before_the_model_loads():
    gguf = _config(transformer={"weight_dtype": "GGUF", "model_name": "flux-Q4_K.gguf"}, quantization={"svd_dtype": "BFLOAT_16"})
    refused = [e for e in errors(gguf) if "svd" in e]
    assert len(refused) == 1 and refused[0].startswith("quantization.svd_dtype:") and "GGUF" in refused[0]
    assert not [e for e in errors(gguf.model_copy(update={"quantization": TrainConfig().quantization})) if "svd" in e]
    float8 = _config(transformer={"weight_dtype": "FLOAT_8"}, quantization={"svd_dtype": "FLOAT_8"})
    assert any(e.startswith("quantization.svd_dtype:") and "FLOAT_32, FLOAT_16 or BFLOAT_16" in e for e in errors(float8))
    with pytest.raises(ValueError, match="quantization.svd_dtype"):
        svd_spec(float8)
    useless = _config(quantization={"svd_dtype": "FLOAT_16"})  # nothing quantized: said, not refused
    assert any(w.startswith("quantization.svd_dtype:") and "no effect" in w for w in check(useless))
    assert not [e for e in errors(useless) if "svd" in e]
    used = _config(transformer={"weight_dtype": "NFLOAT_4"}, quantization={"svd_dtype": "FLOAT_16", "svd_rank": 4, "cache_dir": "c"})
    assert not [w for w in check(used) + errors(used) if "svd" in w or "quantization" in w]
    assert svd_spec(used) == SvdSpec(torch.float16, 4, Path("c"))


def test_lora_on_an_svd_quantized_unet_trains_through_the_trainer(tmp_path):
    from safetensors.torch import load_file

    from ot_gradio.config.io import load_config
    from ot_gradio.data import ensure_demo_dataset
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    class Losses(Reporter):
        def __init__(self):
            self.losses = []

        def metrics(self, **fields):
            self.losses += [fields["loss"]] if "loss" in fields else []

    ensure_demo_dataset(tmp_path / "shapes")
    for extra in sorted((tmp_path / "shapes").glob("*.png"))[4:]:
        extra.unlink()
    out = tmp_path / "out" / "lora.safetensors"
    config = load_config({
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(save_tiny_sd15(tmp_path / "tiny").diffusers_dir),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(out), "output_model_format": "KOHYA_LORA", "concepts": [{"name": "c", "path": str(tmp_path / "shapes")}],
        "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate_warmup_steps": 0, "lora_rank": 2, "lora_alpha": 2,
        "text_encoder": {"train": False}, "unet": {"train": True, "weight_dtype": "FLOAT_8"}, "samples": [],
        "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
        "quantization": {"svd_dtype": "BFLOAT_16", "svd_rank": 4},
    }).config
    reporter = Losses()
    trainer = Trainer(config, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "o", None, []), reporter)
    trainer.setup()
    unet = trainer.model.unet
    factors = {n: b.clone() for n, b in unet.named_buffers() if n.endswith(("svd_up", "svd_down"))}
    lora = {n: p.detach().clone() for n, p in unet.named_parameters() if "lora_B" in n and p.requires_grad}
    assert factors and lora and all(t.dtype == torch.bfloat16 for t in factors.values())
    trainer.train()
    assert reporter.losses and all(torch.isfinite(torch.tensor(float(v))) for v in reporter.losses)
    assert all(torch.equal(b, factors[n]) for n, b in unet.named_buffers() if n in factors)  # frozen
    moved = [n for n, p in unet.named_parameters() if n in lora and not torch.equal(p.detach(), lora[n])]
    assert moved, "no LoRA weight moved: the adapters got no gradient"
    saved = load_file(str(out))
    assert saved and not [k for k in saved if "svd" in k]


def test_configure_model_corrects_the_layers_the_filter_quantizes_and_dora_reads_them():
    """Through the run's setup: the unet's filtered layers (and only they) are quantized with
    factors of the config's rank and type; DoRA's magnitudes are the norms of the weight with them."""
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model
    from ot_gradio.training.float_weight import float_weight
    from ot_gradio.training.methods import get_method

    torch.manual_seed(0)
    model = StableDiffusion15(**tiny_sd15_components())
    before = {n: m.weight.detach().clone() for n, m in model.unet.named_modules() if type(m) is nn.Linear}
    config = TrainConfig.model_validate({
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "lora_rank": 2, "lora_decompose": True, "output_model_format": "KOHYA_LORA",
        "text_encoder": {"train": False}, "unet": {"train": True, "weight_dtype": "FLOAT_8"},
        "quantization": {"layer_filter": "to_q", "svd_dtype": "FLOAT_16", "svd_rank": 8}})
    configure_model(model, config, CPU, Precision("FLOAT_32", CPU))
    corrected = {n: m for n, m in model.unet.named_modules() if hasattr(m, "svd_up")}
    assert corrected and set(corrected) == {n for n in before if n.endswith("to_q")}
    assert all(m.svd_up.dtype == torch.float16 and m.svd_down.shape[0] == 8 for m in corrected.values())
    get_method("LORA").setup(model, config, CPU)
    ours = plain = 0.0
    for name, base in corrected.items():
        layer = model.unet.get_submodule(name.rpartition(".")[0]).to_q
        magnitude = layer.lora_magnitude_vector["default"].weight.reshape(-1)
        torch.testing.assert_close(magnitude, float_weight(base).norm(dim=0))
        codes, scale = quantize_rows(before[name], FP8)  # the same weight in FLOAT_8 without SVD
        ours += float((magnitude - before[name].norm(dim=0)).norm())
        plain += float(((codes.float() * scale).norm(dim=0) - before[name].norm(dim=0)).norm())
    assert ours < 0.5 * plain, (ours, plain)
