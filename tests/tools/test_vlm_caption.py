"""JoyCaption and Qwen2.5-VL captions with tiny random models of their classes (LLaVA with a
SigLIP tower; Qwen2.5-VL), saved as the hub has them and loaded by the real code, with chat
templates that place the image as each model's does (tests/tools/vlm_models.py)."""

from pathlib import Path

import pytest
import torch
from PIL import Image

from ot_gradio.tools.autocaption import CAPTIONERS
from ot_gradio.tools.jobs import JobError, run_inline
from tests.tools.vlm_models import build_llava, build_qwen_vl

BUILDERS = {"joycaption": build_llava, "qwen-vl": build_qwen_vl}


@pytest.fixture(scope="module")
def vlm_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm")
    return {name: build(root) for name, build in BUILDERS.items()}


@pytest.fixture
def dataset(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(folder / "a_red.png")
    Image.new("RGB", (30, 40), (10, 10, 200)).save(folder / "b_blue.jpg")
    return folder


def params(folder, model, model_path, **extra):
    return {"folder": str(folder), "model": model, "model_path": str(model_path), "mode": "replace", "device": "cpu",
            "max_new_tokens": 8, **extra}


def captions(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}


@pytest.mark.parametrize("model", list(BUILDERS))
def test_a_chat_model_writes_one_line_seeded_captions(vlm_models, dataset, model):
    """Each image gets a one-line caption of the model's answer only (no instruction, no chat
    tokens), the initial caption in front; the same seed writes the same captions, another seed
    others."""
    result = run_inline("autocaption", params(dataset, model, vlm_models[model], initial_caption="photo of sks,"))
    assert result["written"] == 2 and result["failed"] == 0, result
    first = captions(dataset)
    assert set(first) == {"a_red", "b_blue"}
    for text in first.values():
        assert text.startswith("photo of sks, ") and len(text) > len("photo of sks, ")
        assert "\n" not in text and "im_start" not in text and "caption for this image" not in text and "Describe" not in text
    assert first["a_red"] != first["b_blue"]  # seeded per image
    run_inline("autocaption", params(dataset, model, vlm_models[model], initial_caption="photo of sks,"))
    assert captions(dataset) == first
    run_inline("autocaption", params(dataset, model, vlm_models[model], initial_caption="photo of sks,", seed=7))
    assert captions(dataset) != first


def test_the_chat_puts_the_image_and_the_instruction_as_each_template_wants(vlm_models):
    """JoyCaption's template inserts its image token itself and writes the content as given: it gets
    the instruction as a string (a list would be written as its repr), with its system message.
    Qwen's places images from a content list: it gets [image, text]. The form's instruction wins."""
    joy = CAPTIONERS["joycaption"]({})
    joy.load(str(vlm_models["joycaption"]), "cpu")
    text = joy.prompt()
    assert text.count("<image>") == 1 and "'type'" not in text
    assert "You are a helpful image captioner." in text and "Write a long descriptive caption for this image in a formal tone." in text
    qwen = CAPTIONERS["qwen-vl"]({"instruction": "List the colours."})
    qwen.load(str(vlm_models["qwen-vl"]), "cpu")
    assert qwen.prompt().endswith("<|vision_start|><|image_pad|><|vision_end|>List the colours.<|im_end|>\n<|im_start|>assistant\n")
    inputs = qwen.processor(text=[qwen.prompt()], images=[Image.new("RGB", (56, 56))])
    image_tokens = inputs["input_ids"] == qwen.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int(image_tokens.sum()) == int(inputs["image_grid_thw"].prod()) // 4  # one pad per merged 2x2 patch
    # which tokens are the image's: without it transformers 5 gives them a text's 1-D positions, not their 3-D ones
    assert torch.equal(inputs["mm_token_type_ids"], image_tokens.long())
    rope = qwen.model.model.get_rope_index(inputs["input_ids"], image_grid_thw=inputs["image_grid_thw"],
                                           mm_token_type_ids=inputs["mm_token_type_ids"])[0]
    assert not torch.equal(rope[1], rope[2])  # rows and columns of the image numbered apart
    from ot_gradio.tools.vlm_caption import _at_most

    assert _at_most(Image.new("RGB", (4000, 3000)), 1024 * 1024).size == (1182, 887)  # a photo read at about a megapixel


def test_a_template_that_writes_the_bos_token_gets_no_second_one(vlm_models):
    """As transformers' own apply_chat_template does: a chat text that starts with the BOS token is
    tokenized without adding another (Llama 3 templates write `<|begin_of_text|>` themselves)."""
    joy = CAPTIONERS["joycaption"]({"max_new_tokens": 4})
    joy.load(str(vlm_models["joycaption"]), "cpu")
    seen, processor = [], joy.processor

    class Spy:
        def __getattr__(self, name):
            return getattr(processor, name)

        def __call__(self, *args, **kwargs):
            seen.append(kwargs.get("add_special_tokens", True))
            return processor(*args, **kwargs)

    joy.processor = Spy()
    joy.caption([Image.new("RGB", (28, 28))], "", names=["x.png"])
    processor.tokenizer.bos_token = "<|im_start|>"  # the tiny template's first token
    joy.caption([Image.new("RGB", (28, 28))], "", names=["x.png"])
    assert seen == [True, False]


def test_a_plain_template_gets_the_image_token_before_the_instruction(tmp_path):
    """A Llama-style template that writes string content as it is and places no image: the token
    goes in front of the instruction (LLaVA's prompt form), once."""
    folder = build_llava(tmp_path, template="{% for m in messages %}<|im_start|>{{ m['content'] | trim }}<|im_end|>{% endfor %}")
    joy = CAPTIONERS["joycaption"]({"instruction": "Be brief."})
    joy.load(str(folder), "cpu")
    assert joy.prompt() == "<|im_start|>You are a helpful image captioner.<|im_end|><|im_start|><image>\nBe brief.<|im_end|>"
    assert joy.caption([Image.new("RGB", (28, 28))], "", names=["x.png"])[0]


def test_a_template_that_drops_the_message_is_refused_by_name(tmp_path, dataset):
    folder = build_llava(tmp_path, template="{% for m in messages %}{{ m['role'] }}{% endfor %}")
    with pytest.raises(JobError, match=r"JoyCaption: the model's chat template does not write the image \(<image>\) and the instruction"):
        run_inline("autocaption", params(dataset, "joycaption", folder))
    assert not list(dataset.glob("*.txt"))


def test_the_form_and_the_command_line_pass_the_chat_options(tmp_path, dataset, vlm_models, capsys):
    import gradio as gr

    from ot_gradio.cli import main
    from ot_gradio.runner.jobs import JobSupervisor
    from ot_gradio.ui.tools_autocaption import AutoCaptionTool
    from ot_gradio.ui.tools_tab import ToolsContext

    with gr.Blocks():
        ctx = ToolsContext(tmp_path / "ws", JobSupervisor(tmp_path / "ws"), gr.State({}), lambda config: [dataset])
        tool = AutoCaptionTool(ctx)
    hidden, _, chat, instruction = tool.on_model("joycaption")
    assert chat["visible"] and not hidden["visible"] and instruction["placeholder"].startswith("Write a long descriptive caption")
    assert not tool.on_model("blip")[2]["visible"]
    values = {tool.folder: str(dataset), tool.subfolders: False, tool.model: "qwen-vl", tool.model_path: "", tool.device: "cpu",
              tool.mode: "missing", tool.initial: "", tool.prefix: "", tool.postfix: "", tool.general: 0.35, tool.character: 0.85,
              tool.instruction: " Say red. ", tool.max_tokens: 20, tool.seed: 3, ctx.config_state: {}}
    got = tool.params(values)
    assert (got["model_path"], got["instruction"], got["max_new_tokens"], got["seed"]) == ("Qwen/Qwen2.5-VL-7B-Instruct", "Say red.", 20, 3)
    assert "Max new tokens" in tool.on_start({**values, tool.max_tokens: 0})[2]

    assert main(["caption", "auto", str(dataset), "--model", "joycaption", "--model-path", str(vlm_models["joycaption"]),
                 "--device", "cpu", "--max-new-tokens", "6", "--seed", "5", "--instruction", "Be brief."]) == 0
    assert "2 captions written" in capsys.readouterr().out
    assert len(captions(dataset)) == 2
