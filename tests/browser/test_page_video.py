"""A video LoRA from the page: a Wan 2.1 config loaded by its path, the concept pointed at a folder
of clips by typing it (nothing uploaded), the run started with Start, and the sample it draws after
its first epoch played as a video in the run bar's gallery."""

import json

import pytest
from PIL import Image

from tests.browser.page_helpers import box, open_page, open_tab, type_into, wait_for
from tests.video_clips import write_clip

pytestmark = pytest.mark.browser


def _saved_folder(app) -> str | None:
    try:
        return json.loads((app["workspace"] / "ui-config.json").read_text())["concepts"][0]["path"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def _clips(folder):
    for i in range(3):
        write_clip(folder / f"clip{i}.mp4", frames=9, seed=i)
        (folder / f"clip{i}.txt").write_text("a yellow square moving")
    Image.new("RGB", (32, 32), (240, 200, 40)).save(folder / "still.png")
    return folder


def test_clip_folder_trains_from_the_page_and_a_video_sample_plays(module_app, module_page):
    page, cwd = module_page, module_app["cwd"]
    clips = _clips(cwd / "my clips")
    config = {
        "config_version": 1, "model_type": "WAN_2_1", "training_method": "LORA", "base_model_name": "tiny:wan",
        "output_model_destination": str(cwd / "models" / "clips.safetensors"), "output_model_format": "DIFFUSERS_LORA",
        "resolution": "64", "frames": "5", "frame_rate": 24.0, "epochs": 3, "batch_size": 1, "learning_rate": 1e-3,
        "train_device": "cpu", "train_dtype": "FLOAT_32", "lora_rank": 4, "lora_alpha": 4.0,
        "text_encoder": {"train": False}, "backup_after_unit": "NEVER", "tensorboard": False,
        "samples": [{"prompt": "a yellow square moving", "height": 64, "width": 64, "diffusion_steps": 2}],
        "sample_after": 1, "sample_after_unit": "EPOCH",
        "concepts": [{"name": "clips", "path": str(cwd / "not-yet")}],
    }
    path = cwd / "wan-clips.json"
    path.write_text(json.dumps(config))
    open_page(page, module_app["url"])
    type_into(page, "config-path", str(path))
    page.get_by_role("button", name="Load", exact=True).click()
    wait_for(lambda: box(page, "f-model_type").input_value() == "WAN_2_1", "the config to load")

    open_tab(page, "Concepts")
    type_into(page, "concept-concepts-path", str(clips))
    wait_for(lambda: _saved_folder(module_app) == str(clips), "the typed folder to be saved")
    page.locator("#start").click()
    open_tab(page, "Run")
    video = page.locator("#sample-gallery video").first
    video.wait_for(timeout=300_000)
    assert video.get_attribute("src", timeout=5_000)
    wait_for(lambda: page.evaluate("() => { const v = document.querySelector('#sample-gallery video'); return !!v && v.readyState >= 2 && v.videoWidth == 64 }"),
             "the sample clip to play in the browser", timeout=60)
