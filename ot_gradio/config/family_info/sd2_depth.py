"""Stable Diffusion 2.0 depth (models/sd2_depth.py)."""

from ..enums import ModelType as M
from . import FamilyInfo
from .sd2 import SD2_PARAMS
from .sd15 import SD_CIRCULAR, SD_COMFY_GAP, SD_METHODS, SD_PARTS, SD_QUANTIZATION

# the UNet's conv_in takes one more input channel (the depth map): 320 * 1 * 3 * 3 weights
FAMILIES = {
    M.STABLE_DIFFUSION_20_DEPTH: FamilyInfo(
        SD_PARTS, "unet", ("text_encoder",), implemented=True, methods=SD_METHODS,
        diffusers_lora=("StableDiffusionDepth2ImgPipeline", ("text_encoder",)), preset="sd20-depth-lora",
        preset_note="512 px; an image's depth map is `<name>-depth.png` beside it or else the model's DPT depth estimator's, "
                    "cached with the latents",
        depth_maps=True, comfy_gap=SD_COMFY_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR, bucket_quantization=SD_QUANTIZATION,
        params={**SD2_PARAMS, "unet": SD2_PARAMS["unet"] + 320 * 9},
        # DPT-Hybrid (Intel/dpt-hybrid-midas): 122,377,985 parameters, loaded as its files hold (float32);
        # it waits in RAM and visits the VAE's device only to estimate depth maps (caching, or each step without it)
        extra_params={"depth_estimator": ("vae", 122_377_985, "RAM")}),
}
