"""HiDream-I1 Full: CLIP-L and CLIP-G (pooled), T5 and Llama 3.1 (the hidden states of every
layer), Flux's 16-channel VAE and a mixture-of-experts transformer; LORA, FINE_TUNE and EMBEDDING, as OneTrainer (models/hidream.py)."""

from ..enums import ModelType as M
from . import ALL_METHODS, SDP_ATTENTION, FamilyInfo, Sign
from ._sizes import CLIP_G, CLIP_L_PROJ, T5_XXL, VAE16

LONG_CLIP = 248 - 77  # HiDream's CLIPs read up to 248 positions (the pipeline sends 128 tokens), not 77

FAMILIES = {
    M.HI_DREAM_FULL: FamilyInfo(
        ("transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "text_encoder_4", "vae"), "transformer",
        ("text_encoder", "text_encoder_2", "text_encoder_3", "text_encoder_4"),
        methods=ALL_METHODS, implemented=True, single_file=False, text_encoder_files=True, bucket_step=16, schedule="flow_matching", zeroes_padding=True, attention=SDP_ATTENTION,  # bucket: VAE 8 x patch 2
        diffusers_lora=("HiDreamImagePipeline", ()), name="HiDream", hub_repo="HiDream-ai/HiDream-I1-Full", lora_version="hidream",
        lora_unread=(("kohya", "text_encoder_4", "the kohya layout has no name for a fourth text encoder"),), text_encoder_labels=("CLIP-L", "CLIP-G", "T5", "Llama 3.1"),
        includable=("text_encoder", "text_encoder_2", "text_encoder_3", "text_encoder_4"),
        preset="hidream-lora", preset_note="512 px; Llama 3.1 8B Instruct from text_encoder_4's model (gated: accept its license)",
        # HiDream-ai/HiDream-I1-Full transformer/config.json (16 double and 32 single MoE blocks of 2560,
        # 4 routed experts), meta-llama/Llama-3.1-8B-Instruct (LlamaForCausalLM) and the CLIP-L / CLIP-G
        # text models with projection at 248 positions
        params={"transformer": 17_105_733_184, "text_encoder": CLIP_L_PROJ + LONG_CLIP * 768,
                "text_encoder_2": CLIP_G + LONG_CLIP * 1280, "text_encoder_3": T5_XXL, "text_encoder_4": 8_030_261_248,
                "vae": VAE16},
    ),
}
SIGN = Sign("HiDream", (M.HI_DREAM_FULL,), ("HiDream",), ("hidream", "hi_dream", "hi-dream"))
