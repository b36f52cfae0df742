"""Natural-language captions from chat vision-language models: JoyCaption and Qwen2.5-VL.

BLIP's one-line captions suit SD 1.5; the T5 / LLM text encoders of Flux, SD 3, Qwen-Image, Wan
and the others train best on the long descriptive captions these models write. Any model that
transformers loads as `AutoModelForImageTextToText` with a processor and a chat template works
through the same class (give its hub id or folder as Model path); two are named, with the
instruction their authors suggest:

- JoyCaption Beta One (`fancyfeast/llama-joycaption-beta-one-hf-llava`, LLaVA: SigLIP and Llama
  3.1 8B, about 17 GB in bfloat16): written for training captions, uncensored.
- Qwen2.5-VL (`Qwen/Qwen2.5-VL-7B-Instruct`; the 3B fits an 8 GB card).

Decisions:
- The message is the instruction (the form's *Instruction*, else the model's own) with the image.
  A template that puts the image token in itself gets the instruction as a string; one that
  places images from the content (Qwen's) gets `[image, text]`; one that does neither (a plain
  Llama 3.1 template) gets the token written before the instruction, as LLaVA prompts have it.
  Each form is checked on the text the template writes (one image token, the instruction, no
  content list written out as text); a template that writes none of them is refused by name.
- Sampling as JoyCaption's card recommends (temperature 0.6, top-p 0.9), seeded per image from
  the form's seed and the image's name, so a rerun writes the same captions.
- The caption is one line: the model's line breaks become spaces (a caption file's lines are
  separate captions under Caption file lines EACH, the default). The instruction and chat tokens
  are never in it. A caption that reaches Max new tokens (512, JoyCaption's card's) ends there.
- An image over a megapixel is scaled down to one first (Qwen VL reads images at their own size).
- bfloat16 on a GPU (float16 where the card lacks it), float32 on the CPU (slow: minutes an
  image for an 8B model).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from .. import jsontext
from .caption_models import Captioner, not_found, option, register, weights_source
from .jobs import JobError

TEMPERATURE, TOP_P = 0.6, 0.9
MAX_NEW_TOKENS = 512  # JoyCaption's card: a long descriptive caption is not cut short
# a larger image is scaled down to this many pixels first: Qwen VL reads images at their own size
# (a 12 MP photo would be 15 000 vision tokens); JoyCaption's processor makes every image 384 px
MAX_PIXELS = 1024 * 1024


def _at_most(image: Any, pixels: int) -> Any:
    width, height = image.size
    if width * height <= pixels:
        return image
    scale = (pixels / (width * height)) ** 0.5
    return image.resize((max(1, round(width * scale)), max(1, round(height * scale))), resample=3)  # (PIL's BICUBIC)


class ChatCaptioner(Captioner):
    """A chat vision-language model: processor + chat template + generate()."""

    system = ""  # the system message the model was trained with, if any
    instruction = "Describe this image in detail."

    def load(self, path: str, device: str) -> None:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        source, cached_only = weights_source(self, path)
        self.target = device
        if device.startswith("cuda"):
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            self.dtype = torch.float32
        try:
            self.processor = _processor(source, cached_only)
            self.model = transformers.AutoModelForImageTextToText.from_pretrained(source, dtype=self.dtype, **cached_only)
        except JobError:
            raise
        except Exception as err:  # noqa: BLE001 - offline, unknown id, an incomplete or foreign folder: the same advice
            raise not_found(self, path, err) from None
        self.model.to(device).eval()
        self.image_token = getattr(self.processor, "image_token", None) or "<image>"
        if not getattr(self.processor, "chat_template", None) and not getattr(self.processor.tokenizer, "chat_template", None):
            raise JobError(f"{self.label}: '{path}' has no chat template; give a chat (instruct) vision-language model")
        self.prompt()  # a template that places no image stops the job here, before any image

    def prompt(self) -> str:
        """The chat as the model's template writes it, ending where the answer starts."""
        instruction = str(self.options.get("instruction") or "").strip() or self.instruction
        system = [{"role": "system", "content": self.system}] if self.system else []
        # the string first: a template that inserts its image token itself would write a list's repr;
        # last, the token written in front of the instruction, as LLaVA's own prompts have it
        for content in (instruction, [{"type": "image"}, {"type": "text", "text": instruction}], f"{self.image_token}\n{instruction}"):
            try:
                text = self.processor.apply_chat_template(system + [{"role": "user", "content": content}], tokenize=False,
                                                          add_generation_prompt=True)
            except Exception:  # noqa: BLE001 - a template written for the other content form
                continue
            if isinstance(text, str) and text.count(self.image_token) == 1 and instruction in text and "'type'" not in text:
                return text
        raise JobError(f"{self.label}: the model's chat template does not write the image ({self.image_token}) and the "
                       "instruction into the message; give a chat vision-language model whose processor has a chat template")

    def caption(self, images: list[Any], initial: str, names: list[str] | None = None) -> list[str]:
        import torch  # noqa: PLC0415

        text = self.prompt()
        seed = int(option(self.options, "seed", 42))
        out = []
        for index, image in enumerate(images):
            bos = getattr(self.processor.tokenizer, "bos_token", None)
            # a template that writes the BOS token itself: the tokenizer adds none (transformers' own rule)
            extra = {"add_special_tokens": False} if bos and text.startswith(bos) else {}
            inputs = self.processor(text=[text], images=[_at_most(image, MAX_PIXELS)], return_tensors="pt", **extra).to(self.target)
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
            name = (names or [])[index] if index < len(names or []) else str(index)
            generator_seed = (seed + zlib.crc32(name.encode("utf-8"))) % (2**63)
            torch.manual_seed(generator_seed)
            with torch.no_grad():
                tokens = self.model.generate(**inputs, max_new_tokens=int(option(self.options, "max_new_tokens", MAX_NEW_TOKENS)),
                                             do_sample=True, temperature=TEMPERATURE, top_p=TOP_P, top_k=None)
            new = tokens[0][inputs["input_ids"].shape[1]:]
            caption = " ".join(self.processor.tokenizer.decode(new, skip_special_tokens=True).split())
            if not caption:
                raise JobError(f"{self.label} wrote no caption for this image (it ended its answer at once)")
            out.append(f"{initial.strip()} {caption}".strip() if initial.strip() else caption)
        return out


def _processor(source: str, cached_only: dict) -> Any:
    """The model's processor; for the Qwen VL models, whose processor transformers builds only with
    torchvision (for its video half, which is not installed here), the same image-and-text call
    put together from their image processor (the PIL one), tokenizer and chat template."""
    import transformers  # noqa: PLC0415

    try:
        return transformers.AutoProcessor.from_pretrained(source, **cached_only)
    except ImportError as err:
        if "torchvision" not in str(err).lower():
            raise
    image_processor = transformers.AutoImageProcessor.from_pretrained(source, **cached_only)
    if not hasattr(image_processor, "merge_size"):  # not a Qwen VL image processor: nothing to put together
        raise JobError(f"'{source}': its processor needs torchvision, which is not installed; give a model whose processor "
                       "does not (JoyCaption, Qwen2.5-VL)")
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, **cached_only)
    return QwenVLProcessor(image_processor, tokenizer, _chat_template(source, tokenizer, cached_only))


def _chat_template(source: str, tokenizer: Any, cached_only: dict) -> str | None:
    """The processor's chat template (chat_template.jinja, or chat_template.json's), else the tokenizer's."""

    for name in ("chat_template.jinja", "chat_template.json"):
        path = Path(source) / name
        if not path.is_file() and not Path(source).is_dir():
            try:
                from huggingface_hub import hf_hub_download  # noqa: PLC0415

                path = Path(hf_hub_download(source, name, **cached_only))
            except Exception:  # noqa: BLE001 - the repo has no such file
                continue
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            return text if name.endswith(".jinja") else jsontext.loads(text).get("chat_template")
    return getattr(tokenizer, "chat_template", None)


class QwenVLProcessor:
    """Qwen2/2.5/3-VL's processor for one image and its chat: the template, the image pad repeated
    once per merged patch (models/qwen_image_edit.py's VisionPromptProcessor), the tokenizer."""

    image_token = "<|image_pad|>"

    def __init__(self, image_processor: Any, tokenizer: Any, chat_template: str | None):
        from ..models.qwen_image_edit import VisionPromptProcessor  # noqa: PLC0415

        self.tokenizer, self.chat_template = tokenizer, chat_template
        self.call = VisionPromptProcessor(image_processor, tokenizer)

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> str:
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, **kwargs)

    def __call__(self, text: list[str], images: list[Any], return_tensors: str = "pt", **_: Any) -> Any:
        return self.call(text, images=images, return_tensors=return_tensors)  # (Qwen's tokenizer adds no BOS token)


@register("joycaption")
class JoyCaptioner(ChatCaptioner):
    label = "JoyCaption"
    default_path = "fancyfeast/llama-joycaption-beta-one-hf-llava"
    system = "You are a helpful image captioner."
    instruction = "Write a long descriptive caption for this image in a formal tone."


@register("qwen-vl")
class QwenVLCaptioner(ChatCaptioner):
    label = "Qwen2.5-VL"
    default_path = "Qwen/Qwen2.5-VL-7B-Instruct"
    instruction = ("Describe this image in one detailed paragraph: the subject, their appearance and pose, the setting, "
                   "the lighting, the colours and the style.")
