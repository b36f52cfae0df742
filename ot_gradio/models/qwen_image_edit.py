"""Qwen-Image-Edit: Qwen-Image trained on (image, control image) pairs (not in OneTrainer). Qwen-
Image's module (models/qwen_image.py) gives the parts, the loading, the LoRA names and the
saving; this one what the control image changes, as diffusers' QwenImageEditPipeline does it:

- The prompt is read by Qwen2.5-VL *with the control image*: the pipeline's edit template (a
  system line, then `<|vision_start|><|image_pad|><|vision_end|>` and the prompt as the user
  turn), the image pad expanded to one token per 2x2 merged vision patch (what Qwen2VLProcessor
  does: `VisionPromptProcessor` here, as transformers' processor needs torchvision for its video
  side), the image's pixels through the vision tower, the last hidden state kept (a layer skip
  goes further back) and each prompt's first 64 tokens dropped; as in the pipeline, nothing is cut
  to a token window (`text_encoder_sequence_length` is not applied to these prompts). The
  embeddings depend on the image, so they are never cached by caption (data/text_cache.py:
  text_cache_problem).
- The control image's VAE latents (the mean, as the pipeline's `argmax`) are packed like the
  noisy ones and put after them along the sequence; `img_shapes` lists both; the transformer's
  output is cut back to the noisy tokens, so the loss sees only those.
- Training: the control image is cut and augmented with its image (the same bucket), its latents
  cached beside the image's (latent cache kind "control"). Samples: `control_image` of the sample
  entry, else the first training pair's control image; as in the pipeline, it is resized to about
  one megapixel for the VAE and the text encoder.

Qwen-Image-Edit-2509 and -2511 (QwenImageEditPlusPipeline in their model_index.json) load as
`QwenImageEditPlus`, picked from the folder: their prompt names the image ("Picture 1: " and the
image pad, in the user turn before the prompt) and the text encoder reads it resized to about
384 x 384 pixels (the pipeline's CONDITION_IMAGE_SIZE), in training and samples alike; the VAE
side is Qwen-Image-Edit's. (2511's transformer config `zero_cond_t` gives the control tokens
timestep 0: the transformer does that itself from `img_shapes`.) One control image per
training image: the Plus pipelines' several input images are not trained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ot_gradio.config.enums import ModelType
from ot_gradio.models.common import ModelLoadError, input_dtype, module_device
from ot_gradio.models.flow_family import pack_latents, unpack_latents
from ot_gradio.models.qwen_image import QwenImage
from ot_gradio.models.registry import register_family
from ot_gradio.models.sampling_parts import sample_image

# QwenImageEditPipeline's prompt_template_encode and prompt_template_encode_start_idx
EDIT_TEMPLATE = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, background), then "
    "explain how the user's text instruction should alter or modify the image. Generate a new image that meets the user's "
    "requirements while maintaining consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n"
)
# QwenImageEditPlusPipeline's: the same system turn; the user turn names the (one) image before the prompt
PLUS_TEMPLATE = EDIT_TEMPLATE.replace("<|vision_start|>", "Picture 1: <|vision_start|>", 1)
EDIT_DROP_TOKENS = 64  # both pipelines' prompt_template_encode_start_idx
IMAGE_TOKEN = "<|image_pad|>"
SAMPLE_AREA = 1024 * 1024  # the pipeline sizes its control image to about this many pixels
PLUS_VISION_AREA = 384 * 384  # QwenImageEditPlusPipeline's CONDITION_IMAGE_SIZE: the text encoder's image


class VisionPromptProcessor:
    """Qwen2VLProcessor's image-and-text call (`processor(text=..., images=..., padding=True,
    return_tensors="pt")`), which QwenImageEditPipeline makes: the image processor's patches and
    grids, each text's image pad repeated for its image's merged patches, then the tokenizer; and,
    as transformers' processor returns it, `mm_token_type_ids` (1 at the image's tokens), without
    which transformers 5's Qwen2.5-VL gives the image tokens a text's 1-D positions instead of
    their 3-D (time, row, column) ones."""

    def __init__(self, image_processor, tokenizer):
        self.image_processor, self.tokenizer = image_processor, tokenizer

    def __call__(self, text: str | Sequence[str], images=None, padding: bool = True, return_tensors: str = "pt", **_):
        from transformers import BatchFeature

        texts = [text] if isinstance(text, str) else list(text)
        data: dict = {}
        if images is not None:
            vision = self.image_processor(images=images, return_tensors=return_tensors)
            data = {"pixel_values": vision["pixel_values"], "image_grid_thw": vision["image_grid_thw"]}
            counts = iter(int(grid.prod()) // self.image_processor.merge_size ** 2 for grid in vision["image_grid_thw"])
            texts = ["".join(piece if i == 0 else IMAGE_TOKEN * next(counts) + piece for i, piece in enumerate(t.split(IMAGE_TOKEN)))
                     for t in texts]
        tokens = self.tokenizer(texts, padding=padding, return_tensors=return_tensors)
        if images is not None:
            data["mm_token_type_ids"] = (tokens["input_ids"] == self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)).long()
        return BatchFeature({**tokens, **data})


def sample_size(width: int, height: int, area: int = SAMPLE_AREA) -> tuple[int, int]:
    """(width, height) the pipeline resizes a control image to: about `area` pixels (a megapixel),
    multiples of 32 (diffusers' calculate_dimensions)."""
    ratio = width / height
    w = math.sqrt(area * ratio)
    return round(w / 32) * 32, round(w / ratio / 32) * 32


def resized(image, area: int):
    """`image` (PIL) at about `area` pixels, as the pipelines' image processor resizes (LANCZOS)."""
    from PIL import Image

    return image.resize(sample_size(*image.size, area), resample=Image.Resampling.LANCZOS)


def to_pil(pixels: torch.Tensor) -> list:
    """(B, 3, H, W) in [-1, 1] -> B RGB images."""
    from PIL import Image

    arr = ((pixels.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(a) for a in arr]


@register_family(ModelType.QWEN_IMAGE_EDIT)
class QwenImageEdit(QwenImage):
    pipeline_class_name = "QwenImageEditPipeline"
    conditioning_kind = "control"  # the latent cache holds each variant's control latents (data/batches.py)
    default_control_image: str | None = None  # the trainer sets the first training pair's control image
    prompt_template = EDIT_TEMPLATE
    vision_area: int | None = None  # the text encoder's image resized to about this many pixels (None: as given)
    text_encoder_reads_images = True  # Qwen2.5-VL reads the control image: a text-only encoder file is refused

    # ---------------------------------------------------------------- loading

    @classmethod
    def _pipeline_from(cls, source, dtype, hub: Mapping, **parts):
        """The folder's pipeline: QwenImageEditPipeline's, or QwenImageEditPlusPipeline's (2509 /
        2511) loaded as such; another pipeline's folder is refused."""
        from diffusers import DiffusionPipeline

        name = DiffusionPipeline.load_config(str(source), **hub).get("_class_name", "")
        variant = next((c for c in (QwenImageEdit, QwenImageEditPlus) if c.pipeline_class_name == name), None)
        if variant is None:
            raise ModelLoadError(f"'{source}' is a {name} model; QWEN_IMAGE_EDIT trains Qwen-Image-Edit models (QwenImageEditPipeline, "
                                 "or QwenImageEditPlusPipeline: 2509, 2511); pick the model type that matches it.")
        return super(QwenImageEdit, variant)._pipeline_from(source, dtype, hub, **parts)

    @classmethod
    def _text_only_tokenizers(cls, source, hub: Mapping) -> dict:
        """The pipeline's `processor`: its image processor (the PIL one: no torchvision) and the
        tokenizer, put together as VisionPromptProcessor."""
        from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

        image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(source), subfolder="processor", **hub)
        tokenizer = AutoTokenizer.from_pretrained(str(source), subfolder="processor", **hub)
        return {"processor": VisionPromptProcessor(image_processor, tokenizer)}

    @classmethod
    def _from_pipeline(cls, pipe):
        variant = QwenImageEditPlus if type(pipe).__name__ == QwenImageEditPlus.pipeline_class_name else QwenImageEdit
        model = super(QwenImageEdit, variant)._from_pipeline(pipe)
        model.pipeline_config = {"processor": pipe.processor}  # given back to the pipeline built for samples
        return model

    def save_other_files(self, folder: Path) -> None:
        """The processor folder (image processor and tokenizer files, as the hub's) the folder's
        model_index names, so a fine-tune's folder loads as its base did."""
        processor = self.pipeline_config["processor"]
        processor.image_processor.save_pretrained(folder / "processor")
        processor.tokenizer.save_pretrained(folder / "processor")

    def caches_conditioning(self, masked_training: bool) -> bool:
        return True  # every training image has its control image

    @torch.no_grad()
    def encode_conditioning(self, pixels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The control image's latents (B, C, h, w): the VAE's mean, as the pipeline takes it."""
        return self.encode_images(pixels, sample=False).float()

    # ---------------------------------------------------------------- text

    def encode_text(self, captions, grad: frozenset[str] | set[str] = frozenset(), control=None):
        """{"encoder_hidden_states": (B, L, width), zero past each prompt's tokens, "attention_mask":
        (B, L) bool} for the prompts read with their control images (`control`: (B, 3, H, W) in
        [-1, 1] or B PIL images); L is the batch's longest. Without `control` (the memory planner's
        probe) a mid-grey image of 512 px stands in."""
        texts = list(captions["text_encoder"] if isinstance(captions, Mapping) else captions)
        if control is None:
            control = torch.zeros(len(texts), 3, 512, 512)
        images = to_pil(control) if isinstance(control, torch.Tensor) else list(control)
        if self.vision_area:
            images = [resized(image, self.vision_area) for image in images]
        processor = self.pipeline_config["processor"]
        inputs = processor(text=[self.prompt_template.format(t) for t in texts], images=images, padding=True, return_tensors="pt")
        device = module_device(self.text_encoder)
        mask = inputs["attention_mask"].to(device).bool()
        with torch.set_grad_enabled("text_encoder" in grad and torch.is_grad_enabled()):
            hidden = self.text_encoder(
                input_ids=inputs["input_ids"].to(device), attention_mask=mask.long(), pixel_values=inputs["pixel_values"].to(device),
                image_grid_thw=inputs["image_grid_thw"].to(device), mm_token_type_ids=inputs["mm_token_type_ids"].to(device),
                output_hidden_states=True,
            ).hidden_states[-(1 + self.layer_skips.get("text_encoder", 0))]
            kept = [h[m][EDIT_DROP_TOKENS:] for h, m in zip(hidden, mask, strict=True)]
        longest = max(1, max(len(k) for k in kept))
        out = hidden.new_zeros(len(kept), longest, hidden.shape[-1])
        for i, k in enumerate(kept):
            out[i, : len(k)] = k
        lengths = torch.tensor([len(k) for k in kept], device=device)
        return {"encoder_hidden_states": out, "attention_mask": torch.arange(longest, device=device)[None, :] < lengths[:, None]}

    # ---------------------------------------------------------------- training

    def control_latents(self, batch, noisy: torch.Tensor) -> torch.Tensor:
        """The batch's control latents: cached, else encoded from its control pixels; without
        either (the memory planner's probe) zeros of the noisy latents' size stand in."""
        cached = getattr(batch, "conditioning_latents", None)
        if cached is not None:
            return cached
        pixels = getattr(batch, "control_pixels", None)
        if pixels is not None:
            with torch.no_grad():
                return self.encode_conditioning(pixels)
        return torch.zeros_like(noisy)

    def predict(self, noisy: torch.Tensor, t: torch.Tensor, conditioning, batch=None) -> torch.Tensor:
        """The velocity (B, C, H, W) of the noisy latents, the control latents after them in the
        sequence; the output's control tokens are dropped."""
        transformer = self.transformer
        device, dtype = module_device(transformer), input_dtype(transformer)
        b, _, h, w = noisy.shape
        control = self.control_latents(batch, noisy).to(device, dtype)
        ch, cw = control.shape[-2:]
        tokens = pack_latents(noisy.to(device, dtype))
        hidden, mask = self.trimmed(conditioning, device, dtype)
        out = transformer(
            hidden_states=torch.cat([tokens, pack_latents(control)], dim=1),
            encoder_hidden_states=hidden,
            encoder_hidden_states_mask=mask,
            timestep=t.to(device, dtype).expand(b),
            img_shapes=[[(1, h // 2, w // 2), (1, ch // 2, cw // 2)]] * b,
            return_dict=False,
        )[0]
        return unpack_latents(out[:, : tokens.shape[1]], h, w)

    # ---------------------------------------------------------------- sampling

    def sample(self, prompt: str, *args, control_image=None, **kwargs):
        """A sample edits `control_image` (a path or PIL image; None: the first training pair's)."""
        with sample_image(self, control_image, "Qwen-Image-Edit samples edit an image: give the sample a control image (control_image)"):
            return super().sample(prompt, *args, **kwargs)

    def prompt_embeddings(self, texts: Sequence[str]) -> dict:
        """The prompt read with the sample's image at the size the pipeline gives its text encoder
        (about a megapixel; Plus: `vision_area`, which encode_text resizes to)."""
        image = self._sample_image if self.vision_area else resized(self._sample_image, SAMPLE_AREA)
        return self.encode_text(texts, control=[image] * len(texts))

    def sampling_inputs(self, height: int, width: int, **inputs) -> dict:
        return {"image": self._sample_image, **super().sampling_inputs(height, width, **inputs)}


class QwenImageEditPlus(QwenImageEdit):
    """Qwen-Image-Edit-2509 / 2511, which QWEN_IMAGE_EDIT loads when the folder names
    QwenImageEditPlusPipeline (not registered: the model type is the same)."""

    family_name = "Qwen-Image-Edit Plus"
    default_config_repo = "Qwen/Qwen-Image-Edit-2509"
    pipeline_class_name = "QwenImageEditPlusPipeline"
    prompt_template = PLUS_TEMPLATE
    vision_area = PLUS_VISION_AREA
