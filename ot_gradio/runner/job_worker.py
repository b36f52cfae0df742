"""Worker side of tool jobs: `python -m ot_gradio.runner.job_worker <job dir>`.

Runs the job named in params.json and reports through events.jsonl. Exit code 0 for done or
cancelled, 1 for an error (the last status event says why)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from ..fsutil import as_disk_full
from ..tools.jobs import Job, JobCancelled, JobError, job_function
from .jobs import JobDir
from .rundir import EventWriter


def run_job_dir(path: str | Path) -> int:
    job_dir = JobDir(Path(path)).make()
    writer = EventWriter(job_dir)
    code = 1
    try:
        spec = json.loads(job_dir.params.read_text(encoding="utf-8"))
        name = spec["name"]
        writer.status("running", f"{name} started", name=name)
        job = Job(
            on_progress=lambda done, total, message, per=1: writer.emit("progress", done=done, total=total, message=message,
                                                                        **({"per": per} if per != 1 else {})),
            on_log=lambda message: writer.emit("log", message=message),
            is_cancelled=job_dir.cancel_requested,
        )
        try:
            result = job_function(name)(spec.get("params") or {}, job)
        except JobCancelled:
            result = None
        if job.cancelled():
            if result is not None:
                writer.emit("result", result=result)
            writer.status("cancelled", "cancelled; what was finished is kept")
        else:
            writer.emit("result", result=result)
            writer.status("done", str((result or {}).get("message", "done")))
        code = 0
    except JobError as err:
        writer.status("error", str(err))
    except Exception as err:  # noqa: BLE001 - shown to the user with the traceback in the log
        traceback.print_exc()
        full = as_disk_full(err, job_dir.path, what="the tool's files in")
        try:
            writer.status("error", str(full) if full else f"{type(err).__name__}: {err} (traceback in {job_dir.log})")
        except OSError:
            print(f"error: {full or err}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            job_dir.exit_file.write_text(str(code))
        except OSError:
            pass
        writer.close()
    return code


if __name__ == "__main__":
    from .deferred_imports import defer_optional_imports
    from .process_exit import exit_now

    defer_optional_imports()  # a job that needs bitsandbytes or onnxruntime (WD14) imports it itself

    exit_now(run_job_dir(sys.argv[1]))  # no module teardown: 1.5 s, after every file is closed
