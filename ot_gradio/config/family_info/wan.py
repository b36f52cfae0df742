"""Wan 2.1 text-to-video: one UMT5 text encoder, Wan's 3D causal VAE (4x in time, 8x per side)
and a patch (1, 2, 2) video transformer; LORA only for now (models/wan.py)."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.WAN_2_1: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA,),
        implemented=True, bucket_step=16, frame_step=4, schedule="flow_matching", diffusers_lora=("WanPipeline", ()),  # bucket: VAE 8 x patch 2
        text_encoder_labels=("UMT5",), preset="wan21-lora", preset_note="640 px area, 17 frames at 16 fps",
        # Wan2.1-T2V-1.3B-Diffusers: transformer/config.json (30 layers of 1536, 12 heads, FFN 8960,
        # text width 4096), the UMT5-XXL encoder (24 layers of 4096, 256,384 tokens, embedding
        # counted once) and AutoencoderKLWan's defaults (base width 96, 16 latent channels)
        params={"transformer": 1_418_996_800, "text_encoder": 5_680_910_336, "vae": 126_892_531},
    ),
}
SIGN = Sign("Wan", (M.WAN_2_1,), ("Wan",), ("wan2.1", "wan2_1", "wan-2.1", "wan_2.1"))
