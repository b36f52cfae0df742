"""Run options of OneTrainer's that act on the trainer's setup and the run's end, on the tiny SD 1.5
(4 images, CPU): `learning_rate_scaler` scales every optimizer group's learning rate by the square
root of its factor; `only_cache` fills the latent and text caches and ends the run as done, with
no optimizer step and no model written."""

from __future__ import annotations

from pathlib import Path

import pytest

from ot_gradio.config.doctor import errors
from ot_gradio.config.enums import LearningRateScaler, LossScaler
from ot_gradio.config.io import load_config
from ot_gradio.training.preflight import TrainingError
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model.diffusers_dir


@pytest.fixture(scope="module")
def shapes(four_shapes):
    return four_shapes


class Events(Reporter):
    def __init__(self):
        self.statuses, self.losses, self.saved_paths = [], [], []

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def metrics(self, **fields):
        self.losses.append(fields["loss"])

    def saved(self, path, kind="model"):
        self.saved_paths.append(path)


def _trainer(tiny: Path, data: Path, work: Path, **overrides) -> tuple[Trainer, Events]:
    config = {
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(work / "ws"),
        "cache_dir": str(work / "cache"), "output_model_destination": str(work / "out" / "lora.safetensors"),
        "concepts": [{"name": "c", "path": str(data)}], "resolution": "64", "batch_size": 2, "epochs": 1,
        "learning_rate": 1e-3, "learning_rate_warmup_steps": 0, "lora_rank": 2, "lora_alpha": 2,
        "text_encoder": {"train": True, "learning_rate": 4e-4}, "unet": {"train": True, "gradient_checkpointing": False},
        "samples": [], "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
        **overrides,
    }
    events = Events()
    return Trainer(load_config(config).config, RunPaths(work / "s", work / "b", work / "o", None, []), events), events


def test_scale_factors_are_onetrainers():
    factors = {s.value: s.scale(batch_size=2, accumulation_steps=3, processes=4) for s in LearningRateScaler}
    assert factors == {"NONE": 1, "BATCH": 2, "GLOBAL_BATCH": 8, "GRADIENT_ACCUMULATION": 3, "BOTH": 6, "GLOBAL_BOTH": 24}
    assert {s.value: s.scale(2, 3, 4) for s in LossScaler} == factors


@pytest.mark.parametrize(("scaler", "factor"), [("NONE", 1), ("BOTH", 6)])
def test_learning_rate_scaler_scales_every_optimizer_group(tiny, shapes, tmp_path, scaler, factor):
    trainer, _ = _trainer(tiny, shapes, tmp_path, learning_rate_scaler=scaler, gradient_accumulation_steps=3)
    trainer.setup()
    lrs = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert lrs == pytest.approx({"text_encoder": 4e-4 * factor**0.5, "unet": 1e-3 * factor**0.5}, rel=1e-9)
    assert trainer.scheduler.get_last_lr() == pytest.approx(list(lrs.values()), rel=1e-9)  # the schedule starts from them


def test_only_cache_fills_the_caches_and_ends_without_training(tiny, shapes, tmp_path):
    trainer, events = _trainer(tiny, shapes, tmp_path, only_cache=True, text_encoder={"train": False})
    trainer.setup()
    assert trainer.train() == "done"
    assert events.statuses[-1][0] == "done" and "only_cache: cache filled" in events.statuses[-1][1]
    assert "4 latent(s) encoded" in events.statuses[-1][1] and "caption(s) encoded" in events.statuses[-1][1]
    assert "training" not in [s for s, _ in events.statuses]
    assert trainer.optimizer is None and events.losses == [] and events.saved_paths == []
    assert list((tmp_path / "out").iterdir()) == []  # (the folder is made when the run checks it can write there)
    assert len(list((tmp_path / "cache" / "latents").rglob("*.safetensors"))) >= 4
    assert any((tmp_path / "cache" / "text").rglob("*.safetensors"))


def test_only_cache_without_latent_caching_is_refused(tiny, shapes, tmp_path):
    trainer, _ = _trainer(tiny, shapes, tmp_path, only_cache=True, latent_caching=False)
    problem = "only_cache: latent_caching is off, so there is nothing to cache; turn latent_caching on or only_cache off"
    assert problem in errors(trainer.config)
    with pytest.raises(TrainingError, match="^only_cache: latent_caching is off"):
        trainer.setup()
    vae, _ = _trainer(tiny, shapes, tmp_path, only_cache=True, training_method="FINE_TUNE_VAE", output_model_format="DIFFUSERS")
    assert any(e.startswith("only_cache: FINE_TUNE_VAE") for e in errors(vae.config))
