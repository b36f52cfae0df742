"""Flux.2 dev (Mistral3 text encoder) and Klein (Qwen3): one model type, as OneTrainer
(models/flux2.py). ComfyUI maps no diffusers name of Flux.2's own layers."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.FLUX_2: flow_transformer(
        "Flux2Pipeline", token_window=512, text_encoder_files=True, name="Flux.2", hub_repo="black-forest-labs/FLUX.2-dev", lora_version="flux2",
        comfy_gap=("modulation, feed-forward, single blocks' fused projections and time/guidance embedder",
                   ("full", "attn-mlp", "attn-only", "blocks", "custom")),
        text_encoder_labels=("Mistral / Qwen3",),
        preset="flux2-lora", preset_note="dev or Klein, told apart by the text encoder",
        # Flux.2 dev (black-forest-labs/FLUX.2-dev, Flux2Transformer2DModel's defaults: 8 double and 48
        # single blocks of 48 x 128, guidance embedder), Mistral Small 3.1 24B as
        # Mistral3ForConditionalGeneration (40 layers of 5120, untied lm_head, the Pixtral vision
        # tower), AutoencoderKLFlux2 (32 latent channels). Klein 4B (the same family, FLUX_2): a
        # transformer of 5 + 20 blocks of 24 x 128 without guidance, 3,875,544,576, and Qwen3-4B
        # (4,022,468,096) as its text encoder; Klein 9B is larger (Qwen3-8B).
        params={"transformer": 32_223_281_152, "text_encoder": 24_011_361_280, "vae": 84_046_115},
    ),
}
SIGN = Sign("Flux.2", (M.FLUX_2,), ("Flux2",), ("flux2", "flux.2", "flux-2", "flux_2", "flux___2", "klein"))  # flux___2: ModelScope's folder name for FLUX.2
