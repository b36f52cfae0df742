"""Qwen-Image-Edit end to end through the worker on the tiny model: presets/qwen-image-edit-lora.json
trained (64 px, 2 epochs, FLOAT_8 transformer and Qwen2.5-VL as the preset has them) on three
(image, `-control` image) pairs beside an image without its control image (skipped, named in a
warning), with a sample editing the first pair's control image; the DIFFUSERS_LORA reloaded with
QwenImageEditPipeline.load_lora_weights, nothing ignored, changes the pipeline's edit of a
control image."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image, ImageOps

from ot_gradio.config.presets import PRESETS_DIR
from tests.e2e.runs import imported, lora_load_problems, run_until_done, tiny_fixture
from tests.models.family_checks import pipeline_image

pytestmark = pytest.mark.slow
PRESET = PRESETS_DIR / "qwen-image-edit-lora.json"
PROMPT = "turn it upside down"

tiny_edit = tiny_fixture("qwen-image-edit", "tiny_edit")


def pairs(shapes, tmp_path):
    """Three shapes as the edited images, each beside its control image (the shape mirrored top
    to bottom), and one image with no control image."""
    data = tmp_path / "pairs"
    data.mkdir()
    for stem in ("01-red-circle", "02-blue-square", "03-green-triangle", "04-yellow-circle"):
        shutil.copy(shapes / f"{stem}.png", data)
        (data / f"{stem}.txt").write_text(PROMPT)
        if stem != "04-yellow-circle":
            with Image.open(shapes / f"{stem}.png") as img:
                ImageOps.flip(img.convert("RGB")).save(data / f"{stem}-control.png")
    return data


def test_preset_trains_on_pairs_a_lora_that_changes_the_edit_pipeline(tiny_edit, shapes, tmp_path):
    from diffusers import QwenImageEditPipeline

    from ot_gradio.models.qwen_image_edit import QwenImageEdit

    data = pairs(shapes, tmp_path)
    config = imported(PRESET, tiny_edit.diffusers_dir, data, tmp_path, "lora.safetensors", resolution="64", epochs=2,
                      learning_rate=1e-2, learning_rate_warmup_steps=0, samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}],
                      sample_after=1, sample_after_unit="EPOCH")
    assert (config["model_type"], config["output_model_format"]) == ("QWEN_IMAGE_EDIT", "DIFFUSERS_LORA")
    _, events = run_until_done(config, tmp_path)
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert any("04-yellow-circle.png" in w and "without a control image" in w for w in warnings), warnings
    assert [e for e in events if e["type"] == "sample"]
    assert all(np.isfinite([e["loss"] for e in events if e["type"] == "metrics" and "loss" in e]))

    processor = QwenImageEdit._text_only_tokenizers(tiny_edit.diffusers_dir, {"local_files_only": True})
    # transformers' Qwen2VLProcessor needs torchvision, not installed here: the family's processor stands in
    pipe = QwenImageEditPipeline.from_pretrained(str(tiny_edit.diffusers_dir), local_files_only=True, processor=None)
    pipe.register_modules(**processor)
    pipe.set_progress_bar_config(disable=True)
    control = Image.open(data / "01-red-circle-control.png").convert("RGB")
    before = pipeline_image(pipe, image=control, prompt=PROMPT, true_cfg_scale=1.0)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    after = pipeline_image(pipe, image=control, prompt=PROMPT, true_cfg_scale=1.0)
    assert np.abs(after - before).max() > 1e-6  # the same pipeline draws the same image bit for bit


def test_fine_tune_saves_a_folder_that_loads_as_its_base_did(tiny_edit, shapes, tmp_path):
    """FINE_TUNE: the transformer trained on the pairs, the whole model saved as a diffusers folder
    with its processor (image processor and tokenizer files), which our loader reads back."""
    import torch
    from diffusers import QwenImageTransformer2DModel

    from ot_gradio.models.qwen_image_edit import QwenImageEdit

    config = imported(PRESET, tiny_edit.diffusers_dir, pairs(shapes, tmp_path), tmp_path, "model", resolution="64", epochs=1,
                      learning_rate=1e-3, learning_rate_warmup_steps=0, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
                      output_dtype="FLOAT_32",
                      train_dtype="FLOAT_32", optimizer={"optimizer": "ADAMW"}, samples=[],
                      transformer={"train": True, "weight_dtype": "FLOAT_32"})
    run_until_done(config, tmp_path)
    out = tmp_path / "out" / "model"
    assert {"preprocessor_config.json", "tokenizer.json"} <= {p.name for p in (out / "processor").iterdir()}
    tuned = QwenImageEdit.load(str(out)).transformer.state_dict()
    base = QwenImageTransformer2DModel.from_pretrained(str(tiny_edit.diffusers_dir), subfolder="transformer").state_dict()
    assert tuned.keys() == base.keys() and [k for k in tuned if not torch.equal(tuned[k], base[k])]
