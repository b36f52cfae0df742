"""Wan 2.1 I2V (14B, 480p and 720p) image-to-video: Wan 2.1's one transformer with Wan 2.2 I2V
A14B's 36 channels in (models/wan_i2v.py: the noisy latents, the first-frame mask and the first
frame's latents), and beside the text a second context: the CLIP ViT-H/14 image embeddings of the
clip's first frame, as diffusers' WanImageToVideoPipeline gives them (`encode_image`):

- `image_processor` (CLIPImageProcessor) cuts the frame to 224 px and normalises it;
  `image_encoder` (CLIPVisionModel) reads it and the penultimate layer's states (B, 257, 1280)
  are the embeddings. The frame is the clip's own first frame after its crop and flip, handed to
  the processor as 8-bit RGB, as the pipeline hands it the start image.
- The transformer projects them (`condition_embedder.image_embedder`, the original `img_emb`) and
  puts them before the text tokens; each block's cross-attention reads them through its own
  keys and values (`add_k_proj` / `add_v_proj`, the original `k_img` / `v_img`). It tells them
  apart from the text by count: the text is always 512 tokens, so this family's text window is
  512 and no other.
- With latent caching each variant's cache entry holds both, its first-frame latents and its
  embeddings (cache kind "first_frame_clip"); the image encoder runs only while the cache fills,
  where the VAE encodes, and waits on the CPU otherwise. Without the cache it runs at each step.

Loading: a hub id (Wan-AI/Wan2.1-I2V-14B-480P-Diffusers), a diffusers folder, or the original
transformer file (ComfyUI's wan2.1_i2v_480p_14B) with the other parts, the image encoder among
them, from the hub repo or `config_dir`. LoRA files: as Wan 2.1's, with the image keys and values
(`lora_unet_blocks_0_cross_attn_k_img`) that ComfyUI maps on its Wan 2.1 I2V model.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError, base_module, module_device
from ot_gradio.models.registry import register_family
from ot_gradio.models.wan import DEFAULT_SEQUENCE_LENGTH, Wan21
from ot_gradio.models.wan_i2v import WanFirstFrame


@register_family(ModelType.WAN_2_1_I2V)
class Wan21I2V(WanFirstFrame, Wan21):
    """The family interface for Wan 2.1 I2V (see the module's text)."""

    conditioning_kind = "first_frame_clip"  # a variant's cache entry: its first frame's latents and CLIP embeddings
    clip_image_embeds = True

    def __init__(self, components: Mapping):
        self._check_image_to_video(components)
        if components.get("image_encoder") is None or components.get("image_processor") is None:
            raise ModelLoadError("The model has no image_encoder / image_processor: Wan 2.1 I2V reads the first frame's CLIP "
                                 "image embeddings. Pick a complete model (Wan-AI/Wan2.1-I2V-14B-480P-Diffusers has both).")
        super().__init__(components)
        self.image_encoder = components["image_encoder"].requires_grad_(False).eval()
        self.image_processor = components["image_processor"]

    def configure_flow(self, config) -> None:
        """Wan 2.1's options; the text window must be the transformer's 512 tokens (it finds where
        the image tokens end by counting 512 from the end)."""
        window = getattr(config, "text_encoder_sequence_length", None)
        if window not in (None, DEFAULT_SEQUENCE_LENGTH):
            raise ValueError(f"text_encoder_sequence_length: Wan 2.1 I2V reads exactly {DEFAULT_SEQUENCE_LENGTH} text tokens "
                             f"(its transformer tells the image tokens from the text by that count), not {window}; leave it blank.")
        super().configure_flow(config)

    # ---------------------------------------------------------------- the first frame

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """{"latent": the first-frame latents (B, 16, F', h, w), "image_embeds": the first frame's
        CLIP embeddings (B, tokens, width)} of clips (B, 3, F, H, W) in [-1, 1] (an image: one frame)."""
        latents = super().encode_conditioning(pixels, mask)
        first = pixels[:, :, 0] if pixels.ndim == 5 else pixels
        return {"latent": latents, "image_embeds": self.encode_image_embeds(first).to(latents.device)}

    @torch.no_grad()
    def encode_image_embeds(self, images: torch.Tensor) -> torch.Tensor:
        """The CLIP embeddings (B, tokens, width) of images (B, 3, H, W) in [-1, 1]: handed to the
        processor as 8-bit RGB (what the pipeline's start image is), the encoder's penultimate
        layer, as WanImageToVideoPipeline.encode_image. The encoder runs where the VAE is (the GPU
        while the cache fills) and goes back."""
        rgb = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        values = self.image_processor(images=list(np.ascontiguousarray(rgb)), return_tensors="pt").pixel_values
        encoder, device = self.image_encoder, module_device(self.vae)
        home = module_device(encoder)
        encoder.to(device)
        try:
            out = encoder(pixel_values=values.to(device, next(encoder.parameters()).dtype), output_hidden_states=True)
            return out.hidden_states[-2].float()
        finally:
            encoder.to(home)

    def first_frame_inputs(self, batch, noisy: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The batch's first-frame latents and {"encoder_hidden_states_image": its CLIP embeddings}:
        cached, else encoded from its pixels; without either (the memory planner's probe) zeros of
        their sizes stand in."""
        cached = getattr(batch, "conditioning_latents", None)
        if cached is not None:
            embeds = getattr(batch, "image_embeds", None)
            if embeds is None:
                raise ValueError("Wan 2.1 I2V's step needs the cached CLIP image embeddings beside the first frames; "
                                 "clear the latent cache (clear_cache_before_training) and start again")
        elif getattr(batch, "pixels", None) is not None:
            encoded = self.encode_conditioning(batch.pixels)
            cached, embeds = encoded["latent"], encoded["image_embeds"]
        else:
            config = base_module(self.image_encoder).config
            tokens = (config.image_size // config.patch_size) ** 2 + 1
            cached, embeds = torch.zeros_like(noisy), noisy.new_zeros(noisy.shape[0], tokens, config.hidden_size)
        return cached, {"encoder_hidden_states_image": embeds}

    # ---------------------------------------------------------------- sampling and saving

    def pipeline(self):
        """WanImageToVideoPipeline with the image encoder and its processor (it encodes the start image itself)."""
        pipe = super().pipeline()
        pipe.register_modules(image_encoder=base_module(self.image_encoder), image_processor=self.image_processor)
        return pipe

    def sample(self, *args, device: torch.device | str | None = None, **kwargs):
        """As Wan 2.2 I2V's; the image encoder is on the sampling device for it, then goes back."""
        target = torch.device(device) if device is not None else module_device(self.transformer)
        home = module_device(self.image_encoder)
        self.image_encoder.to(target)
        try:
            return super().sample(*args, device=device, **kwargs)
        finally:
            self.image_encoder.to(home)

    def save_other_files(self, folder) -> None:
        """The image encoder and its processor, beside the parts, as the hub folder has them."""
        base_module(self.image_encoder).save_pretrained(folder / "image_encoder")
        self.image_processor.save_pretrained(folder / "image_processor")
