"""The Muon optimizers: MUON (pytorch-optimizer's Muon, with its AdamW for the other weights, in
place of Keller Jordan's Muon, which OneTrainer installs from git and which is on no package index:
the same update, Newton-Schulz of the Nesterov momentum scaled by sqrt(max(1, rows/cols))),
MUON_ADV and ADAMUON_ADV (adv-optm).

`split_for_muon` divides each param group into the weights Muon trains and the rest (AdamW inside the
same optimizer), by OneTrainer's rule (config/muon_layers.py); the AdamW part gets the Muon Adam
learning rate and is named ``<group>/adam`` in the log.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ...config.muon_layers import hidden_layer_patterns, is_muon_weight
from ...config.optimizer import effective_settings

TE1 = ("text_encoder", "text_encoder_1", "text_encoder_lora", "text_encoder_1_lora")
TE2 = ("text_encoder_2", "text_encoder_2_lora")


def parameter_names(parts: Mapping[str, torch.nn.Module]) -> dict[int, str]:
    """``<part>.<name>`` of every weight of the model's parts, by the weight's id."""
    return {id(p): f"{part}.{name}" for part, module in parts.items() for name, p in module.named_parameters()}


def split_for_muon(param_groups: list[dict[str, Any]], optimizer_config: Any, names: Mapping[int, str] | None,
                   model_type: Any) -> list[dict[str, Any]]:
    """The groups with ``optim_type`` "muon" or "adam". Without names (an optimizer built outside a
    run) every matrix goes to Muon, as the libraries do by themselves."""
    settings = effective_settings(optimizer_config)
    if names is None:
        def muon(p: torch.Tensor) -> bool:
            return p.ndim >= 2
    else:
        patterns, regex = hidden_layer_patterns(model_type, optimizer_config)

        def muon(p: torch.Tensor) -> bool:
            return is_muon_weight(names.get(id(p), ""), p.ndim, patterns, regex)

    trained = [p for g in param_groups for p in g["params"] if p.requires_grad]
    if not settings.get("MuonWithAuxAdam") or all(muon(p) for p in trained):
        vectors = [g.get("name", "") for g in param_groups if any(p.ndim < 2 and p.requires_grad for p in g["params"])]
        if vectors:
            raise ValueError(f"optimizer.MuonWithAuxAdam: Muon cannot train the 1-D weights (biases, norms) of {', '.join(vectors)}; "
                             "turn on Muon with Adam")
        for group in param_groups:
            group["optim_type"] = "muon"
        return param_groups
    out = []
    for group in param_groups:
        own = [p for p in group["params"] if muon(p)]
        rest = [p for p in group["params"] if not muon(p)]
        if rest:
            adam_lr = settings.get("muon_adam_lr")
            adam_lr = group["lr"] if adam_lr is None else adam_lr
            te_lr = settings.get("muon_te1_adam_lr") if group.get("name") in TE1 else (
                settings.get("muon_te2_adam_lr") if group.get("name") in TE2 else None)
            adam_lr = adam_lr if te_lr is None else te_lr
        if own:  # new dicts: the caller's groups keep all their weights (an optimizer can be built from them again)
            out.append({**group, "params": own, "optim_type": "muon"})
        if rest:
            out.append({**group, "params": rest, "optim_type": "adam", "lr": adam_lr, "name": f"{group.get('name', '')}/adam"})
    return out


def _adam_config(muon_adam_config: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (muon_adam_config or {}).items() if v is not None}


def muon(params: list[dict[str, Any]], lr: float, momentum: float = 0.95, weight_decay: float = 0.0,
         muon_adam_config: dict[str, Any] | None = None) -> torch.optim.Optimizer:
    """pytorch-optimizer's Muon; the AdamW groups take beta1, beta2, eps and weight decay from Muon Adam settings."""
    from pytorch_optimizer import Muon  # noqa: PLC0415

    adam = _adam_config(muon_adam_config)
    for group in params:
        if group["optim_type"] == "muon":
            group.update(use_muon=True, momentum=momentum, weight_decay=weight_decay)
        else:
            group.update(use_muon=False, betas=(adam.get("beta1", 0.9), adam.get("beta2", 0.95)), eps=adam.get("eps", 1e-10),
                         weight_decay=adam.get("weight_decay", 0.0))
    return Muon(params, lr=lr)


def adv_muon(class_name: str) -> Callable[..., torch.optim.Optimizer]:
    """adv-optm's Muon_adv / AdaMuon_adv; Muon Adam settings become its ``adam_*`` arguments (betas from beta1, beta2)."""

    def build(params: list[dict[str, Any]], muon_adam_config: dict[str, Any] | None = None, **kwargs: Any) -> torch.optim.Optimizer:
        import adv_optm  # noqa: PLC0415

        cls = getattr(adv_optm, class_name)
        adam = _adam_config(muon_adam_config)
        takes = {k for k in inspect.signature(cls.__init__).parameters if k.startswith("adam_")}
        extra = {f"adam_{k}": v for k, v in adam.items() if f"adam_{k}" in takes}
        extra["adam_betas"] = (adam.get("beta1", 0.9), adam.get("beta2", 0.99))
        return cls(params, **kwargs, **extra)

    build.__qualname__ = build.__name__ = f"adv_optm.{class_name}"
    return build
