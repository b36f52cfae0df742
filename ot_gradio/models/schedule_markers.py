"""ComfyUI's schedule markers in an SDXL single file: an empty tensor named `v_pred` says the model
predicts velocity, and `ztsnr` beside it that its noise schedule is rescaled to zero terminal SNR
(NoobAI-XL V-pred and other v-prediction SDXL checkpoints ship them; ComfyUI reads them in
comfy/supported_models.py and writes `v_pred` when it saves such a model). A single file carries no
scheduler config, so without reading them such a model trained as an epsilon one: a LoRA of noise.

Read: the file's header only (safetensors; a `.ckpt` is not searched). Written: by our SDXL
single-file saver, from the schedule the model trained with (a v-prediction fine-tune of an
epsilon model is marked too, so ComfyUI samples it as it trained).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

V_PRED, ZTSNR = "v_pred", "ztsnr"
# ComfyUI's marks of an SDXL-shaped model on an EDM schedule: Playground v2.5 (`edm_mean`, `edm_std`),
# CosXL (`edm_vpred.sigma_max`). Training here uses the DDPM schedule, so they are refused by name.
EDM_KEYS = ("edm_mean", "edm_std", "edm_vpred.sigma_max", "edm_vpred.sigma_min")


def read_markers(path: str | Path) -> frozenset[str]:
    """The markers in a `.safetensors` file's header ({} for another file or an unreadable header)."""
    path = Path(path)
    if path.suffix.lower() != ".safetensors":
        return frozenset()
    from safetensors import safe_open  # noqa: PLC0415

    try:
        with safe_open(str(path), "pt") as f:
            keys = set(f.keys())
    except Exception:  # noqa: BLE001 (the loader names a broken file itself)
        return frozenset()
    return frozenset(k for k in (V_PRED, ZTSNR, *EDM_KEYS) if k in keys)


def edm_problem(name: str, markers: frozenset[str], scheduler: object) -> str | None:
    """Why `name` cannot train here when it is an EDM model (by its file's markers or its
    diffusers scheduler, e.g. Playground v2.5's EDMDPMSolverMultistepScheduler); None otherwise."""
    edm = sorted(markers & set(EDM_KEYS))
    if not edm and not type(scheduler).__name__.startswith("EDM"):
        return None
    why = f"its file holds {', '.join(edm)}" if edm else f"its scheduler is {type(scheduler).__name__}"
    return (f"'{name}' is an EDM model (Playground v2.5, CosXL: {why}); SDXL trains here on the DDPM schedule "
            "(epsilon or v-prediction), which would not fit it. Pick an SDXL model on the usual schedule.")


def marked_scheduler(scheduler: Any, markers: frozenset[str]) -> Any:
    """`scheduler` with what the markers say: v-prediction, and with `ztsnr` the zero-terminal-SNR
    schedule ('trailing' spacing, as the paper advises); as it was without `v_pred` (ComfyUI reads
    `ztsnr` only beside it)."""
    if V_PRED not in markers:
        return scheduler
    overrides: dict[str, Any] = {"prediction_type": "v_prediction"}
    if ZTSNR in markers:
        overrides.update(rescale_betas_zero_snr=True, timestep_spacing="trailing")
    return type(scheduler).from_config(scheduler.config, **overrides)


def markers_for(config: Any) -> dict[str, torch.Tensor]:
    """The marker tensors for a model whose (training) noise schedule has `config`."""
    if config.get("prediction_type") != "v_prediction":
        return {}
    out = {V_PRED: torch.tensor([])}
    if config.get("rescale_betas_zero_snr"):
        out[ZTSNR] = torch.tensor([])
    return out
