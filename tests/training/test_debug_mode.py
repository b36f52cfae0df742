"""debug_mode on the tiny SD 1.5 (4 square images, CPU, 2 steps of 2): the debug folder gets, per
step and sample, the latents decoded by the VAE, the mask the loss used and the caption after
caption augmentation; the run trains exactly as with debug mode off; debug_dir is inside the run
folder unless absolute, and a relative one cannot climb out of it."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from ot_gradio.training.debug_output import DebugWriter, debug_folder, prompt_text
from ot_gradio.training.preflight import TrainingError
from tests.training.test_run_options import _trainer

CAPTION = "Shape, RED Circle, On WHITE"


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model.diffusers_dir


@pytest.fixture
def masked_data(four_shapes, tmp_path):
    """The 4 images with a caption in mixed case and a mask whose left half is white."""
    folder = tmp_path / "data"
    folder.mkdir()
    half = np.zeros((64, 64), np.uint8)
    half[:, :32] = 255
    for image in sorted(four_shapes.glob("*.png")):
        shutil.copy(image, folder / image.name)
        (folder / f"{image.stem}.txt").write_text(f"{image.stem} {CAPTION}")
        Image.fromarray(half).save(folder / f"{image.stem}-masklabel.png")
    return folder


def _run(tiny, data, work, **overrides):
    concept = {"name": "c", "path": str(data), "text": {"caps_randomize_lowercase": True, "keep_tags_count": 1}}
    trainer, events = _trainer(tiny, data, work, concepts=[concept], masked_training=True, unmasked_probability=0.0,
                               seed=7, **overrides)
    trainer.setup()
    assert trainer.train() == "done"
    return trainer, events


def test_debug_mode_writes_what_each_step_trains_on(tiny, masked_data, tmp_path):
    trainer, _ = _run(tiny, masked_data, tmp_path / "w", debug_mode=True)
    folder = tmp_path / "w" / "debug"  # relative: inside the run's folder
    stems = sorted(p.stem for p in masked_data.glob("*.png") if not p.stem.endswith("-masklabel"))
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 2 * 2 * 3  # 2 steps x 2 samples x (image, mask, prompt); no conditioning for a plain model
    seen = []
    for step in (1, 2):
        for index in (0, 1):
            [prompt] = [n for n in names if n.startswith(f"{step}-{index}-") and n.endswith("-prompt.txt")]
            stem = prompt[len(f"{step}-{index}-"):-len("-prompt.txt")]
            seen.append(stem)
            base = folder / f"{step}-{index}-{stem}"
            # caps_randomize_lowercase: every tag but the first is lowercased; the .txt keeps its case
            assert (folder / prompt).read_text() == f"{stem} Shape, red circle, on white"
            assert (masked_data / f"{stem}.txt").read_text() == f"{stem} {CAPTION}"
            with Image.open(f"{base}-image.png") as image:
                assert (image.mode, image.size) == ("RGB", (64, 64))  # the crop size trained on
                pixels = np.asarray(image)
            with Image.open(f"{base}-mask.png") as mask:
                assert (mask.mode, mask.size) == ("L", (64, 64))
                mask = np.asarray(mask)
            assert (mask[:, :32] == 255).all() and (mask[:, 32:] == 0).all()
            assert pixels.std() > 0  # a decoded image, not a blank file
    assert sorted(seen) == stems  # one epoch: each image once
    # the image is the trained latents decoded by the model's VAE
    latents = trainer.dataset.epoch_batches(0)[0].latents
    with torch.no_grad():
        decoded = trainer.model.decode_latents(latents)
    first = trainer.dataset.epoch_batches(0)[0].image_paths[0]
    with Image.open(folder / f"1-0-{Path(first).stem}-image.png") as image:
        written = torch.from_numpy(np.asarray(image).astype(np.float32)).permute(2, 0, 1)
    expected = ((decoded[0].float().clamp(-1, 1) + 1) / 2 * 255).round()
    assert torch.equal(written, expected)


@pytest.mark.parametrize("latent_caching", [True, False])
def test_debug_mode_does_not_change_training(tiny, masked_data, tmp_path, latent_caching):
    """Same seed: the same losses and the same LoRA with debug mode on and off; off writes nothing."""
    off, off_events = _run(tiny, masked_data, tmp_path / "off", latent_caching=latent_caching)
    on, on_events = _run(tiny, masked_data, tmp_path / "on", latent_caching=latent_caching, debug_mode=True)
    assert len(on_events.losses) == 2 and on_events.losses == off_events.losses
    saved_on, saved_off = load_file(on_events.saved_paths[-1]), load_file(off_events.saved_paths[-1])
    assert saved_on.keys() == saved_off.keys() and all(torch.equal(saved_on[k], saved_off[k]) for k in saved_on)
    assert len(list((tmp_path / "on" / "debug").iterdir())) == 12
    assert not (tmp_path / "off" / "debug").exists()
    assert not any("debug" in p.name for p in (tmp_path / "off").rglob("*"))


def test_debug_dir_stays_inside_the_run_folder_unless_absolute(tiny, masked_data, tmp_path):
    run = tmp_path / "run"
    assert debug_folder("debug", run) == (run / "debug").resolve()
    assert debug_folder("a/../b", run) == (run / "b").resolve()
    assert debug_folder(str(tmp_path / "elsewhere"), run) == tmp_path / "elsewhere"
    for bad in ("../outside", "a/../../outside", " "):
        with pytest.raises(TrainingError, match="debug_dir"):
            debug_folder(bad, run)
    trainer, _ = _trainer(tiny, masked_data, tmp_path / "w", debug_mode=True, debug_dir="../../x")
    with pytest.raises(TrainingError, match="climbs out of the run's folder"):
        trainer.setup()
    absolute = tmp_path / "abs-debug"
    trainer, _ = _trainer(tiny, masked_data, tmp_path / "w2", debug_mode=True, debug_dir=str(absolute))
    trainer.setup()
    assert trainer.diffusion.debug.folder == absolute and absolute.is_dir()


def test_inpainting_models_also_get_the_conditioning_image(masked_data, tmp_path):
    from ot_gradio.models.tiny.sd_inpainting import save_tiny_sd15_inpainting

    model = save_tiny_sd15_inpainting(tmp_path / "tiny").diffusers_dir
    _run(model, masked_data, tmp_path / "w", model_type="STABLE_DIFFUSION_15_INPAINTING", debug_mode=True)
    folder = tmp_path / "w" / "debug"
    conditioning = sorted(folder.glob("*-conditioning.png"))
    assert len(conditioning) == 4 and len(list(folder.iterdir())) == 16
    for path in conditioning:
        with Image.open(path) as cond, Image.open(str(path).replace("-conditioning", "-image")) as image:
            assert cond.size == image.size == (64, 64)
            assert not np.array_equal(np.asarray(cond), np.asarray(image))  # the masked image, not the image


def test_a_family_without_a_vae_decode_gets_prompts_and_masks(tmp_path):
    """Würstchen / Stable Cascade (`decodes_latents` False): no image is decoded; several text
    encoders that got different captions (dropout) are written one line each."""
    model = SimpleNamespace(decodes_latents=False, inpainting=False)
    writer = DebugWriter(tmp_path, model, placement=None, step=lambda: 3)
    batch = SimpleNamespace(image_paths=["/d/cat.png", "/d/dog.jpg"], size=(16, 8))
    mask = torch.zeros(2, 1, 4, 2)
    mask[1] = 1.0
    writer(batch, torch.zeros(2, 4, 4, 2), mask, {"text_encoder": ["a cat", ""], "text_encoder_2": ["a cat", "a dog"]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3-0-cat-mask.png", "3-0-cat-prompt.txt", "3-1-dog-mask.png",
                                                          "3-1-dog-prompt.txt"]
    assert (tmp_path / "3-0-cat-prompt.txt").read_text() == "a cat"
    assert (tmp_path / "3-1-dog-prompt.txt").read_text() == "text_encoder: \ntext_encoder_2: a dog"
    with Image.open(tmp_path / "3-1-dog-mask.png") as white, Image.open(tmp_path / "3-0-cat-mask.png") as black:
        assert white.size == (8, 16) and np.asarray(white).min() == 255 and np.asarray(black).max() == 0
    writer(batch, torch.zeros(2, 4, 4, 2), None, ["x", "y"])  # the same step's next batch (accumulation) counts on
    assert (tmp_path / "3-3-dog-prompt.txt").read_text() == "y" and prompt_text(["x", "y"], 0) == "x"


def test_the_decode_brings_a_parked_vae_and_runs_it_in_eval_without_gradients(tmp_path):
    import contextlib

    vae = torch.nn.Linear(1, 1).train()
    seen = []

    class Model:  # a VAE that waits in RAM (placement.py) and decodes to a (B, 3, frames, H, W) video
        decodes_latents, inpainting, denoiser, text_encoder_names = True, False, "unet", ("text_encoder",)
        parts = {"unet": torch.nn.Linear(1, 1), "text_encoder": torch.nn.Linear(1, 1), "vae": vae}

        def decode_latents(self, latents):
            seen.append((placement.inside, vae.training, torch.is_grad_enabled()))
            video = -torch.ones(latents.shape[0], 3, 2, 4, 6)
            video[:, :, 0] = 1.0  # the first frame white
            return video

    class Parked:
        inside = False

        def for_samples(self):
            return ["vae"]

        @contextlib.contextmanager
        def using(self, parts):
            assert parts == ["vae"]
            self.inside = True
            yield
            self.inside = False

    placement = Parked()
    DebugWriter(tmp_path, Model(), placement, step=lambda: 1)(SimpleNamespace(image_paths=["a.mp4"], size=(4, 6)), torch.zeros(1, 4, 2, 1, 1), None, ["a"])
    assert seen == [(True, False, False)] and vae.training and not placement.inside
    with Image.open(tmp_path / "1-0-a-image.png") as image:
        assert image.size == (6, 4) and np.asarray(image).min() == 255
