"""One LoRA of a tiny model saved in several output formats: the convert tool's tests compare what
it makes of each file (the same trained weights, so the files must agree)."""

from __future__ import annotations

from pathlib import Path

import torch


def random_lora_files(model_type: str, base: Path, formats: tuple[str, ...], folder: Path, **config) -> dict[str, Path]:
    """format -> the file of one LoRA (rank 4, alpha 2, its weights moved off zero by a seeded
    random draw) of the model at `base`, saved as `<folder>/<format>.safetensors`; `config` goes
    into the run's config."""
    from ot_gradio.config.enums import ModelFormat
    from ot_gradio.config.io import load_config
    from ot_gradio.models.registry import get_family
    from ot_gradio.training.methods import get_method

    cfg = load_config({"model_type": model_type, "training_method": "LORA", "base_model_name": str(base), "lora_rank": 4,
                       "lora_alpha": 2, **config}).config
    model, method = get_family(model_type).load(str(base)), get_method(cfg.training_method)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (p for g in method.setup(model, cfg, torch.device("cpu")) for p in g.params):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return {fmt: method.save(model, cfg.model_copy(update={"output_model_format": ModelFormat(fmt)}), folder / f"{fmt}.safetensors", {})
            for fmt in formats}
