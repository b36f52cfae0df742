"""CAME_8BIT: CAME (confidence-guided adaptive memory-efficient optimization, Luo et al. 2023)
whose first moment is kept in 8 bits, as the Sana 1.5 paper (arXiv 2501.18427, section 2.3)
describes and OneTrainer offers under this name.

The update is CAME's. For a weight matrix (or a 1x1 convolution, its 2-D view) the second moment
and the instability are factored into a row and a column vector; other tensors (biases, larger
convolutions) keep them whole, as Adam does. The first moment of a factored tensor with more
than `min_8bit_size` values is stored block-wise in uint8: each block of `quant_block_size`
values keeps its minimum and its step ((max - min) / 255), so a moment costs about one byte a
value instead of four. Each step dequantizes it, updates it in float32 and quantizes it again.

The state is plain tensors (the codes, the per-block steps and minimums), so a saved optimizer
state reloads exactly and a resumed run continues where it stopped. Stochastic rounding of
bfloat16 weights is applied around the step like for every other optimizer (registry.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F

from .stochastic_rounding import load_state_exactly

_TINY = torch.finfo(torch.float32).tiny


def factored(shape: torch.Size) -> bool:
    """CAME factors the moments of a matrix and of a 1x1 convolution (a matrix too)."""
    return len(shape) == 2 or (len(shape) == 4 and shape[2] == 1 and shape[3] == 1)


def quantize(values: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(uint8 codes of shape (blocks, block), each block's step, each block's minimum)."""
    flat = values.reshape(-1).float()
    pad = (-flat.numel()) % block
    blocks = (F.pad(flat, (0, pad)) if pad else flat).view(-1, block)
    low = blocks.amin(dim=1)
    step = (blocks.amax(dim=1) - low) / 255.0
    codes = ((blocks - low[:, None]) / step.clamp(min=_TINY)[:, None]).round_().clamp_(0, 255).to(torch.uint8)
    return codes, step, low


def dequantize(codes: torch.Tensor, step: torch.Tensor, low: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    numel = 1
    for size in shape:
        numel *= size
    return (codes.float() * step[:, None] + low[:, None]).view(-1)[:numel].view(shape)


def _rms(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.norm(2) / (tensor.numel() ** 0.5)


def _inverse_root(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """The factored estimate's 1/sqrt: rows normalised by their mean, times the columns."""
    return (row / row.mean(dim=-1, keepdim=True)).rsqrt().unsqueeze(-1) * col.unsqueeze(-2).rsqrt()


class CAME8bit(torch.optim.Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-4, betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
                 eps: tuple[float, float] = (1e-30, 1e-16), weight_decay: float = 0.0, clip_threshold: float = 1.0,
                 min_8bit_size: int = 16384, quant_block_size: int = 2048):
        if not lr > 0:
            raise ValueError(f"learning rate must be > 0, not {lr}")
        if not all(0.0 <= b <= 1.0 for b in betas):
            raise ValueError(f"betas must lie in [0, 1], not {betas}")
        if int(quant_block_size) < 1:
            raise ValueError(f"quant_block_size must be >= 1, not {quant_block_size}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": tuple(eps), "weight_decay": weight_decay,
                                  "clip_threshold": clip_threshold, "min_8bit_size": int(min_8bit_size),
                                  "quant_block_size": int(quant_block_size)})

    def _init_state(self, p: torch.Tensor, grad: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[p]
        state["step"] = 0
        shape = grad.shape
        if factored(shape):
            rows, cols = shape[0], shape[1]
            for name, size in (("exp_avg_sq_row", rows), ("exp_avg_sq_col", cols), ("exp_avg_res_row", rows), ("exp_avg_res_col", cols)):
                state[name] = torch.zeros(size, dtype=torch.float32, device=grad.device)
        else:
            state["exp_avg_sq"] = torch.zeros(shape, dtype=torch.float32, device=grad.device)
        if factored(shape) and grad.numel() > group["min_8bit_size"]:
            codes, step, low = quantize(torch.zeros(shape, device=grad.device), group["quant_block_size"])
            state["exp_avg_codes"], state["exp_avg_step"], state["exp_avg_min"] = codes, step, low
        else:
            state["exp_avg"] = torch.zeros(shape, dtype=torch.float32, device=grad.device)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The state as saved: torch would cast the float32 moments to a bfloat16 weight's dtype."""
        load_state_exactly(self, state_dict, super().load_state_dict)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._step_one(p, group)
        return loss

    def _step_one(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        grad = p.grad.float()
        if grad.is_sparse:
            raise RuntimeError("CAME_8BIT does not support sparse gradients")
        state = self.state[p] or self._init_state(p, grad, group)
        state["step"] += 1
        beta1, beta2, beta3 = group["betas"]
        eps1, eps2 = group["eps"]
        shape = grad.shape
        squared = grad * grad + eps1
        if "exp_avg_sq_row" in state:
            matrix = squared.view(shape[0], shape[1])
            state["exp_avg_sq_row"].mul_(beta2).add_(matrix.mean(dim=-1), alpha=1 - beta2)
            state["exp_avg_sq_col"].mul_(beta2).add_(matrix.mean(dim=-2), alpha=1 - beta2)
            update = _inverse_root(state["exp_avg_sq_row"], state["exp_avg_sq_col"]).view(shape)
        else:
            state["exp_avg_sq"].mul_(beta2).add_(squared, alpha=1 - beta2)
            update = state["exp_avg_sq"].rsqrt()
        update.mul_(grad)
        update.div_((_rms(update) / group["clip_threshold"]).clamp_(min=1.0))

        quantized = "exp_avg_codes" in state
        exp_avg = (dequantize(state["exp_avg_codes"], state["exp_avg_step"], state["exp_avg_min"], shape)
                   if quantized else state["exp_avg"])
        exp_avg.mul_(beta1).add_(update, alpha=1 - beta1)
        if quantized:
            state["exp_avg_codes"], state["exp_avg_step"], state["exp_avg_min"] = quantize(exp_avg, group["quant_block_size"])

        if "exp_avg_res_row" in state:  # confidence: how far this update is from the moment
            residual = ((update - exp_avg) ** 2 + eps2).view(shape[0], shape[1])
            state["exp_avg_res_row"].mul_(beta3).add_(residual.mean(dim=-1), alpha=1 - beta3)
            state["exp_avg_res_col"].mul_(beta3).add_(residual.mean(dim=-2), alpha=1 - beta3)
            update = _inverse_root(state["exp_avg_res_row"], state["exp_avg_res_col"]).view(shape).mul_(exp_avg)
        else:
            update = exp_avg.clone()

        if group["weight_decay"] > 0:
            p.mul_(1 - group["weight_decay"] * group["lr"])
        p.add_(update.to(p.dtype), alpha=-group["lr"])
