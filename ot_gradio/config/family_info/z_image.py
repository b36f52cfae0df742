"""Z-Image: one Qwen3 text encoder; FINE_TUNE and LORA, as OneTrainer (models/z_image.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer
from ._sizes import VAE16

FAMILIES = {
    M.Z_IMAGE: flow_transformer(
        "ZImagePipeline", token_window=512, text_encoder_files=True, name="Z-Image", hub_repo="Tongyi-MAI/Z-Image", lora_version="z_image",
        text_encoder_labels=("Qwen3",), preset="z-image-lora", preset_note="FLOAT_8 transformer and Qwen3",
        # Z-Image / Z-Image-Turbo (Tongyi-MAI, transformer/config.json: S3-DiT of 30 layers of width
        # 3840 with 2 noise and 2 context refiner layers, 30 heads, caption width 2560); text encoder
        # Qwen3-4B (36 layers of 2560, 8 KV heads, 151,936 tokens, embeddings tied); Flux's VAE
        params={"transformer": 6_154_908_736, "text_encoder": 4_022_468_096, "vae": VAE16},
    ),
}
SIGN = Sign("Z-Image", (M.Z_IMAGE,), ("ZImage",), ("z-image", "z_image", "zimage"))
