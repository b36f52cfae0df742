"""LTX-2 text-to-video and image-to-video (one model): a Gemma 3 text encoder with text connectors, the LTX-2 causal 3D VAE
(8x in time, 32x per side) and a joint audio + video transformer trained on video alone; LORA
and FINE_TUNE (models/ltx2.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.LTX_2: flow_transformer(
        "LTX2Pipeline", token_window=1024, name="LTX-2", hub_repo="Lightricks/LTX-2", lora_version="ltx_2", comfy_model=False,
        transformer_file=False, single_file=False, gguf=False, bucket_step=32, frame_step=8, text_encoder_labels=("Gemma 3",),  # bucket: VAE 32 x patch 1
        text_image_to_video=True, preset="ltx2-lora",
        preset_note="640 px area, 25 frames at 24 fps, FLOAT_8 transformer with 30 % of its blocks offloaded (24 GB cards); "
                    "half the clips start from their first frame (image-to-video), half from the prompt",
        # Lightricks/LTX-2, counted on the meta device: LTX2VideoTransformer3DModel's defaults (the
        # 2.0 model: 48 blocks, video 32 x 128, audio 32 x 64), Gemma 3 12B (text 48 layers of
        # 3840, SigLIP vision tower; lm_head tied) and AutoencoderKLLTX2Video's defaults
        params={"transformer": 18_876_174_592, "text_encoder": 12_202_563_392, "vae": 1_222_479_601},
        # LTX2TextConnectors' defaults (video and audio connectors of 2 layers of 30 x 128, 128
        # registers each, Gemma's 49 layers projected in), counted on the meta device: they run
        # beside Gemma, in its type, and stay on the device with the parts
        extra_params={"connectors": ("text_encoder", 1_431_475_200, "device")},
    ),
}
SIGN = Sign("LTX-2", (M.LTX_2,), ("LTX2",), ("ltx-2", "ltx2", "ltx_2"))
