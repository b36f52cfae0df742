"""The trainer's helpers (samples.py, resume.py) work from a RunState alone: no trainer, none of its
private attributes, and what a resume changes comes back instead of being set on the trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from ot_gradio.config.io import config_to_dict
from ot_gradio.config.parts import SampleConfig
from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.backup import Counters, write_backup
from ot_gradio.training.device import Precision
from ot_gradio.training.distributed import Distributed
from ot_gradio.training.ema import EMA
from ot_gradio.training.method_base import Method
from ot_gradio.training.resume import resume_from_latest_backup
from ot_gradio.training.run_state import Reporter, RunPaths, RunState
from ot_gradio.training.samples import sample_during_training


class Events(Reporter):
    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def status(self, status, message=""):
        self.events.append(("status", status))

    def warning(self, message):
        self.events.append(("warning", message))

    def sample(self, **fields):
        self.events.append(("sample", fields))


class Model:
    """Samples an image and notes the weight it was drawn with."""

    def __init__(self, weight: torch.nn.Parameter):
        self.weight, self.seen = weight, []

    def sample(self, **kwargs):
        self.seen.append(float(self.weight.detach()))
        return Image.new("RGB", (kwargs["width"], kwargs["height"]))


class Board:
    def __init__(self):
        self.images = []

    def add_image(self, tag, image, step, dataformats):
        self.images.append((tag, step))


class Weights(Method):
    def __init__(self):
        self.loaded = None

    def load_trainable_state(self, model, state):
        self.loaded = dict(state)


def _run(tmp_path: Path, config: TrainConfig, weight: torch.nn.Parameter, ema: EMA | None, **fields) -> RunState:
    paths = RunPaths(tmp_path / "samples", tmp_path / "backup", tmp_path / "save", None, [tmp_path])
    return RunState(config, paths, Events(), Distributed(), torch.device("cpu"),
                    Precision(config.train_dtype, torch.device("cpu"), False), Model(weight), Weights(),
                    [weight], Counters(epoch=1, epoch_step=0, global_step=7), ema, **fields)


def test_samples_with_ema_and_live_weights_from_the_run_state(tmp_path):
    weight = torch.nn.Parameter(torch.tensor([1.0]))
    ema = EMA([weight], 0.9)
    ema.weights[0].fill_(5.0)
    config = TrainConfig(samples=[SampleConfig(prompt="a cat", width=64, height=64)], non_ema_sampling=True)
    run = _run(tmp_path, config, weight, ema, optimizer=torch.optim.SGD([weight], lr=0.1), tensorboard=Board())
    sample_during_training(run)
    assert run.model.seen == [5.0, 1.0]  # the average, then the live weights
    assert float(weight.detach()) == 1.0
    names = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert names == ["step000007-epoch1-0-no-ema.jpg", "step000007-epoch1-0.jpg"]
    samples = [fields for kind, fields in run.report.events if kind == "sample"]
    assert [(s["ema"], s["step"], s["epoch"]) for s in samples] == [(True, 7, 1), (False, 7, 1)]
    assert run.tensorboard.images == [("sample/0", 7), ("sample/0-no-ema", 7)]


class Clips(Model):
    def sample(self, **kwargs):
        return [super().sample(**kwargs)] * 2  # a video family's sample: its frames


@pytest.mark.parametrize(("model", "to_tensorboard", "tags"), [(Model, True, ["sample/0", "sample/1"]), (Model, False, []), (Clips, True, [])])
def test_samples_to_tensorboard_writes_image_samples_to_the_event_file(tmp_path, model, to_tensorboard, tags):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    prompts = [SampleConfig(prompt=p, width=96, height=64) for p in ("a cat", "a dog")]
    writer = SummaryWriter(str(tmp_path / "tb"))
    weight = torch.nn.Parameter(torch.tensor([1.0]))
    run = _run(tmp_path, TrainConfig(samples=prompts, samples_to_tensorboard=to_tensorboard), weight, None, tensorboard=writer)
    run.model = model(weight)
    sample_during_training(run)
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    events.Reload()
    assert sorted(events.Tags()["images"]) == tags
    for tag in tags:
        (image,) = events.Images(tag)
        assert (image.step, image.width, image.height) == (7, 96, 64)
    assert len([kind for kind, _ in run.report.events if kind == "sample"]) == 2  # the files and events either way


@pytest.mark.parametrize(("video_format", "suffix"), [("PNG_IMAGE_SEQUENCE", "png"), ("JPG_IMAGE_SEQUENCE", "jpg")])
def test_a_clip_sample_as_an_image_sequence(tmp_path, video_format, suffix):
    """sample_video_format: a video sample becomes a folder of its frames; the event names the first."""
    from PIL import Image as PILImage

    weight = torch.nn.Parameter(torch.tensor([1.0]))
    config = TrainConfig(samples=[SampleConfig(prompt="a cat", width=96, height=64)], sample_video_format=video_format)
    run = _run(tmp_path, config, weight, None)
    run.model = Clips(weight)
    sample_during_training(run)
    assert [p.name for p in (tmp_path / "samples").iterdir()] == ["step000007-epoch1-0"]  # no temp folder
    folder = tmp_path / "samples" / "step000007-epoch1-0"
    assert sorted(p.name for p in folder.iterdir()) == [f"0000.{suffix}", f"0001.{suffix}"]
    with PILImage.open(folder / f"0001.{suffix}") as frame:
        assert (frame.format, frame.size) == ("PNG" if suffix == "png" else "JPEG", (96, 64))
    (event,) = [fields for kind, fields in run.report.events if kind == "sample"]
    assert event["path"] == str(folder / f"0000.{suffix}")
    sample_during_training(run)  # the same step again (a resumed run) replaces the folder
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["step000007-epoch1-0"]


def test_resume_returns_the_counters_and_a_fresh_ema(tmp_path):
    """A backup made without EMA, continued with EMA on: the run gets the backup's counters and an
    EMA of the backup's weights; the state it was given is left as it was."""
    config = TrainConfig()
    weight = torch.nn.Parameter(torch.tensor([2.0]))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    write_backup(tmp_path / "backup", {"unet.w": torch.tensor([3.0])}, state, config_to_dict(config), Counters(2, 1, 9))
    old_ema = EMA([weight], 0.9)
    run = _run(tmp_path, config, weight, old_ema, optimizer=optimizer, scheduler=scheduler)
    resumed = resume_from_latest_backup(run)
    assert resumed is not None and resumed.counters.as_dict() == {"epoch": 2, "epoch_step": 1, "global_step": 9}
    assert resumed.ema is not old_ema and run.ema is old_ema
    assert run.counters.global_step == 7
    assert torch.equal(run.method.loaded["unet.w"], torch.tensor([3.0]))
    assert any(kind == "warning" and "no EMA weights" in str(message) for kind, message in run.report.events)

