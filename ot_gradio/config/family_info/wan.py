"""Wan 2.1 and Wan 2.2 T2V A14B text-to-video, Wan 2.1 I2V and Wan 2.2 I2V A14B image-to-video and Wan 2.2 TI2V 5B, both:
one UMT5 text encoder, Wan's 3D causal VAE (4x in time; 8x per side for 2.1 and A14B, 16x with 48
channels for the 5B's) and a patch (1, 2, 2) video transformer (A14B: two, one per noise range, a run
trains one; Wan 2.1 I2V also reads the first frame's CLIP image embeddings); LORA and FINE_TUNE
(models/wan.py, models/wan_i2v.py, models/wan21_i2v.py, models/wan_ti2v.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

UMT5_XXL = 5_680_910_336  # google/umt5-xxl's encoder (24 layers of 4096, 256,384 tokens, embedding counted once)
# ComfyUI maps Wan's original layer names only (scripts/check_comfyui_lora.py): a diffusers-layout file loads nothing there
COMFY_GAP = ("transformer", ("full", "attn-mlp", "attn-only", "blocks", "custom"))

FAMILIES = {
    M.WAN_2_1: flow_transformer(
        "WanPipeline", token_window=512, text_encoder_files=True, name="Wan 2.1", hub_repo="Wan-AI/Wan2.1-T2V-1.3B-Diffusers", lora_version="wan_2_1",
        frame_step=4,  # bucket step 16: VAE 8 x patch 2
        text_encoder_labels=("UMT5",), comfy_gap=COMFY_GAP, preset="wan21-lora", preset_note="640 px area, 17 frames at 16 fps",
        # Wan2.1-T2V-1.3B-Diffusers: transformer/config.json (30 layers of 1536, 12 heads, FFN 8960,
        # text width 4096), the UMT5-XXL encoder (24 layers of 4096, 256,384 tokens, embedding
        # counted once) and AutoencoderKLWan's defaults (base width 96, 16 latent channels)
        params={"transformer": 1_418_996_800, "text_encoder": UMT5_XXL, "vae": 126_892_531},
    ),
    M.WAN_2_1_I2V: flow_transformer(
        "WanImageToVideoPipeline", token_window=512, text_encoder_files=True, name="Wan 2.1 I2V", hub_repo="Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", lora_version="wan_2_1_i2v",
        gguf=False, frame_step=4, image_to_video=True,  # bucket step 16: VAE 8 x patch 2
        text_encoder_labels=("UMT5",), comfy_gap=COMFY_GAP, preset="wan21-i2v-14b-lora",
        preset_note="640 px area (the 480P model's 480x832), 17 frames at 16 fps, FLOAT_8 transformer with a fifth of its blocks offloaded (24 GB cards); each clip's first frame is the image it starts from",
        # Wan2.1-I2V-14B-480P-Diffusers: transformer/config.json (40 layers of 5120, 40 heads, FFN 13824,
        # 36 channels in, image_dim 1280 and each block's image keys and values: 16.39B, counted on
        # the meta device), the same UMT5-XXL and Wan 2.1's VAE; the CLIP ViT-H/14 image encoder (32
        # layers of 1280) runs while the cache fills and waits on the CPU
        params={"transformer": 16_394_878_784, "text_encoder": UMT5_XXL, "vae": 126_892_531},
        extra_params={"image_encoder": ("vae", 630_766_080, "RAM")},
    ),
    M.WAN_2_2_TI2V_5B: flow_transformer(
        "WanPipeline", token_window=512, text_encoder_files=True, name="Wan 2.2 TI2V 5B", hub_repo="Wan-AI/Wan2.2-TI2V-5B-Diffusers", lora_version="wan_2_2_ti2v_5b",
        bucket_step=32, frame_step=4, text_image_to_video=True,  # bucket: VAE 16 x patch 2
        text_encoder_labels=("UMT5",), comfy_gap=COMFY_GAP, preset="wan22-ti2v-5b-lora", preset_note="704 px area, 17 frames at 24 fps; half the clips start from their first frame (image-to-video), half from the prompt",
        # Wan2.2-TI2V-5B-Diffusers: transformer/config.json (30 layers of 3072, 24 heads, FFN 14336,
        # 48 channels in and out), the same UMT5-XXL, and Wan 2.2's VAE (base width 160, decoder
        # 256, 48 latent channels, patch 2: 16x per side), counted on the meta device
        params={"transformer": 4_999_787_712, "text_encoder": UMT5_XXL, "vae": 704_688_668},
    ),
    M.WAN_2_2_T2V_A14B: flow_transformer(
        "WanPipeline", token_window=512, text_encoder_files=True, name="Wan 2.2 T2V A14B", hub_repo="Wan-AI/Wan2.2-T2V-A14B-Diffusers", lora_version="wan_2_2_t2v_a14b",
        transformer_file=False, gguf=False, frame_step=4,  # bucket step 16: VAE 8 x patch 2
        text_encoder_labels=("UMT5",), comfy_gap=COMFY_GAP, preset="wan22-t2v-a14b-lora", preset_note="640 px area, 17 frames at 16 fps, the high-noise expert",
        # Wan2.2-T2V-A14B-Diffusers: the transformer part is the expert a run trains (each: 40 layers
        # of 5120, 40 heads, FFN 13824, counted on the meta device); the other one waits on the CPU
        # until a sample. The same UMT5-XXL and Wan 2.1's VAE
        params={"transformer": 14_288_491_584, "text_encoder": UMT5_XXL, "vae": 126_892_531},
        extra_params={"other expert": ("transformer", 14_288_491_584, "RAM")},
    ),
    M.WAN_2_2_I2V_A14B: flow_transformer(
        "WanImageToVideoPipeline", token_window=512, text_encoder_files=True, name="Wan 2.2 I2V A14B", hub_repo="Wan-AI/Wan2.2-I2V-A14B-Diffusers",
        lora_version="wan_2_2_i2v_a14b", transformer_file=False, gguf=False, frame_step=4, image_to_video=True,
        text_encoder_labels=("UMT5",), comfy_gap=COMFY_GAP, preset="wan22-i2v-a14b-lora",
        preset_note="640 px area, 17 frames at 16 fps, the high-noise expert; each clip's first frame is the image it starts from",
        # Wan2.2-I2V-A14B-Diffusers: T2V A14B's experts with 36 input channels (the noisy latents, a
        # 4-channel first-frame mask and the first frame's latents), the same UMT5-XXL and VAE
        params={"transformer": 14_288_901_184, "text_encoder": UMT5_XXL, "vae": 126_892_531},
        extra_params={"other expert": ("transformer", 14_288_901_184, "RAM")},
    ),
}
# A text-to-video Wan folder names WanPipeline whichever version it is: those versions are not told
# apart (as PixArt's). An image-to-video one names WanImageToVideoPipeline, and its hub names say
# I2V (Wan-AI/Wan2.2-I2V-A14B-Diffusers): picked under a text-to-video type (or the reverse), the
# page says so before a download of tens of GB ends in the loader's refusal. Both I2V versions' folders
# name WanImageToVideoPipeline (either type passes for such a folder); their hub and file names tell them apart.
SIGN = (
    Sign("Wan text-to-video", (M.WAN_2_1, M.WAN_2_2_TI2V_5B, M.WAN_2_2_T2V_A14B), ("Wan",),
         ("wan2.1", "wan2_1", "wan-2.1", "wan_2.1", "wan2.2", "wan2_2", "wan-2.2", "wan_2.2")),
    Sign("Wan 2.1 image-to-video", (M.WAN_2_1_I2V,), ("WanImageToVideo",),
         ("wan2.1-i2v", "wan2_1-i2v", "wan2.1_i2v", "wan2_1_i2v", "wan-2.1-i2v", "wan_2.1_i2v", "wan21-i2v", "wan21_i2v", "i2v-14b",
          "i2v_14b")),
    Sign("Wan 2.2 image-to-video", (M.WAN_2_2_I2V_A14B,), ("WanImageToVideo",),
         ("wan2.2-i2v", "wan2_2-i2v", "wan2.2_i2v", "wan2_2_i2v", "wan-2.2-i2v", "wan_2.2_i2v", "wan22-i2v", "wan22_i2v", "i2v-a14b",
          "i2v_a14b")),
)
