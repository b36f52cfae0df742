"""Sana: one Gemma 2 text encoder, the DC-AE (32x) and a patch-1 transformer (models/sana.py)."""

from ..enums import ModelType as M
from . import ALL_METHODS, SDP_ATTENTION, Sign, flow_transformer

FAMILIES = {
    M.SANA: flow_transformer(
        "SanaPipeline", token_window=300, text_encoder_files=True, name="Sana", hub_repo="Efficient-Large-Model/Sana_1600M_1024px_diffusers", lora_version="sana",
        methods=ALL_METHODS, transformer_file=False, single_file=False, gguf=False, bucket_step=32, attention=SDP_ATTENTION,  # bucket step: DC-AE 32 x patch 1
        bucket_quantization=32,  # OneTrainer's aspect bucket sides (SanaBaseDataLoader)
        lora_unread=(("kohya", "text_encoder", "ComfyUI has no Sana model and diffusers reads no kohya Sana file"),),
        text_encoder_labels=("Gemma 2",), preset="sana-lora", preset_note="1024 px",
        # Sana 1600M 1024px: SanaTransformer2DModel's defaults (20 blocks of 2240, the published
        # transformer/config.json), Gemma 2 2B (google/gemma-2-2b-it's config, as Gemma2Model) and
        # the DC-AE f32c32 of mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers
        params={"transformer": 1_604_462_752, "text_encoder": 2_614_341_888, "vae": 312_250_275},
    ),
}
SIGN = Sign("Sana", (M.SANA,), ("Sana",), ("sana",))
