"""How a run's training processes are started: one worker, or one per GPU with multi-GPU on.

The supervisor (and the CLI) always start `python -m ot_gradio.runner.worker <run dir>`. When the
config asks for several processes, that worker becomes the launcher: it writes what it starts to
events.jsonl and replaces itself (exec, so the pid the supervisor tracks stays the same) with
`python -m torch.distributed.run --standalone --nproc-per-node N -m ot_gradio.runner.worker <run>`,
which is what `accelerate launch --multi_gpu` runs. torch.distributed.run restarts nothing
(`--max-restarts 0`): if one process fails it stops the others and exits non-zero, and the page
shows the error the failing process wrote, or "crashed".

Process count (`launch_plan`): multi_gpu off -> 1. On cuda: one process per index of
`device_indexes` (blank = every visible GPU); CUDA_VISIBLE_DEVICES lists the chosen GPUs and
process k trains on the k-th of them. On cpu (for tests and for trying it out) one process per
listed index. Fewer than two processes: one process on train_device, with a warning.

Every child process of the app and the CLI (the worker, a tool job, TensorBoard, the memory
estimate) is started here (`start_child`, `run_child`), with `child_env`: nothing else in the
package starts one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..config.devices import DISTRIBUTED_ENV, parse_device_indexes


@dataclass
class LaunchPlan:
    processes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    warning: str | None = None
    description: str = ""


def launch_plan(config: dict[str, Any], cuda_count: int) -> LaunchPlan:
    """How many processes the config asks for on this machine. Raises ValueError naming the field."""
    if not config.get("multi_gpu"):
        return LaunchPlan()
    indexes = parse_device_indexes(str(config.get("device_indexes") or ""))
    device = str(config.get("train_device") or "cuda").strip().lower()
    if device.startswith("cuda"):
        if cuda_count == 0:
            return LaunchPlan(warning="multi_gpu: this machine has no CUDA GPU; training in one process")
        missing = [i for i in indexes if i >= cuda_count]
        if missing:
            raise ValueError(
                f"device_indexes: GPU {missing[0]} does not exist; this machine has {cuda_count} GPU(s), "
                f"numbered 0 to {cuda_count - 1}"
            )
        chosen = indexes or list(range(cuda_count))
        if len(chosen) < 2:
            return LaunchPlan(warning=f"multi_gpu: only GPU {chosen[0]} is selected; training in one process on "
                                      "train_device")
        visible = ",".join(str(i) for i in chosen)
        return LaunchPlan(len(chosen), {"CUDA_VISIBLE_DEVICES": visible, DISTRIBUTED_ENV: "1"}, None,
                          f"{len(chosen)} processes on GPUs {visible}")
    if device.startswith("cpu"):
        if len(indexes) < 2:
            return LaunchPlan(warning="multi_gpu on cpu: list one index per process in device_indexes (e.g. 0,1); "
                                      "training in one process")
        return LaunchPlan(len(indexes), {DISTRIBUTED_ENV: "1"}, None, f"{len(indexes)} processes on cpu (gloo)")
    return LaunchPlan(warning=f"multi_gpu: train_device {device!r} is neither cuda nor cpu; training in one process")


PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds ot_gradio/


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every `python -m ot_gradio...` child (worker, tool job, estimate): this
    process's, with the folder that holds the package first on PYTHONPATH. Without it a child
    started from another folder (`cd /tmp && python /repo/app.py`) cannot import ot_gradio."""
    env = {**os.environ, **(extra or {})}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PACKAGE_ROOT not in paths:
        env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return env


def module_command(module: str, *args: str) -> list[str]:
    """`python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def worker_command(run_path: str | Path) -> list[str]:
    return module_command("ot_gradio.runner.worker", str(run_path))


def start_child(command: list[str], log: str | Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `command` in a session of its own (so stopping it stops what it starts, and Ctrl-C in
    the terminal reaches only the app), stdin closed, stdout and stderr appended to `log` (dropped
    without one), in this folder, with `child_env(env)`."""
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=child_env(env), cwd=os.getcwd())
    finally:
        if log:
            out.close()


def run_child(command: list[str], stdin_text: str, timeout: float) -> subprocess.CompletedProcess | None:
    """Run `command` to its end with `stdin_text` on its stdin, its output captured as text; None
    when it did not end within `timeout` seconds (it is killed). OSError: it could not start."""
    try:
        return subprocess.run(command, input=stdin_text, capture_output=True, text=True, timeout=timeout,
                              cwd=os.getcwd(), env=child_env())
    except subprocess.TimeoutExpired:
        return None


def stop_child(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a child started by `start_child` and what it started: SIGTERM to its session, SIGKILL
    after `grace` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)


def cuda_device_count() -> int:
    import torch  # noqa: PLC0415

    return torch.cuda.device_count()


def distributed_command(run_path: str | Path, processes: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nnodes=1", f"--nproc-per-node={processes}", "--max-restarts=0",
        "-m", "ot_gradio.runner.worker", str(run_path),
    ]


def become_distributed(run_path: str | Path, plan: LaunchPlan) -> NoReturn:
    """Replace this process (exec: its pid stays the one the supervisor tracks) with
    torch.distributed.run starting `plan.processes` workers of the run, with the plan's env."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, distributed_command(run_path, plan.processes), {**os.environ, **plan.env})


def die_with_launcher() -> None:
    """Linux: this process gets SIGKILL when its launcher dies, so a killed run leaves no rank
    behind (torch.distributed.run starts each rank in a session of its own)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # noqa: PLC0415

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:  # the launcher died before prctl took effect
        os._exit(1)
