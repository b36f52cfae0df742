"""Flux.2 dev (Mistral3 text encoder) and Klein (Qwen3): one model type, as OneTrainer
(models/flux2.py). ComfyUI maps no diffusers name of Flux.2's own layers."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.FLUX_2: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=16, schedule="flow_matching", diffusers_lora=("Flux2Pipeline", ()),
        comfy_gap=("modulation, feed-forward, single blocks' fused projections and time/guidance embedder",
                   ("full", "attn-mlp", "attn-only", "blocks", "custom")),
        text_encoder_labels=("Mistral / Qwen3",),
        preset="flux2-lora", preset_note="dev or Klein, told apart by the text encoder",
    ),
}
SIGN = Sign("Flux.2", (M.FLUX_2,), ("Flux2",), ("flux2", "flux.2", "flux-2"))
