"""Parameters per model part, per family: the Model tab's memory table reads them (torch-free)."""

# Parameters per model part, per family (the reference pages show such a table by hand).
# Counted with diffusers 0.42 / transformers 5.23 on the meta device from the published
# configs: each model repo's config.json, or the config diffusers' conversion script builds the
# model with (scripts/convert_wuerstchen.py, convert_stable_cascade.py,
# convert_pixart_alpha_to_diffusers.py). Known totals check them: SD 1.5 UNet 859.5 M, SDXL
# UNet 2.57 B, Stable Cascade stage C 3.6 B, T5-XXL encoder 4.76 B.
_VAE = 83_653_863  # AutoencoderKL of SD 1.x/2.x/SDXL/PixArt-α (sd-vae-ft-ema): same layout
_CLIP_L = 123_060_480  # openai/clip-vit-large-patch14 text model (SD 1.5, SDXL's first encoder, Flux)
_CLIP_L_PROJ = _CLIP_L + 768 * 768  # with its text projection (SD 3's first encoder)
_CLIP_G = 694_659_840  # OpenCLIP ViT-bigG text model with its 1280x1280 projection (SDXL, SD 3)
_T5_XXL = 4_762_310_656  # T5 v1.1 XXL encoder (PixArt, Flux, Chroma, SD 3)
_VAE16 = 83_819_683  # AutoencoderKL with 16 latent channels, no quant convs (Flux, SD 3)
_SD15 = {"unet": 859_520_964, "text_encoder": _CLIP_L, "vae": _VAE}
# SD 2.x: UNet with 1024-wide cross-attention and linear projections; OpenCLIP ViT-H text model
# with 23 of its 24 layers (stabilityai/stable-diffusion-2-1 text_encoder/config.json).
_SD2 = {"unet": 865_910_724, "text_encoder": 340_387_840, "vae": _VAE}
# SDXL base 1.0: unet/config.json (transformer depth 1/2/10, text_time embedding); second text
# encoder OpenCLIP ViT-bigG with its 1280x1280 projection.
_SDXL = {"unet": 2_567_463_684, "text_encoder": _CLIP_L, "text_encoder_2": _CLIP_G, "vae": _VAE}
# Inpainting UNets read 9 input channels (latent, mask, masked image): 5 more in conv_in.
_INPAINT_EXTRA = 320 * 5 * 3 * 3
# EfficientNetV2-S features (torchvision: 21,458,488 parameters with the 1280x1000 classifier,
# which the encoder drops) plus the 1x1 conv to 16 latent channels and its batch norm (affine
# in Würstchen 2, not in Stable Cascade).
_EFFNET = 21_458_488 - 1_281_000 + 1280 * 16
_PAELLA_VQ = 18_406_894  # PaellaVQModel of warp-ai/wuerstchen (stage A of both)
PARAMS: dict[str, dict[str, int]] = {
    "STABLE_DIFFUSION_15": _SD15,
    "STABLE_DIFFUSION_15_INPAINTING": {**_SD15, "unet": _SD15["unet"] + _INPAINT_EXTRA},
    "STABLE_DIFFUSION_20": _SD2,
    "STABLE_DIFFUSION_20_BASE": _SD2,
    "STABLE_DIFFUSION_21": _SD2,
    "STABLE_DIFFUSION_21_BASE": _SD2,
    "STABLE_DIFFUSION_20_INPAINTING": {**_SD2, "unet": _SD2["unet"] + _INPAINT_EXTRA},
    "STABLE_DIFFUSION_XL_10_BASE": _SDXL,
    "STABLE_DIFFUSION_XL_10_BASE_INPAINTING": {**_SDXL, "unet": _SDXL["unet"] + _INPAINT_EXTRA},
    # Würstchen 2: WuerstchenPrior(c=1536, depth=32, nhead=24) with the OpenCLIP bigG text model
    # (no projection); decoder WuerstchenDiffNeXt() defaults with the OpenCLIP ViT-H text model.
    "WUERSTCHEN_2": {"prior": 993_636_896, "text_encoder": 693_021_440, "decoder": 1_055_365_280,
                     "decoder_text_encoder": 352_984_064, "decoder_vqgan": _PAELLA_VQ, "effnet_encoder": _EFFNET + 32},
    # Stable Cascade: the big stage C (StableCascadeUNet, 2048 wide, 8+24 blocks) and the big
    # stage B (320..1280, 2/6/28/6 blocks); bigG text model with projection.
    "STABLE_CASCADE_1": {"prior": 3_589_103_632, "text_encoder": 694_659_840, "decoder": 1_562_941_136,
                         "decoder_vqgan": _PAELLA_VQ, "effnet_encoder": _EFFNET},
    # PixArt-α XL/2 1024: 28 blocks of width 1152 with the resolution/aspect embedders; T5 v1.1
    # XXL encoder; the SD VAE.
    "PIXART_ALPHA": {"transformer": 611_349_152, "text_encoder": _T5_XXL, "vae": _VAE},
    # PixArt-Σ XL/2: α's transformer without the size embedders (use_additional_conditions off).
    "PIXART_SIGMA": {"transformer": 610_856_096, "text_encoder": _T5_XXL, "vae": _VAE},
    # Flow-matching families, from black-forest-labs/FLUX.1-dev, lodestones/Chroma and
    # stabilityai/stable-diffusion-3(.5) transformer/config.json: Flux.1 dev 19 + 38 blocks of
    # width 3072 with the guidance embedder (Fill: 384 input channels), Chroma the same blocks
    # without per-block modulation plus its approximator, SD 3 medium 24 MMDiT blocks of 1536,
    # SD 3.5 large 38 blocks of 2432 with RMS q/k norms. Their VAE has 16 latent channels.
    "FLUX_DEV_1": {"transformer": 11_901_408_320, "text_encoder": _CLIP_L, "text_encoder_2": _T5_XXL, "vae": _VAE16},
    "FLUX_FILL_DEV_1": {"transformer": 11_902_391_360, "text_encoder": _CLIP_L, "text_encoder_2": _T5_XXL, "vae": _VAE16},
    "CHROMA_1": {"transformer": 8_899_983_424, "text_encoder": _T5_XXL, "vae": _VAE16},
    "STABLE_DIFFUSION_3": {"transformer": 2_028_328_000, "text_encoder": _CLIP_L_PROJ, "text_encoder_2": _CLIP_G,
                           "text_encoder_3": _T5_XXL, "vae": _VAE16},
    "STABLE_DIFFUSION_35": {"transformer": 8_056_627_520, "text_encoder": _CLIP_L_PROJ, "text_encoder_2": _CLIP_G,
                            "text_encoder_3": _T5_XXL, "vae": _VAE16},
    # Z-Image / Z-Image-Turbo (Tongyi-MAI, transformer/config.json: S3-DiT of 30 layers of width
    # 3840 with 2 noise and 2 context refiner layers, 30 heads, caption width 2560); text encoder
    # Qwen3-4B (36 layers of 2560, 8 KV heads, 151,936 tokens, embeddings tied); Flux's VAE.
    "Z_IMAGE": {"transformer": 6_154_908_736, "text_encoder": 4_022_468_096, "vae": _VAE16},
    # Flux.2 dev (black-forest-labs/FLUX.2-dev, Flux2Transformer2DModel's defaults: 8 double and 48
    # single blocks of 48 x 128, guidance embedder), Mistral Small 3.1 24B as
    # Mistral3ForConditionalGeneration (40 layers of 5120, untied lm_head, the Pixtral vision
    # tower), AutoencoderKLFlux2 (32 latent channels). Klein 4B (the same family, FLUX_2): a
    # transformer of 5 + 20 blocks of 24 x 128 without guidance, 3,875,544,576, and Qwen3-4B
    # (4,022,468,096) as its text encoder; Klein 9B is larger (Qwen3-8B).
    "FLUX_2": {"transformer": 32_223_281_152, "text_encoder": 24_011_361_280, "vae": 84_046_115},
    # Qwen-Image (Qwen/Qwen-Image: QwenImageTransformer2DModel's defaults, 60 blocks of 24 x 128),
    # Qwen2.5-VL-7B-Instruct as Qwen2_5_VLForConditionalGeneration (28 layers of 3584, untied
    # lm_head of 545 M and the 677 M vision tower, neither run for prompts) and
    # AutoencoderKLQwenImage's defaults (16 latent channels).
    "QWEN": {"transformer": 20_430_401_088, "text_encoder": 8_292_166_656, "vae": 126_892_531},
    # Sana 1600M 1024px: SanaTransformer2DModel's defaults (20 blocks of 2240, the published
    # transformer/config.json), Gemma 2 2B (google/gemma-2-2b-it's config, as Gemma2Model) and
    # the DC-AE f32c32 of mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers.
    "SANA": {"transformer": 1_604_462_752, "text_encoder": 2_614_341_888, "vae": 312_250_275},
}
