"""ComfyUI's schedule markers in an SDXL single file: an empty tensor named `v_pred` says the model
predicts velocity, and `ztsnr` beside it that its noise schedule is rescaled to zero terminal SNR
(NoobAI-XL V-pred and other v-prediction SDXL checkpoints ship them; ComfyUI reads them in
comfy/supported_models.py and writes `v_pred` when it saves such a model). A single file carries no
scheduler config, so without reading them such a model trained as an epsilon one: a LoRA of noise.

Read: the file's header only (safetensors; a `.ckpt` is not searched). Written: by our SDXL
single-file saver, from the schedule the model trained with (a v-prediction fine-tune of an
epsilon model is marked too, so ComfyUI samples it as it trained).

The original SD checkpoints, and OneTrainer's SD 1.x/2.x/XL single files, also hold the DDPM noise
schedule as buffers (`betas`, `alphas_cumprod`, ...: `SCHEDULE_KEYS`), which A1111/Forge load with
the weights. Our SD single files write them from the training schedule (`schedule_buffers`), and a
file whose `alphas_cumprod` ends at zero loads with the zero-terminal-SNR schedule (`file_scheduler`,
which also reads the `<stem>.yaml` beside the file: models/ldm_config.py).
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


# OneTrainer's map_noise_scheduler (modules/util/convert/convert_diffusers_to_ckpt_util.py): ldm's buffers
SCHEDULE_KEYS = ("betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
                 "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
                 "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2")
# `alphas_cumprod[-1]` below this: zero terminal SNR (0.0047 on the standard schedule; diffusers'
# Euler and A1111 put 2**-24 and 4.9e-8 where a rescaled schedule has 0)
ZTSNR_ALPHA_BAR = 1e-5


def schedule_buffers(scheduler: Any) -> dict[str, torch.Tensor]:
    """ldm's noise-schedule buffers from `scheduler`'s betas, as OneTrainer's DiffusionScheduleCoefficients
    computes them, in float32 (OneTrainer casts them to the output type with the weights; they are
    48 KB, and A1111 keeps alphas_cumprod in float32)."""
    betas = torch.as_tensor(scheduler.betas).detach().to("cpu", torch.float32)
    alphas = 1 - betas
    cumprod = torch.cumprod(alphas, dim=0)
    prev = torch.cat((torch.ones(1, dtype=cumprod.dtype), cumprod[:-1]))
    posterior_variance = betas * (1 - prev) / (1 - cumprod)
    values = (
        betas, cumprod, prev, cumprod.sqrt(), (1 - cumprod).sqrt(), torch.log(1 - cumprod), torch.rsqrt(cumprod),
        torch.sqrt(1 / cumprod - 1), posterior_variance,
        torch.log(torch.cat([posterior_variance[1:2], posterior_variance[1:]]).clamp(min=1e-20)),
        betas * prev.sqrt() / (1 - cumprod), (1 - prev) * alphas.sqrt() / (1 - cumprod),
    )
    return {key: value.contiguous() for key, value in zip(SCHEDULE_KEYS, values, strict=True)}


def zero_terminal_snr(path: str | Path) -> bool:
    """Whether the `.safetensors` file's `alphas_cumprod` buffer ends at (about) zero."""
    path = Path(path)
    if path.suffix.lower() != ".safetensors":
        return False
    from safetensors import safe_open  # noqa: PLC0415

    try:
        with safe_open(str(path), "pt") as f:
            if "alphas_cumprod" not in f.keys():
                return False
            alpha_bar = f.get_slice("alphas_cumprod")[-1:]
    except Exception:  # noqa: BLE001 (the loader names a broken file itself)
        return False
    return alpha_bar.numel() == 1 and float(alpha_bar.float()) < ZTSNR_ALPHA_BAR


def file_scheduler(path: str | Path, scheduler: Any) -> Any:
    """`scheduler` with what an SD single file says of its schedule beyond its model type: the
    `<stem>.yaml` beside it ('v' or 'eps', as OneTrainer reads it), and zero terminal SNR from its
    `alphas_cumprod`, with `marked_scheduler`'s overrides. A zero-terminal-SNR file without a yaml
    loads as v-prediction (epsilon is undefined at zero SNR; OneTrainer forces v with it). A file
    that says neither gets `scheduler` back."""
    from ot_gradio.models.ldm_config import read_parameterization  # noqa: PLC0415

    said, ztsnr = read_parameterization(path), zero_terminal_snr(path)
    if said == "epsilon":
        if scheduler.config.get("prediction_type") == "epsilon":
            return scheduler
        return type(scheduler).from_config(scheduler.config, prediction_type="epsilon")
    if said == "v_prediction" or ztsnr:
        return marked_scheduler(scheduler, frozenset({V_PRED, *((ZTSNR,) if ztsnr else ())}))
    return scheduler
