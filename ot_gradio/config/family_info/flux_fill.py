"""Flux.1 Fill dev: Flux.1 dev reading the masked image and the mask too (models/flux_fill.py)."""

from ..enums import ModelType as M
from . import BACKEND_ATTENTION, FamilyInfo
from .flux import FLUX_ENCODERS, FLUX_PARTS, FLUX_TES

FAMILIES = {
    M.FLUX_FILL_DEV_1: FamilyInfo(
        FLUX_PARTS, "transformer", FLUX_TES, implemented=True, transformer_file=True, text_encoder_files=True, inpainting=True, bucket_step=16, schedule="flow_matching", zeroes_padding=True, attention=BACKEND_ATTENTION,
        diffusers_lora=("FluxFillPipeline", ("text_encoder",)), text_encoder_labels=("CLIP-L", "T5"), includable=FLUX_TES, preset="flux-fill-dev-1-lora",
        name="Flux.1 Fill", hub_repo="black-forest-labs/FLUX.1-Fill-dev", lora_version="flux1",
        preset_note="**needs masks**: masked training is on; put a `<name>-masklabel.png` next to the images "
                    "(white = fill; the Masks tool makes them): a run without masks is refused",
        params={"transformer": 11_902_391_360, **FLUX_ENCODERS},  # Flux.1 dev with 384 input channels
    ),
}
