"""Tiny random chat vision-language models in the layouts the hub has them (save_pretrained
folders with a processor and its chat template), for the JoyCaption / Qwen2.5-VL captioners.

- `build_llava`: JoyCaption's class (LlavaForConditionalGeneration: a SigLIP tower, a Llama),
  with a template that, as JoyCaption's, puts the image token in the first user message itself
  and writes the message's content as it is (a list would be written as its repr).
- `build_qwen_vl`: Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) with a template that places
  the image where the content list has it, as Qwen's; a string content gets no image.
Both have `min_new_tokens` in their generation config so that a random model never answers with
nothing."""

from pathlib import Path

LLAVA_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'user' and loop.first or (m['role'] == 'user' and loop.index0 == 1) %}<image>{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _text_config(tokenizer) -> dict:
    pad = tokenizer.pad_token_id
    return dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, max_position_embeddings=2048, bos_token_id=pad, eos_token_id=pad, pad_token_id=pad)


def _save(model, processor, folder: Path) -> Path:
    model.generation_config.min_new_tokens = 4
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_llava(root: Path, template: str = LLAVA_TEMPLATE) -> Path:
    import torch
    from tokenizers import AddedToken
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor, SiglipImageProcessor

    from ot_gradio.models.tiny.qwen_image import tiny_qwen_vl_tokenizer

    tokenizer = tiny_qwen_vl_tokenizer()
    tokenizer.add_tokens([AddedToken("<image>", special=True, normalized=False)], special_tokens=True)
    vision = dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                  image_size=28, patch_size=14)
    config = LlavaConfig(vision_config=vision, text_config=dict(model_type="llama", **_text_config(tokenizer)),
                         image_token_index=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="full",
                         vision_feature_layer=-1)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).eval()
    processor = LlavaProcessor(image_processor=SiglipImageProcessor(size={"height": 28, "width": 28}), tokenizer=tokenizer, patch_size=14,
                               vision_feature_select_strategy="full", num_additional_image_tokens=0, chat_template=template)
    return _save(model, processor, root / "llava")


def build_qwen_vl(root: Path) -> Path:
    """As the hub has Qwen2.5-VL: the model, its image processor's config, the tokenizer and
    chat_template.jinja (transformers' own processor class is not made: it needs torchvision)."""
    import json

    from transformers import Qwen2VLImageProcessorPil

    from ot_gradio.models.tiny.qwen_image import tiny_qwen_vl_encoder, tiny_qwen_vl_tokenizer

    tokenizer = tiny_qwen_vl_tokenizer()
    tokenizer.chat_template = None  # the processor's template is the one to read
    model = tiny_qwen_vl_encoder(tokenizer).eval()
    folder = root / "qwen-vl"
    model.generation_config.min_new_tokens = 4
    model.save_pretrained(folder)
    Qwen2VLImageProcessorPil(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28).save_pretrained(folder)
    config = folder / "preprocessor_config.json"
    data = json.loads(config.read_text())
    data.update(image_processor_type="Qwen2VLImageProcessor", processor_class="Qwen2_5_VLProcessor")
    config.write_text(json.dumps(data, indent=2))
    tokenizer.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    return folder
