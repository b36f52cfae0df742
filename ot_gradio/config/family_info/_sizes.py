"""Parameter counts of parts several families share, for the descriptions' `params` (the Model
tab's memory table). Counted with diffusers 0.42 / transformers 5.23 on the meta device from the
published configs: each model repo's config.json, or the config diffusers' conversion script
builds the model with (scripts/convert_wuerstchen.py, convert_stable_cascade.py,
convert_pixart_alpha_to_diffusers.py). Known totals check them: SD 1.5 UNet 859.5 M, SDXL UNet
2.57 B, Stable Cascade stage C 3.6 B, T5-XXL encoder 4.76 B."""

VAE = 83_653_863  # AutoencoderKL of SD 1.x/2.x/SDXL/PixArt-α (sd-vae-ft-ema): same layout
CLIP_L = 123_060_480  # openai/clip-vit-large-patch14 text model (SD 1.5, SDXL's first encoder, Flux)
CLIP_L_PROJ = CLIP_L + 768 * 768  # with its text projection (SD 3's first encoder)
CLIP_G = 694_659_840  # OpenCLIP ViT-bigG text model with its 1280x1280 projection (SDXL, SD 3)
T5_XXL = 4_762_310_656  # T5 v1.1 XXL encoder (PixArt, Flux, Chroma, SD 3)
VAE16 = 83_819_683  # AutoencoderKL with 16 latent channels, no quant convs (Flux, SD 3)
# Inpainting UNets read 9 input channels (latent, mask, masked image): 5 more in conv_in.
INPAINT_EXTRA = 320 * 5 * 3 * 3
# EfficientNetV2-S features (torchvision: 21,458,488 parameters with the 1280x1000 classifier,
# which the encoder drops) plus the 1x1 conv to 16 latent channels and its batch norm (affine
# in Würstchen 2, not in Stable Cascade).
EFFNET = 21_458_488 - 1_281_000 + 1280 * 16
PAELLA_VQ = 18_406_894  # PaellaVQModel of warp-ai/wuerstchen (stage A of both)
