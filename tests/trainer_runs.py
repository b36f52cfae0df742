"""A tiny SD 1.5 LoRA run through the Trainer, for tests that compare two runs' losses: its
config and a reporter that keeps the losses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ot_gradio.training.run_state import Reporter


class Losses(Reporter):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def metrics(self, **fields: Any) -> None:
        self.losses.append(fields["loss"])


def tiny_sd15_lora_config(tiny_model: Any, data: Path, work: Path, **changes: Any) -> dict[str, Any]:
    """The tiny SD 1.5 (the `tiny_model` fixture) trained as a rank-4 LoRA of every layer on the
    CPU at 64 px on `data`, written under `work`, with no samples, backups or logs; `changes`
    replace top-level keys (a section whole)."""
    return {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny_model.diffusers_dir),
        "train_device": "cpu", "workspace_dir": str(work / "ws"), "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "out" / "lora.safetensors"), "concepts": [{"name": "c", "path": str(data)}],
        "resolution": "64", "learning_rate_warmup_steps": 0, "lora_rank": 4, "layer_filter_preset": "full", "samples": [],
        "backup_after_unit": "NEVER", "tensorboard": False, **changes,
    }
