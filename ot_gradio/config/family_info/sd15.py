"""Stable Diffusion 1.5 (models/sd15.py); its sign covers every SD 1.x/2.x model type, as they
share one pipeline and are not told apart."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import ALL_METHODS, FamilyInfo, Sign
from ._sizes import CLIP_L, VAE

SD_PARTS = ("unet", "text_encoder", "vae")
SD_LORA = ("StableDiffusionPipeline", ("text_encoder",))
SD_METHODS = (*ALL_METHODS, T.FINE_TUNE_VAE)  # OneTrainer trains the VAE of SD 1.x/2.x only
# ComfyUI maps a diffusers-layout UNet LoRA's attention layers only in diffusers' old attention-processor names
# (`attn1.processor.to_q`), not PEFT's (`attn1.to_q`): it skips them (scripts/check_comfyui_lora.py, October 2025)
SD_COMFY_GAP = ("attention (`attn1`, `attn2`)", ("full", "attn-mlp", "attn-only", "custom"))
# the parts OneTrainer pads circularly (BaseStableDiffusionSetup / BaseStableDiffusionXLSetup): samples tile
SD_CIRCULAR = ("unet", "vae")
SD15_PARAMS = {"unet": 859_520_964, "text_encoder": CLIP_L, "vae": VAE}
SD_QUANTIZATION = 8  # OneTrainer's aspect bucket sides (StableDiffusionBaseDataLoader, and its VAE fine-tune's loader)

FAMILIES = {
    M.STABLE_DIFFUSION_15: FamilyInfo(SD_PARTS, "unet", ("text_encoder",), implemented=True, diffusers_lora=SD_LORA, methods=SD_METHODS,
                                         comfy_gap=SD_COMFY_GAP, safetensors_lora="kohya", circular_padding=SD_CIRCULAR, preset="sd15-lora", preset_note="also *sd15-finetune* and *sd15-embedding*",
                                         params=SD15_PARAMS, bucket_quantization=SD_QUANTIZATION),
}
SIGN = Sign(
    "Stable Diffusion 1.x/2.x",
    (M.STABLE_DIFFUSION_15, M.STABLE_DIFFUSION_15_INPAINTING, M.STABLE_DIFFUSION_20, M.STABLE_DIFFUSION_20_BASE,
     M.STABLE_DIFFUSION_20_INPAINTING, M.STABLE_DIFFUSION_20_DEPTH, M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_21_BASE),
    ("StableDiffusionPipeline", "StableDiffusionInpaintPipeline", "StableDiffusionDepth2ImgPipeline"),
    ("sd15", "sd2", "sd-v1", "sd_v1", "v1-5", "stable-diffusion-v1", "stable-diffusion-2", "stable-diffusion-inpainting"),
)
