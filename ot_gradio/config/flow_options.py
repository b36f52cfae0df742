"""Options that a flow-matching family (Flux, Chroma, SD 3, ...) cannot act on, with the reason
for each (training/flow_matching.py is the objective they would change)."""

from __future__ import annotations

from typing import Any

from .enums import LossWeight, ModelType

FLOW_LOSS_WEIGHTS = (LossWeight.CONSTANT, LossWeight.SIGMA)


def flow_matching_conflicts(config: Any) -> list[str]:
    """One message per option the run cannot start with, each naming the field."""
    problems = []
    weight = LossWeight(config.loss_weight_fn)
    if weight not in FLOW_LOSS_WEIGHTS:
        problems.append(
            f"loss_weight_fn: {weight.value} weights by the SNR of a DDPM noise schedule; flow-matching models "
            "(Flux, Chroma, SD 3) take CONSTANT or SIGMA"
        )
    if config.generalized_offset_noise and config.offset_noise_weight > 0:
        problems.append("generalized_offset_noise: it is built from a DDPM schedule's betas; turn it off for flow-matching models")
    if config.force_v_prediction or config.force_epsilon_prediction:
        problems.append("force_v_prediction / force_epsilon_prediction: flow-matching models predict the velocity "
                        "(noise - image); turn them off")
    if config.rescale_noise_scheduler_to_zero_terminal_snr:
        problems.append("rescale_noise_scheduler_to_zero_terminal_snr: a flow-matching schedule already ends at pure "
                        "noise; turn it off")
    window = config.text_encoder_sequence_length
    if config.model_type == ModelType.WAN_2_1_I2V and window not in (None, 512):  # (models/wan21_i2v.py refuses it too)
        problems.append(f"text_encoder_sequence_length: WAN_2_1_I2V reads exactly 512 text tokens (its transformer tells the "
                        f"image tokens from the text by that count), not {window}; set 512 or leave it blank")
    return problems
