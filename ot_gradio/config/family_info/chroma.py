"""Chroma (models/chroma.py). ChromaPipeline raises on a T5 LoRA after it has changed the
transformer, so no text encoder loads; ComfyUI maps no diffusers name of the guidance layer."""

from ..enums import ModelType as M
from . import BACKEND_ATTENTION, FamilyInfo, Sign
from ._sizes import T5_XXL, VAE16

FAMILIES = {
    M.CHROMA_1: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), token_window=512, implemented=True, transformer_file=True, text_encoder_files=True, gguf=True, bucket_step=16,
        schedule="flow_matching", attention=BACKEND_ATTENTION, diffusers_lora=("ChromaPipeline", ()), name="Chroma", hub_repo="lodestones/Chroma1-HD", lora_version="chroma",
        comfy_gap=("distilled_guidance_layer", ("full", "custom")), text_encoder_labels=("T5",),
        preset="chroma-lora", preset_note="FLOAT_8 transformer",
        # lodestones/Chroma: Flux.1's blocks without per-block modulation plus its approximator
        params={"transformer": 8_899_983_424, "text_encoder": T5_XXL, "vae": VAE16},
    ),
}
SIGN = Sign("Chroma", (M.CHROMA_1,), ("Chroma",), ("chroma",))
