"""Tiny random Qwen-Image-Edit (`tiny:qwen-image-edit`) in the hub's layout (model_index.json
lists `processor`, a Qwen2VLProcessor folder: its image processor config and the tokenizer).

- Text encoder, tokenizer, transformer, scheduler: tiny/qwen_image.py's (its Qwen2.5-VL has the
  one-block vision tower the edit prompts run through).
- Processor: Qwen2VLImageProcessor at 4 to 16 merged patches per image (the real one reads up to
  ~16 k), so a control image gives at most 16 vision tokens.
- VAE: AutoencoderKLQwenImage downsampling 8x as the real one (the pipeline resizes its control
  image to about a megapixel: 8x keeps that at 4096 tokens), 4 latent channels of width 8.

`tiny:qwen-image-edit-plus` is the same as a QwenImageEditPlusPipeline folder (Qwen-Image-Edit-
2511's: its transformer has `zero_cond_t`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ot_gradio.models.tiny import TinyModelPaths, register_tiny, save_tiny
from ot_gradio.models.tiny.qwen_image import tiny_qwen_image_components, tiny_qwen_image_transformer

TINY_QWEN_IMAGE_EDIT_VERSION = 1
PATCH_PIXELS = 28 * 28  # one merged 2x2 patch of 14 px


def tiny_qwen_image_edit_vae(seed: int = 0):
    from diffusers import AutoencoderKLQwenImage

    torch.manual_seed(seed)
    return AutoencoderKLQwenImage(
        base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1, attn_scales=[], temperal_downsample=[False, False, False],
        latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 2.0, 0.8, 1.2],
    )


def _write_processor(folder: Path, tokenizer) -> None:
    """processor/ as the hub has it, and model_index.json naming it."""
    from transformers import Qwen2VLImageProcessorPil

    image_processor = Qwen2VLImageProcessorPil(min_pixels=4 * PATCH_PIXELS, max_pixels=16 * PATCH_PIXELS)
    image_processor.save_pretrained(folder / "processor")
    config = folder / "processor" / "preprocessor_config.json"
    data = json.loads(config.read_text())
    data.update(image_processor_type="Qwen2VLImageProcessor", processor_class="Qwen2VLProcessor")
    config.write_text(json.dumps(data, indent=2, sort_keys=True))
    tokenizer.save_pretrained(folder / "processor")
    index = json.loads((folder / "model_index.json").read_text())
    index["processor"] = ["transformers", "Qwen2VLProcessor"]
    (folder / "model_index.json").write_text(json.dumps(index, indent=2, sort_keys=True))


@register_tiny("qwen-image-edit", TINY_QWEN_IMAGE_EDIT_VERSION)
def save_tiny_qwen_image_edit(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Qwen-Image-Edit as a diffusers folder (no single file: the family loads folders and hub ids)."""
    from diffusers import QwenImageEditPipeline

    components = {**tiny_qwen_image_components(seed), "vae": tiny_qwen_image_edit_vae(seed)}
    return save_tiny(root, "no-single-file", lambda: QwenImageEditPipeline(processor=None, **components), None,
                     lambda folder: _write_processor(folder, components["tokenizer"]))


@register_tiny("qwen-image-edit-plus", TINY_QWEN_IMAGE_EDIT_VERSION)
def save_tiny_qwen_image_edit_plus(root: str | os.PathLike, seed: int = 0) -> TinyModelPaths:
    """The tiny Qwen-Image-Edit-2511 (QwenImageEditPlusPipeline, `zero_cond_t`) as a diffusers folder."""
    from diffusers import QwenImageEditPlusPipeline

    components = {**tiny_qwen_image_components(seed), "vae": tiny_qwen_image_edit_vae(seed),
                  "transformer": tiny_qwen_image_transformer(seed, zero_cond_t=True)}
    return save_tiny(root, "no-single-file", lambda: QwenImageEditPlusPipeline(processor=None, **components), None,
                     lambda folder: _write_processor(folder, components["tokenizer"]))
