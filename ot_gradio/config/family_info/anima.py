"""Anima: one Qwen3 text encoder read through the LLM adapter (AnimaTextConditioner); LORA and
FINE_TUNE of the Cosmos transformer, as OneTrainer (models/anima.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.ANIMA: flow_transformer(
        "AnimaModularPipeline", token_window=512, text_encoder_files=True, name="Anima", hub_repo="circlestone-labs/Anima-Base-v1.0-Diffusers", lora_version="anima",
        text_encoder_labels=("Qwen3",),
        comfy_gap=("transformer", ("full", "attn-mlp", "attn-only", "blocks", "custom")),  # ComfyUI maps the DiT's original names only
        lora_unread=(("kohya", "text_encoder", "OneTrainer trains Anima's transformer only and no ComfyUI name for its Qwen3 is "
                      "checked here"),), preset="anima-lora", preset_note="FLOAT_8 transformer and Qwen3",
        # circlestone-labs/Anima-Base-v1.0-Diffusers: CosmosTransformer3DModel of 28 blocks of
        # 16 x 128 (Cosmos-Predict2 2B, no learnable position embedding); Qwen3-0.6B as Qwen3Model
        # (28 layers of 1024, embeddings tied) plus the AnimaTextConditioner (6 blocks of 1024,
        # 134,663,680), counted with it as it travels with it; AutoencoderKLQwenImage
        params={"transformer": 1_956_405_248, "text_encoder": 596_049_920 + 134_663_680, "vae": 126_892_531},
    ),
}
# not "anima" alone: AnimateDiff and Wan-Animate contain it
SIGN = Sign("Anima", (M.ANIMA,), ("AnimaModular",), ("circlestone-labs/anima", "anima-base", "anima_base", "anima-preview", "anima_preview"))
