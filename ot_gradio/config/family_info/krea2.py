"""Krea 2: one Qwen3-VL text encoder read at 12 of its layers, Qwen-Image's video VAE used one frame
at a time; LORA and FINE_TUNE, as OneTrainer (models/krea2.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.KREA_2: flow_transformer(
        "Krea2Pipeline", token_window=512, name="Krea 2", hub_repo="krea/Krea-2-Raw", lora_version="krea2", comfy_model=False,
        text_encoder_labels=("Qwen3-VL",), preset="krea2-lora", preset_note="FLOAT_8 transformer and Qwen3-VL",
        # krea/Krea-2-Raw, counted on the meta device: Krea2Transformer2DModel's defaults (28 blocks
        # of 48 x 128, text fusion of 2 + 2 blocks), Qwen3-VL-4B as Qwen3VLModel (36 layers of
        # 2560 and its 418 M vision tower, never run for prompts; no lm_head) and Qwen-Image's VAE
        params={"transformer": 12_820_073_036, "text_encoder": 4_437_815_808, "vae": 126_892_531},
    ),
}
SIGN = Sign("Krea 2", (M.KREA_2,), ("Krea2",), ("krea-2", "krea2", "krea_2"))
