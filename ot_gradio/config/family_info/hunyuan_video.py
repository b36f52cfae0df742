"""HunyuanVideo text-to-video: a Llama text encoder (its hidden states) and CLIP-L (pooled), the
HunyuanVideo causal 3D VAE (4x in time, 8x per side) and a guidance-distilled patch (1, 2, 2)
video transformer; LORA, FINE_TUNE and EMBEDDING, as OneTrainer (models/hunyuan_video.py). Its KOHYA_LORA / COMFY_LORA hold ComfyUI's
names, q/k/v fused (models/comfy_lora_names.py); its transformer file (read, GGUF too, and written) has the
original layout ComfyUI loads (models/hunyuan_video_keys.py)."""

from ..enums import ModelType as M
from . import BACKEND_ATTENTION, FamilyInfo, Sign
from ._sizes import CLIP_L

FAMILIES = {
    M.HUNYUAN_VIDEO: FamilyInfo(
        ("transformer", "text_encoder", "text_encoder_2", "vae"), "transformer", ("text_encoder", "text_encoder_2"), token_window=256,
        implemented=True, transformer_file=True, text_encoder_files=True, gguf=True, bucket_step=16, frame_step=4, schedule="flow_matching", attention=BACKEND_ATTENTION,  # bucket: VAE 8 x patch 2
        diffusers_lora=("HunyuanVideoPipeline", ()), text_encoder_labels=("Llama", "CLIP-L"), includable=("text_encoder", "text_encoder_2"),
        name="HunyuanVideo", hub_repo="hunyuanvideo-community/HunyuanVideo", lora_version="hunyuan_video",
        # KOHYA_LORA / COMFY_LORA: ComfyUI's names, q/k/v (and the single blocks' MLP input) one fused layer each
        # (models/comfy_lora_names.py hunyuan_video)
        lora_fused_qkv=True,
        comfy_gap=("transformer", ("full", "attn-mlp", "attn-only", "blocks", "custom")),  # ComfyUI maps its original names only
        preset="hunyuan-video-lora", preset_note="512 px area, 17 frames at 24 fps",
        # hunyuanvideo-community/HunyuanVideo: transformer/config.json (20 double and 40 single blocks
        # of 3072), the llava-llama-3-8b text model (32 layers of 4096, 128,320 tokens) and
        # AutoencoderKLHunyuanVideo's defaults (widths 128-512, 16 latent channels)
        params={"transformer": 12_821_012_544, "text_encoder": 7_505_186_816, "text_encoder_2": CLIP_L, "vae": 246_478_803},
    ),
}
SIGN = Sign("HunyuanVideo", (M.HUNYUAN_VIDEO,), ("HunyuanVideo",), ("hunyuanvideo", "hunyuan_video", "hunyuan-video"))
