"""What the trainer hands to its helpers (samples.py, resume.py, validation.py): the run as they
need it, typed, instead of the trainer itself. They read these fields and never the trainer's
own; what they change (the counters and the EMA after a resume) they return, and the trainer keeps.

`Reporter` (where the news goes) and `RunPaths` (where the files go) live here too, since both the
trainer and its helpers use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ..config.schema import TrainConfig
    from ..models.base import ModelFamily
    from .backup import Counters
    from .device import Precision
    from .distributed import Distributed
    from .ema import EMA
    from .method_base import Method


class Reporter:
    """Where the trainer's news goes. The worker sends it to events.jsonl; tests collect it."""

    def status(self, status: str, message: str = "") -> None: ...
    def warning(self, message: str) -> None: ...
    def progress(self, **fields: Any) -> None: ...
    def metrics(self, **fields: Any) -> None: ...
    def sample(self, **fields: Any) -> None: ...
    def saved(self, path: str, kind: str = "model") -> None: ...
    def backup(self, path: str) -> None: ...
    def validation(self, **fields: Any) -> None: ...
    def requests(self) -> set[str]:
        return set()


@dataclass
class RunPaths:
    samples: Path
    backup: Path
    save: Path
    tensorboard: Path | None
    other_runs: list[Path]  # earlier runs of the same workspace, for "continue from last backup"
    run: Path | None = None  # the run's folder (a relative debug_dir is in it); None: the samples folder's parent


@dataclass
class RunState:
    """The run at the moment a helper is called (the trainer makes a fresh one for each call)."""

    config: TrainConfig
    paths: RunPaths
    report: Reporter
    dist: Distributed
    device: torch.device
    precision: Precision
    model: ModelFamily
    method: Method
    trained_params: list[torch.nn.Parameter]
    counters: Counters
    ema: EMA | None
    optimizer: Any = None  # None while validation is set up: the optimizer is made after it
    scheduler: Any = None
    tensorboard: Any = None  # the SummaryWriter when `tensorboard` is on (main process)
    text_cache: Any = None  # the text encoder outputs cached by caption, when on (data/text_cache.py)
    steps_in_epoch: Any = None  # the dataset's steps_in_epoch(epoch), an epoch's batches, once the dataset is built
