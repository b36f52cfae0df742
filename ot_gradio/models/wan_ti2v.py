"""Wan 2.2 TI2V 5B: one transformer that makes a clip from a prompt (text-to-video) or from a
prompt and the clip's first frame (image-to-video), Wan 2.1's interface (models/wan.py) with Wan
2.2's VAE (48 latent channels, 16x per side, its own latents_mean / std, all read from the folder)
and a 5B transformer of 48 channels. The repo samples at flow_shift 5; training draws t at the same
shift.

Image-to-video is diffusers' WanImageToVideoPipeline with `expand_timesteps` (its "wan 2.2 5b
i2v"): the first latent frame given clean, a timestep per latent token, 0 on that frame
(models/start_frame.py: what LTX-2 shares; `image_to_video_share` of the training clips start so).
A text-to-video clip gives every token the same timestep, so it passes one per clip, the same sum.
"""

from __future__ import annotations

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import base_module
from ot_gradio.models.registry import register_family
from ot_gradio.models.start_frame import StartFromFirstFrame
from ot_gradio.models.wan import Wan21


@register_family(ModelType.WAN_2_2_TI2V_5B)
class Wan22TI2V5B(StartFromFirstFrame, Wan21):
    """The family interface for Wan 2.2 TI2V 5B (see the module's text)."""

    pipeline_config_keys = ("expand_timesteps",)  # the hub's model_index.json: true, kept in a saved folder

    def transformer_timestep(self, noisy: torch.Tensor, timestep: torch.Tensor, batch=None) -> torch.Tensor:
        """Per token (B, F' * h/2 * w/2) where a clip of the batch starts from its given first
        frame (the pipeline's `first_frame_mask[:, ::2, ::2] * t`, flattened); else one per clip."""
        _, ph, pw = base_module(self.transformer).config.patch_size
        return self.per_token_timesteps(timestep, batch, noisy.shape[2], noisy.shape[3] // ph, noisy.shape[4] // pw)

    def pipeline(self):
        """WanPipeline; for a sample that starts from an image, WanImageToVideoPipeline on the same
        parts with `expand_timesteps` (the first frame given, at timestep 0)."""
        pipe = super().pipeline()
        if self._sample_image is None:
            return pipe
        from diffusers import WanImageToVideoPipeline

        i2v = WanImageToVideoPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                                      scheduler=pipe.scheduler, transformer=pipe.transformer, expand_timesteps=True)
        i2v.set_progress_bar_config(disable=True)
        return i2v
