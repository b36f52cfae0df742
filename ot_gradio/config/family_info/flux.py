"""Flux.1 dev (models/flux.py); its sign covers Flux.1 Fill too. FluxPipeline loads no LoRA into T5."""

from ..enums import ModelType as M
from . import BACKEND_ATTENTION, FamilyInfo, Sign
from ._sizes import CLIP_L, T5_XXL, VAE16

FLUX_ENCODERS = {"text_encoder": CLIP_L, "text_encoder_2": T5_XXL, "vae": VAE16}
FLUX_PARTS, FLUX_TES = ("transformer", "text_encoder", "text_encoder_2", "vae"), ("text_encoder", "text_encoder_2")

FAMILIES = {
    M.FLUX_DEV_1: FamilyInfo(
        FLUX_PARTS, "transformer", FLUX_TES, implemented=True, transformer_file=True, text_encoder_files=True, gguf=True, bucket_step=16, schedule="flow_matching", zeroes_padding=True, attention=BACKEND_ATTENTION,  # bucket step: VAE 8 x patch 2
        diffusers_lora=("FluxPipeline", ("text_encoder",)), text_encoder_labels=("CLIP-L", "T5"), includable=FLUX_TES,
        # lora_version: kohya's ss_base_model_version for Flux.1 (sd-scripts' "flux1")
        name="Flux.1", hub_repo="black-forest-labs/FLUX.1-dev", lora_version="flux1",
        preset="flux-dev-1-lora", preset_note="NF4 transformer and T5: fits a 16 GB card",
        # black-forest-labs/FLUX.1-dev transformer/config.json: 19 + 38 blocks of width 3072 with the
        # guidance embedder; a VAE of 16 latent channels
        params={"transformer": 11_901_408_320, **FLUX_ENCODERS},
    ),
}
SIGN = Sign("Flux.1", (M.FLUX_DEV_1, M.FLUX_FILL_DEV_1), ("Flux",), ("flux",))
