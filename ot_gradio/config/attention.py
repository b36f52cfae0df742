"""Which `attention_mechanism` reaches the model type's attention (its description's `attention`,
models/attention.py says why): another one is refused before the model loads, FLEX without
`compile` is warned about, and a OneTrainer config whose mechanism OneTrainer itself could not
apply to the family (its classic or own processors ignore the backend) imports as SDP, saying so."""

from __future__ import annotations

from typing import Any

from .enums import AttentionMechanism
from .families import family_info


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))


# the mechanisms that run on a CUDA GPU only (FLEX: PyTorch's FlexAttention has no backward pass elsewhere)
CUDA_ONLY = ("XFORMERS", "FLASH", "FLEX")


def attention_problems(config: Any) -> list[str]:
    info = family_info(config.model_type)
    mechanism = _name(config.attention_mechanism)
    if info is not None and mechanism not in info.attention:
        return [f"attention_mechanism: {mechanism} does not reach {_name(config.model_type)}'s attention, which takes "
                f"{', '.join(info.attention)}; choose one of these (SDP is the default)."]
    device = str(config.train_device).strip().lower()
    if mechanism in CUDA_ONLY and not device.startswith("cuda"):
        return [f"attention_mechanism: {mechanism} needs a CUDA GPU and train_device is {device or 'empty'}; use SDP, "
                "or train on cuda."]
    return []


def attention_warnings(config: Any) -> list[str]:
    if AttentionMechanism(config.attention_mechanism) != AttentionMechanism.FLEX or config.compile:
        return []
    return ["attention_mechanism: FLEX is a fused kernel only when the denoiser is compiled; with compile off it computes "
            "the whole attention matrix (slow, and much more memory than SDP). Turn compile on (Model tab), or use SDP."]


# OneTrainer's mechanisms before its attention backends: today's OneTrainer reads them as SDP
# (XFORMERS left it in March 2025; DEFAULT, diffusers' plain processor, with the backends)
RETIRED = ("XFORMERS", "DEFAULT")


def imported_attention(data: dict[str, Any]) -> list[str]:
    """A OneTrainer config's mechanism that does not reach the family's attention becomes SDP, as
    OneTrainer runs it there (it sets diffusers' attention backend, which those processors do not
    read); so does one that today's OneTrainer no longer has (XFORMERS, DEFAULT)."""
    mechanism, info = data.get("attention_mechanism"), family_info(data.get("model_type", ""))
    if mechanism in RETIRED:
        data["attention_mechanism"] = "SDP"
        return [f"attention_mechanism {mechanism} -> SDP: today's OneTrainer has no {mechanism} and runs such a config with "
                "SDP (PyTorch's fused attention, which needs no extra package and less memory)."]
    if not isinstance(mechanism, str) or info is None or mechanism not in {m.value for m in AttentionMechanism} \
            or mechanism in info.attention:
        return []
    data["attention_mechanism"] = "SDP"
    return [f"attention_mechanism {mechanism} -> SDP: {data['model_type']}'s attention does not go through diffusers' attention "
            f"backends, so OneTrainer's {mechanism} ran as SDP there too."]
