"""LTX-2 text-to-video: a Gemma 3 text encoder with text connectors, the LTX-2 causal 3D VAE
(8x in time, 32x per side) and a joint audio + video transformer trained on video alone; LORA
and FINE_TUNE (models/ltx2.py)."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.LTX_2: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, bucket_step=32, frame_step=8, schedule="flow_matching",  # bucket: VAE 32 x patch 1
        diffusers_lora=("LTX2Pipeline", ()), text_encoder_labels=("Gemma 3",),
        # ComfyUI (its October 2025 source) has no LTX-2 model, so no key map: a kohya-layout file is refused
        lora_unread=(("kohya", "transformer", "ComfyUI has no LTX-2 model to map its names to and diffusers reads "
                      "no kohya LTX-2 file (LTX2Pipeline.load_lora_weights reads DIFFUSERS_LORA)"),),
        preset="ltx2-lora", preset_note="640 px area, 25 frames at 24 fps",
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
