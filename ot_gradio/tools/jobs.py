"""Heavy tools as jobs: the registry and the handle a tool function gets.

A job function has the signature ``run(params: dict, job: Job) -> dict``: it reports with
``job.progress(done, total, message)`` and ``job.log(message)``, checks ``job.cancelled()``
between items (and returns early with what it did so far), and returns a JSON-able result.
Raise ``JobError`` with a message for the user (a missing model, a bad folder); anything else
is reported as a crash with its traceback in the job's log.

The same function runs in a worker process for the page (`runner/jobs.py`) and inline for the
command line and the tests (`run_inline`). This module is pure Python: the page imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# name -> "module:function", imported only in the process that runs the job
JOBS: dict[str, str] = {
    "autocaption": "ot_gradio.tools.autocaption:run_job",
    "automask": "ot_gradio.tools.automask:run_job",
    "convert": "ot_gradio.tools.convert:run_job",
    "sample": "ot_gradio.tools.sample:run_job",
    "report": "ot_gradio.tools.report:run_job",
    "video": "ot_gradio.tools.video_extract:run_job",
    "video-download": "ot_gradio.tools.video_download:run_job",
}


class JobError(Exception):
    """A problem the user can fix; its message is shown as is."""


class JobCancelled(Exception):
    """Raised by `Job.check()` when the user pressed Cancel."""


class Job:
    """What a job function sees. The base class runs inline (prints nothing, never cancelled)."""

    def __init__(self, on_progress: Callable[[int, int, str], None] | None = None,
                 on_log: Callable[[str], None] | None = None, is_cancelled: Callable[[], bool] | None = None):
        self._on_progress = on_progress
        self._on_log = on_log
        self._is_cancelled = is_cancelled
        self.messages: list[str] = []

    def progress(self, done: int, total: int, message: str = "", per: int = 1) -> None:
        """`done` of `total` units; `per` units make one thing counted (a download counts its links
        in thousandths of one, so a link's bytes move the bar: shown as '1.5/2')."""
        if self._on_progress is not None:
            self._on_progress(int(done), int(total), message, **({"per": int(per)} if per != 1 else {}))

    def log(self, message: str) -> None:
        self.messages.append(message)
        if self._on_log is not None:
            self._on_log(message)

    def cancelled(self) -> bool:
        return bool(self._is_cancelled and self._is_cancelled())

    def check(self) -> None:
        if self.cancelled():
            raise JobCancelled()


def job_function(name: str) -> Callable[[dict[str, Any], Job], dict[str, Any]]:
    if name not in JOBS:
        raise JobError(f"unknown job '{name}': use one of {', '.join(sorted(JOBS))}")
    module, _, attr = JOBS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def run_inline(name: str, params: dict[str, Any], job: Job | None = None) -> dict[str, Any]:
    """Run a job in this process (command line, tests)."""
    return job_function(name)(params, job or Job())


def run_in_console(name: str, params: dict[str, Any], unit: str = "item") -> dict[str, Any] | None:
    """Run a job inline for the command line, with a progress bar on stderr; returns the result,
    or None after printing `error: <message>` for a JobError (the command then exits 2)."""
    import sys  # noqa: PLC0415

    from tqdm import tqdm  # noqa: PLC0415

    bar = tqdm(unit=unit, dynamic_ncols=True, file=sys.stderr)

    def on_progress(done: int, total: int, message: str, per: int = 1) -> None:
        bar.total, bar.n = total / per, round(done / per, 3)
        bar.set_description(message[:40])
        bar.refresh()

    try:
        return run_inline(name, params, Job(on_progress=on_progress, on_log=lambda m: bar.write(m, file=sys.stderr)))
    except (JobError, JobCancelled) as err:
        bar.close()
        bar = None
        print(f"error: {err}", file=sys.stderr)
        return None
    finally:
        if bar is not None:
            bar.close()
