"""Crashes lose nothing: the worker is SIGKILLed at 10 moments (random moments of training, and
inside backup writes), each time the next run continues from the newest complete backup, and the
chain ends bit-identical to the same run uninterrupted. The supervisor reports each kill as
"crashed" with the exit code and the log tail, and a new run can start right after."""

import os
import random
import signal
import time

import pytest
from safetensors.torch import load_file

from ot_gradio.runner.supervisor import Supervisor
from ot_gradio.training.backup import MARKER, complete_backups, latest_backup

pytestmark = pytest.mark.slow

KILLS = 10
IN_BACKUP = {2: "backup-written", 5: "backup-renamed", 8: "backup-written"}  # kill index -> pause point


def _config(lora_config, **overrides):
    return lora_config(
        samples=[], epochs=10, sample_after_unit="NEVER", backup_after=1, backup_after_unit="STEP",
        rolling_backup=True, rolling_backup_count=3, backup_before_save=True, tensorboard=False, **overrides,
    )


def _final_weights(run):
    backups = complete_backups(run.backup)
    assert backups, f"no complete backup in {run.path}"
    return load_file(str(backups[-1] / "trainable.safetensors")), backups[-1]


def _wait_training(sup, run, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = sup.state(run)
        if state.progress.get("phase") == "training" or state.finished:
            return state
        time.sleep(0.05)
    raise AssertionError(f"run never reached training: {sup.state(run).log_tail}")


def _kill_inside_backup(sup, run, timeout=120):
    """Wait until the worker sits in the paused point of a backup write, then SIGKILL it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        partial = [p for p in run.backup.glob("*") if p.is_dir() and not (p / MARKER).exists()] if run.backup.is_dir() else []
        if partial:
            os.kill(sup._pid(run), signal.SIGKILL)
            return partial[0]
        if sup.state(run).finished:
            return None
        time.sleep(0.02)
    raise AssertionError("no backup write was seen")


def test_sigkill_at_ten_moments_then_resume_ends_bit_identical(lora_config, tmp_path):
    rng = random.Random(1234)
    reference_sup = Supervisor(tmp_path / "reference")
    reference = reference_sup.start(_config(lora_config))
    assert reference_sup.wait(reference, timeout=600) == 0, reference.log_tail()
    expected, _ = _final_weights(reference)
    total_steps = reference_sup.state(reference).progress["total_steps"]

    sup = Supervisor(tmp_path / "ws")
    runs = []
    killed_in_backup = 0
    for kill in range(KILLS):
        newest_before = latest_backup([r.path for r in runs])
        point = IN_BACKUP.get(kill)
        env = {"OT_GRADIO_FAULT_PAUSE": f"{point}:30"} if point else {}
        run = sup.start(_config(lora_config, continue_last_backup=bool(runs)), env=env)
        runs.append(run)
        state = _wait_training(sup, run)
        if point:
            partial = _kill_inside_backup(sup, run)
            killed_in_backup += partial is not None
        else:
            time.sleep(rng.uniform(0.0, 1.5))
            pid = sup._pid(run)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        assert sup.wait(run, timeout=60) is not None
        state = sup.state(run)
        if state.status == "done":
            break  # the chain reached the end before this kill
        assert state.status == "crashed", (state.status, state.message)
        assert state.exit_code == -signal.SIGKILL and state.log_tail is not None
        if newest_before is not None and len(runs) > 1:
            # the run continued from the newest complete backup that existed when it started
            assert any(newest_before.name in w or newest_before.name in state.message for w in [m for m in _statuses(run)]), (
                newest_before, _statuses(run)
            )
        # a backup without its marker is never the one picked
        newest = latest_backup([r.path for r in runs])
        assert newest is None or (newest / MARKER).exists()

    assert killed_in_backup >= 2, "the kills inside a backup write did not happen"
    final = sup.start(_config(lora_config, continue_last_backup=True))
    runs.append(final)
    assert sup.wait(final, timeout=600) == 0, final.log_tail()
    state = sup.state(final)
    assert state.status == "done" and state.progress["global_step"] == total_steps
    got, _ = _final_weights(final)
    assert got.keys() == expected.keys()
    differing = [k for k in expected if not (got[k] == expected[k]).all()]
    assert not differing, f"{len(differing)} tensors differ from the uninterrupted run, e.g. {differing[:3]}"


def _statuses(run):
    import json

    lines = run.events.read_text().splitlines() if run.events.exists() else []
    return [json.loads(line).get("message", "") for line in lines if '"status"' in line]
