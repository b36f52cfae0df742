"""Ideogram 4: a Qwen3-VL text encoder, Flux.2's VAE and two transformers (the trained one and a
frozen unconditional one for its asymmetric CFG); LORA and FINE_TUNE, as OneTrainer (models/ideogram4.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.IDEOGRAM_4: flow_transformer(
        "Ideogram4Pipeline", token_window=2048, name="Ideogram 4", hub_repo="ideogram-ai/ideogram-v4", lora_version="ideogram_4",
        gguf=False, lora_fused_qkv=True, text_encoder_labels=("Qwen3-VL",),  # bucket step 16: VAE 8 x patch 2
        # KOHYA_LORA / COMFY_LORA: OneTrainer's names, q/k/v as one fused layer (models/comfy_lora_names.py); diffusers'
        # Ideogram4Pipeline.load_lora_weights reads them for the blocks' layers (OneTrainer's attn-mlp / blocks presets)
        preset="ideogram4-lora", preset_note="512 px, FLOAT_8 transformer and Qwen3-VL",
        # ideogram-ai/ideogram-v4, counted on the meta device: Ideogram4Transformer2DModel's defaults
        # (34 layers of 18 x 256, text features 13 x 4096; the unconditional transformer is as large and
        # waits on the CPU until a sample), Qwen3-VL 8B as Qwen3VLModel (36 text layers of 4096, the
        # vision tower) and AutoencoderKLFlux2
        params={"transformer": 9_279_288_448, "text_encoder": 8_144_793_840, "vae": 84_046_115},
        extra_params={"unconditional_transformer": ("transformer", 9_279_288_448, "RAM")},
        # OneTrainer's "Include Unconditional Transformer": off, samples' negative branch is the empty prompt
        # through the trained transformer (its IdeogramSampler)
        includable=("unconditional_transformer",),
    ),
}
SIGN = Sign("Ideogram 4", (M.IDEOGRAM_4,), ("Ideogram4",), ("ideogram",))
