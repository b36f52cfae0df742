"""Worker side of the run boundary: `python -m ot_gradio.runner.worker <run dir>`.

Reads config.json, trains, and reports through events.jsonl; reads requests from control/
between steps. Exit code 0 for done or stopped, 1 for an error (the last event says why).
With multi-GPU on, this process first becomes the launcher of one process per GPU (launch.py);
of those, only rank 0 reports everything, the others only their own errors (`RankReporter`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..fsutil import as_disk_full
from .rundir import EventWriter, RunDir, list_runs


class EventReporter:
    """Sends the trainer's news to events.jsonl, and optionally to a console callback."""

    def __init__(self, run: RunDir, echo: Callable[[dict[str, Any]], None] | None = None):
        self.run = run
        self.writer = EventWriter(run)
        self.echo = echo
        self.extra_requests: set[str] = set()
        self._lock = threading.Lock()  # news also comes from helper threads (a download's progress)

    def _emit(self, type: str, **fields: Any) -> None:
        with self._lock:
            event = self.writer.emit(type, **fields)
            if self.echo is not None:
                self.echo(event)

    def status(self, status: str, message: str = "", **extra: Any) -> None:
        self._emit("status", status=status, message=message, **extra)

    def warning(self, message: str) -> None:
        self._emit("warning", message=message)

    def progress(self, **fields: Any) -> None:
        self._emit("progress", **fields)

    def metrics(self, **fields: Any) -> None:
        self._emit("metrics", **fields)

    def sample(self, **fields: Any) -> None:
        self._emit("sample", **fields)

    def validation(self, **fields: Any) -> None:
        self._emit("validation", **fields)

    def saved(self, path: str, kind: str = "model") -> None:
        self._emit("saved", path=path, kind=kind)

    def backup(self, path: str) -> None:
        self._emit("backup", path=path)

    def requests(self) -> set[str]:
        asked = self.run.take_requests() | self.extra_requests
        self.extra_requests = set()
        return asked


class RankReporter(EventReporter):
    """A process other than rank 0 of a multi-GPU run: rank 0 tells the page everything the ranks
    share (progress, samples, saves); this one writes only its own errors (marked with its rank)
    and reads no requests (rank 0 reads them and passes them on)."""

    def __init__(self, run: RunDir, rank: int):
        super().__init__(run)
        self.rank = rank

    def _emit(self, type: str, **fields: Any) -> None:
        if type == "status" and fields.get("status") == "error":
            self.writer.emit(type, **{**fields, "message": f"process {self.rank}: {fields.get('message', '')}"})

    def requests(self) -> set[str]:
        return set()


def _is_stderr(path: Path) -> bool:
    """Whether this process's stderr already goes to `path` (a worker the page started)."""
    try:
        mine, theirs = os.fstat(sys.stderr.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


class RunLog:
    """The run's log.txt. A worker the page started has its stdout and stderr there already; a run
    of `train` in a terminal gets one too, holding its news as lines and any traceback. Expected
    errors (the config, data, disk, model) put their traceback only here; the terminal and the
    page show their one-line message."""

    NEWS = ("status", "warning", "saved", "backup", "sample")

    def __init__(self, run: RunDir):
        self.file = None if _is_stderr(run.log) else open(run.log, "a", encoding="utf-8", errors="replace")  # noqa: SIM115

    def event(self, event: dict[str, Any]) -> None:
        if self.file is None or event.get("type") not in self.NEWS:
            return
        details = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("type", "time", "seq"))
        self.write(f"{time.strftime('%H:%M:%S')} [{event['type']}] {details}\n")

    def write(self, text: str) -> None:
        try:
            if self.file is not None:
                self.file.write(text)
                self.file.flush()
            else:
                sys.stderr.write(text)
                sys.stderr.flush()
        except OSError:
            pass  # a full disk must not hide the error being reported

    def traceback(self, bug: bool) -> None:
        """The current exception's traceback into the log; a bug's also onto stderr."""
        text = traceback.format_exc()
        self.write(text)
        if bug and self.file is not None:
            traceback.print_exc()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def final_error(reporter: EventReporter, log: RunLog, message: str) -> None:
    """The run's last status. If even that cannot be written (the disk filled again), the message
    goes to the log and the page shows the run as crashed with it."""
    try:
        reporter.status("error", message)
    except OSError:
        log.write(f"error: {message}\n")


def process_rank() -> int:
    """This process's rank in a multi-GPU run (0 when it is the only one)."""
    from ..config.devices import in_rank_process  # noqa: PLC0415

    return int(os.environ.get("RANK", "0")) if in_rank_process() else 0


def run_worker(run_path: str | Path, echo: Callable[[dict[str, Any]], None] | None = None, noise_fn=None) -> int:
    """Train the run in this process. Returns the exit code."""
    from .deferred_imports import defer_optional_imports  # noqa: PLC0415

    defer_optional_imports()  # bitsandbytes and onnxruntime only if the run uses them (0.7-0.9 s)
    run = RunDir(Path(run_path)).make()
    rank = process_rank()
    log = RunLog(run)

    def news(event: dict[str, Any]) -> None:
        log.event(event)
        if echo is not None:
            echo(event)

    reporter = EventReporter(run, news) if rank == 0 else RankReporter(run, rank)
    code = 1
    try:
        code = _train(run, reporter, noise_fn, log)
    except KeyboardInterrupt:
        final_error(reporter, log, "interrupted before a backup could be written")
        code = 130
    except OSError as err:  # a write before training began (the first events)
        full = as_disk_full(err, run.path, what="the run's files in")
        log.traceback(bug=full is None)
        final_error(reporter, log, str(full or err))
    finally:
        if rank == 0 or code != 0:
            try:
                run.exit_file.write_text(str(code))
            except OSError:
                pass
        reporter.writer.close()
        log.close()
    return code


def quiet_libraries() -> None:
    """Keep library chatter (loading bars, advice to install torchvision, which the README says
    never to, or bitsandbytes' optional CPU `kernels` package) out of the log and the terminal;
    hub download bars stay, users want those."""
    import logging  # noqa: PLC0415

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import diffusers.utils.logging as dlog  # noqa: PLC0415
        import transformers.utils.logging as tlog  # noqa: PLC0415

        dlog.set_verbosity_error()
        dlog.disable_progress_bar()
        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
    except ImportError:
        pass


def _train(run: RunDir, reporter: EventReporter, noise_fn, log: RunLog) -> int:
    from ..config.enums import TrainingMethod  # noqa: PLC0415
    from ..config.io import ConfigError, load_config  # noqa: PLC0415
    from .deferred_imports import keep_peft_from_bitsandbytes, needs_bnb_layers  # noqa: PLC0415

    reporter.status("loading", "reading the config")
    try:
        loaded = load_config(run.config)
    except ConfigError as err:
        reporter.status("error", f"config: {err}")
        return 1
    for warning in loaded.warnings:
        reporter.warning(warning)
    config = loaded.config

    quiet_libraries()
    if config.training_method == TrainingMethod.LORA and not needs_bnb_layers(config):
        keep_peft_from_bitsandbytes()  # 0.7-0.9 s of start-up, for layers this run does not have
    from ..data.errors import DataError  # noqa: PLC0415
    from ..models.common import ModelLoadError  # noqa: PLC0415
    from ..training.trainer import RunPaths, Trainer, TrainingError  # noqa: PLC0415
    from . import collection  # noqa: PLC0415

    collection.resume()  # the libraries are imported: freeze them, collect as usual (collection.py)

    workspace = run.path.parent.parent
    from ..secrets import apply_secrets  # noqa: PLC0415

    apply_secrets(config, workspace)  # the token never travels in the run's config.json
    paths = RunPaths(
        samples=run.samples,
        backup=run.backup,
        save=run.save,
        tensorboard=run.tensorboard,
        other_runs=[r.path for r in list_runs(workspace)],
        run=run.path,
    )
    trainer = Trainer(config, paths, reporter, noise_fn=noise_fn)
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):  # first Ctrl-C: stop cleanly; second: abort
        if trainer.stop_requested or trainer.stop_asked:
            raise KeyboardInterrupt
        reporter.warning("stop requested (Ctrl-C): finishing the step, writing a backup and the model; Ctrl-C again aborts")
        trainer.request_stop()  # at the optimizer step's end, as the page's Stop

    if sys.platform != "win32":
        try:
            signal.signal(signal.SIGINT, on_interrupt)
        except ValueError:  # not the main thread
            pass
    try:
        trainer.setup()
        collection.settle()  # setup's cycles freed, the model and dataset frozen
        status = trainer.train()
        return 0 if status in ("done", "stopped") else 1
    except Exception as err:  # noqa: BLE001  the page must learn about any crash
        # a full disk, whichever write met it (an event, TensorBoard, a sample, the log), ends the
        # run with the same one-line "disk full" status
        full = as_disk_full(err, run.path, what="the run's files in")
        expected = full is not None or isinstance(err, (TrainingError, DataError, ModelLoadError, ValueError, OSError))
        log.traceback(bug=not expected)  # expected: the message says what to fix; the traceback is in log.txt
        final_error(reporter, log, str(full or err) if expected else f"{type(err).__name__}: {err} (see log.txt)")
        return 1
    finally:
        try:
            signal.signal(signal.SIGINT, previous)
        except (ValueError, TypeError):
            pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ot_gradio.runner.worker RUN_DIR", file=sys.stderr)
        return 2
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from ..config.devices import in_rank_process  # noqa: PLC0415

    if in_rank_process():  # one of the processes torch.distributed.run started for this run
        from .launch import die_with_launcher  # noqa: PLC0415

        die_with_launcher()
    else:
        code = _launch(RunDir(Path(argv[0])))
        if code is not None:
            return code
    return run_worker(argv[0])


def _launch(run: RunDir) -> int | None:
    """With multi_gpu on, replace this process with the processes the config asks for (never
    returns), or return an exit code when it cannot; None: train here, in one process."""
    import json  # noqa: PLC0415

    from .launch import become_distributed, cuda_device_count, launch_plan  # noqa: PLC0415

    try:
        config = json.loads(run.config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # run_worker reports the unreadable config
    if not isinstance(config, dict) or not config.get("multi_gpu"):
        return None
    device = str(config.get("train_device") or "cuda").strip().lower()
    writer = EventWriter(run.make())
    try:
        plan = launch_plan(config, cuda_device_count() if device.startswith("cuda") else 0)
    except ValueError as err:
        writer.status("error", str(err))
        writer.close()
        run.exit_file.write_text("1")
        return 1
    if plan.warning:
        writer.emit("warning", message=plan.warning)
    if plan.processes == 1:
        writer.close()
        return None
    writer.status("loading", f"starting {plan.description}")
    writer.close()
    become_distributed(run.path, plan)
    return None  # not reached


if __name__ == "__main__":
    from . import collection
    from .process_exit import exit_now

    collection.pause()  # the process is the run: no full collections during the imports (collection.py)
    exit_now(main())  # no module teardown: 1.5 s, after every file is closed
