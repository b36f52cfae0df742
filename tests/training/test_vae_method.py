"""FINE_TUNE_VAE (training/vae_method.py) on the tiny SD 1.5, in this process: the decoder
learns to reproduce the images (the reconstruction loss falls on a fixed batch), only
`vae.decoder.*` changes in the saved model (a diffusers folder or a single file, both reloaded by
diffusers), a run continued from a backup trains on as the uninterrupted one, and a family OneTrainer does not offer it for is
refused before the run, naming training_method and the model type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model


@pytest.fixture(scope="module")
def shapes(four_shapes):
    return four_shapes


def _config(tiny, shapes, work: Path, **overrides) -> dict:
    config = {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "FINE_TUNE_VAE", "base_model_name": str(tiny.diffusers_dir),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"), "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "out" / "model.safetensors"), "output_model_format": "DIFFUSERS",
        "concepts": [{"name": "c", "path": str(shapes)}], "resolution": "64", "batch_size": 2, "epochs": 3,
        "learning_rate": 3e-3, "learning_rate_warmup_steps": 0, "samples": [], "backup_after_unit": "NEVER",
        "backup_before_save": True, "tensorboard": False, "unet": {"gradient_checkpointing": False},
    }
    config.update(overrides)
    return config


def _trainer(config: dict, work: Path, other_runs: tuple[Path, ...] = ()):
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    paths = RunPaths(work / "s", work / "backup", work / "o", None, list(other_runs))
    return Trainer(load_config(config).config, paths, Reporter())


def _same(module: torch.nn.Module, base: torch.nn.Module) -> list[str]:
    """Names of the weights that differ between two modules of the same layout."""
    theirs = base.state_dict()
    return [k for k, v in module.state_dict().items() if not torch.equal(v.float(), theirs[k].float())]


@pytest.mark.parametrize("fmt", ["DIFFUSERS", "ORIGINAL_SINGLE_FILE"])
def test_vae_finetune_lowers_the_reconstruction_loss_and_saves_only_the_decoder(tiny, shapes, tmp_path, fmt):
    from diffusers import StableDiffusionPipeline

    trainer = _trainer(_config(tiny, shapes, tmp_path, output_model_format=fmt), tmp_path)
    trainer.setup()
    assert [g.name for g in trainer.param_groups] == ["vae"]
    batch = next(iter(trainer.dataset.epoch_batches(0)))
    assert batch.pixels is not None and batch.latents is None  # latent caching is on, yet the step gets the images
    with torch.no_grad():
        before = float(trainer.diffusion.loss(batch))
    assert trainer.train() == "done"
    with torch.no_grad():
        after = float(trainer.diffusion.loss(batch))
    assert after < 0.8 * before, (before, after)

    base = StableDiffusionPipeline.from_pretrained(str(tiny.diffusers_dir), safety_checker=None)
    out = tmp_path / "out"
    if fmt == "DIFFUSERS":
        pipe = StableDiffusionPipeline.from_pretrained(str(out / "model"), safety_checker=None)
    else:
        pipe = StableDiffusionPipeline.from_single_file(str(out / "model.safetensors"), config=str(tiny.diffusers_dir),
                                                        local_files_only=True, safety_checker=None)
    assert _same(pipe.unet, base.unet) == [] and _same(pipe.text_encoder, base.text_encoder) == []
    changed = _same(pipe.vae, base.vae)
    assert changed and all(k.startswith("decoder.") for k in changed), changed
    assert _same(pipe.vae.decoder, trainer.model.vae.decoder) == []  # the trained decoder, as trained


def test_a_resumed_run_trains_as_an_uninterrupted_one_and_validation_and_samples_run(tiny, shapes, tmp_path):
    """A run backed up after its first epoch and continued from that backup ends with the decoder
    of the run that went on; the validation loss is the reconstruction loss on the held-out
    pixels; the end of the run samples with the trained VAE."""
    from diffusers import StableDiffusionPipeline
    from PIL import Image

    from ot_gradio.training.vae_method import VaeReconstructionStep, reconstruct

    image = sorted(shapes.glob("*.png"))[0]
    samples = [{"prompt": str(image), "height": 96, "width": 64}, {"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2}]
    concepts = [{"name": "c", "path": str(shapes)}, {"name": "held", "path": str(shapes), "type": "VALIDATION"}]
    whole = _trainer(_config(tiny, shapes, tmp_path / "a", epochs=2, samples=samples, concepts=concepts, sample_image_format="PNG", validation=True,
                             validate_after=1, validate_after_unit="EPOCH", backup_after=1, backup_after_unit="EPOCH",
                             backup_before_save=False), tmp_path / "a")
    whole.setup()
    before = whole.validator.loss()
    assert whole.train() == "done"
    # the end of the run samples: an image's path gives it through the trained VAE (OneTrainer's VAE sampler), a prompt the pipeline's
    made = sorted((tmp_path / "a" / "s").rglob("*.png"))
    assert len(made) == 2 and Image.open(made[0]).size == (64, 96) and Image.open(made[1]).size == (64, 64)
    assert np.array_equal(np.asarray(Image.open(made[0])), np.asarray(reconstruct(whole.model.vae, image, 64, 96)))
    base = StableDiffusionPipeline.from_pretrained(str(tiny.diffusers_dir), safety_checker=None).vae
    assert not np.array_equal(np.asarray(Image.open(made[0])), np.asarray(reconstruct(base, image, 64, 96)))
    assert isinstance(whole.validator.step, VaeReconstructionStep) and whole.validator.loss() < before
    state = whole.method.trainable_state(whole.model)
    assert state and all(k.startswith("vae.decoder.") for k in state)

    resumed = _trainer(_config(tiny, shapes, tmp_path / "b", epochs=2, continue_last_backup=True,  # the same training: its output
                               output_model_destination=str(tmp_path / "a" / "out" / "model.safetensors")), tmp_path / "b",
                       other_runs=(tmp_path / "a",))
    resumed.setup()
    assert resumed.counters.epoch == 1 and _same(resumed.model.vae.decoder, whole.model.vae.decoder)
    assert resumed.train() == "done"
    assert _same(resumed.model.vae.decoder, whole.model.vae.decoder) == []
    with pytest.raises(ValueError, match="continue_last_backup"):
        resumed.method.load_trainable_state(resumed.model, {"unet.conv_in.weight": torch.zeros(1)})


def test_only_the_vae_stays_on_the_device(tiny, shapes, tmp_path, monkeypatch, capsys):
    """As OneTrainer keeps only the VAE on the train device: UNet and text encoder wait in RAM
    (placement.py; here `HOST` is the meta device and moves are recorded, not made); the UNet comes
    for samples. With latent caching off too, since the step never runs them. The memory planner,
    which measures denoiser steps, neither probes nor estimates such a run."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training import placement
    from ot_gradio.training.memory_plan import estimate

    monkeypatch.setattr(placement, "HOST", torch.device("meta"))
    monkeypatch.setattr(placement, "move", lambda module, device: None)
    for caching in (True, False):
        trainer = _trainer(_config(tiny, shapes, tmp_path, latent_caching=caching), tmp_path)
        trainer.setup()
        assert trainer.placement.parked == ["unet", "text_encoder"] and trainer.placement.for_samples() == ["unet"]
        assert "gradient checkpointing: none (the training step runs no denoiser)" in capsys.readouterr().out
    assert estimate(load_config(_config(tiny, shapes, tmp_path)).config)["summary"].startswith("not estimated (FINE_TUNE_VAE")


def test_masked_training_weights_the_images_pixels(tiny, shapes, tmp_path):
    """With masked training the loss counts each image pixel by its mask (black = unmasked_weight),
    at the image's own resolution: here only the right half counts."""
    from ot_gradio.config.enums import LossScaler
    from ot_gradio.training.vae_method import VaeReconstructionStep

    trainer = _trainer(_config(tiny, shapes, tmp_path, masked_training=True, unmasked_weight=0.0, unmasked_probability=0.0), tmp_path)
    trainer.setup()
    batch = next(iter(trainer.dataset.epoch_batches(0)))
    step = VaeReconstructionStep(trainer.model, trainer.config, trainer.device, trainer.precision)
    with torch.no_grad():
        vae = trainer.model.vae
        error = (vae.decode(vae.encode(batch.pixels).latent_dist.mean).sample - batch.pixels) ** 2
        batch.mask = torch.ones_like(batch.pixels[:, :1])
        assert torch.allclose(step.loss(batch), error.mean())
        batch.mask[..., : batch.mask.shape[-1] // 2] = 0
        assert torch.allclose(step.loss(batch), (error * batch.mask).mean())
        tripled = trainer.config.model_copy(update={"loss_scaler": LossScaler.GRADIENT_ACCUMULATION, "gradient_accumulation_steps": 3})
        scaled = VaeReconstructionStep(trainer.model, tripled, trainer.device, trainer.precision)
        assert torch.allclose(scaled.loss(batch), 3 * step.loss(batch))  # loss_scaler: OneTrainer scales the VAE's loss too


def test_a_family_without_it_is_refused_at_the_start():
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config

    config = load_config({"model_type": "FLUX_DEV_1", "training_method": "FINE_TUNE_VAE"}).config
    lines = [e for e in errors(config) if e.startswith("training_method")]
    assert lines == ["training_method: FINE_TUNE_VAE is not available for model type FLUX_DEV_1; choose LORA, FINE_TUNE, EMBEDDING"]
    for model_type in ("STABLE_DIFFUSION_15", "STABLE_DIFFUSION_20_INPAINTING", "STABLE_DIFFUSION_21_BASE"):
        config = load_config({"model_type": model_type, "training_method": "FINE_TUNE_VAE"}).config
        assert not [e for e in errors(config) if e.startswith("training_method")]
    # it saves the whole model, as FINE_TUNE: a LoRA format is refused before the model loads
    config = load_config({"training_method": "FINE_TUNE_VAE", "output_model_format": "KOHYA_LORA"}).config
    assert [e for e in errors(config) if e.startswith("output_model_format: a fine-tune is a whole model")]
