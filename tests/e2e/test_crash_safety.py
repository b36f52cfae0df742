"""Crash safety at every step of a backup write and at seeded random moments of a run.

1. The backup writer is held at each of its steps (backup.STEPS, through OT_GRADIO_FAULT_PAUSE)
   and SIGKILLed there: resume always picks the newest complete backup, never the partial one, it
   loads, and the next start of the workspace removes the leftovers (never a complete backup).
2. A real run is SIGKILLed at 4 seeded moments (two at random times of training once the run
   has written a backup, two inside backup writes at randomly chosen steps); the supervisor reports each kill as "crashed" with the
   exit code and the log tail, each next run continues from the newest complete backup of the
   killed ones, the killed runs' leftovers are gone once it starts, and the chain ends
   bit-identical to the uninterrupted run.
"""

import json
import os
import random
import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from ot_gradio.runner.rundir import RunDir, create_run
from ot_gradio.runner.supervisor import Supervisor
from ot_gradio.training.backup import MARKER, STEPS, Counters, complete_backups, latest_backup, read_backup, write_backup

pytestmark = pytest.mark.slow

SEED = 20
KILLS = 4
EPOCHS = 3  # about 15 steps, a backup after each


def _config(lora_config, **overrides):
    return lora_config(
        samples=[], epochs=EPOCHS, sample_after_unit="NEVER", backup_after=1, backup_after_unit="STEP",
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


def _held_writer_killed_at(step: str, run: RunDir, flag) -> None:
    """Fork a child that writes a backup of step 2 into `run`, held at `step`; SIGKILL it there."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.environ["OT_GRADIO_FAULT_PAUSE"] = f"{step}:60"
            os.environ["OT_GRADIO_FAULT_PAUSE_FILE"] = str(flag)
            write_backup(run.backup, {"w": torch.full((256,), 2.0)}, {"optimizer": {"n": 2}}, {}, Counters(global_step=2))
            code = 0
        finally:
            os._exit(code)
    end = time.monotonic() + 60
    while not (flag.exists() and flag.read_text() == step):
        assert time.monotonic() < end, f"the writer never reached {step}"
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("step", STEPS)
def test_a_backup_write_killed_at_each_step_resumes_from_the_newest_complete_backup(step, tmp_path):
    workspace = tmp_path / "ws"
    run = create_run(workspace, {"seed": 1})
    first = write_backup(run.backup, {"w": torch.full((256,), 1.0)}, {"optimizer": {"n": 1}}, {}, Counters(global_step=1))
    _held_writer_killed_at(step, run, tmp_path / "where")

    newest = latest_backup([run.path])
    assert newest is not None and (newest / MARKER).exists()
    loaded = read_backup(newest)
    # the second backup counts only once its marker is written (the last step)
    expected_step = 2 if step == "backup-marked" else 1
    assert loaded.counters.global_step == expected_step and float(loaded.trainable["w"][0]) == expected_step
    if expected_step == 1:
        assert newest == first

    leftovers = [p for p in run.backup.iterdir() if p.name.startswith(".") or not (p / MARKER).exists()]
    assert bool(leftovers) == (step not in ("backup-marked",)), (step, leftovers)
    complete = complete_backups(run.backup)
    new = create_run(workspace, {"seed": 1})  # the next start of this workspace cleans up
    assert complete_backups(run.backup) == complete  # never a complete backup removed
    assert sorted(p.name for p in run.backup.iterdir()) == sorted(p.name for p in complete)
    if leftovers:
        assert "removed a leftover of an interrupted write" in new.log.read_text()


def _statuses(run):
    lines = run.events.read_text().splitlines() if run.events.exists() else []
    return [e.get("message", "") for e in map(json.loads, lines) if e.get("type") == "status"]


def _leftovers(runs):
    return [p for r in runs if r.backup.is_dir() for p in r.backup.iterdir() if p.name.startswith(".") or not (p / MARKER).exists()]


def test_seeded_kills_resume_from_the_newest_complete_backup_and_end_bit_identical(lora_config, tmp_path):
    rng = random.Random(SEED)
    # the first two kills land inside a backup write (at seeded steps of it), the rest at random
    # moments: a kill inside a write drawn later could come after a fast machine's chain had
    # already reached the end (one CI run here: 19 min, the chain done by the fourth kill)
    in_backup = dict(zip((0, 1), rng.sample([s for s in STEPS if s != "backup-marked"], 2), strict=True))

    reference_sup = Supervisor(tmp_path / "reference")
    reference = reference_sup.start(_config(lora_config))
    assert reference_sup.wait(reference, timeout=600) == 0, reference.log_tail()
    expected, _ = _final_weights(reference)
    total_steps = reference_sup.state(reference).progress["total_steps"]

    sup = Supervisor(tmp_path / "ws")
    runs: list[RunDir] = []
    held = 0
    for kill in range(KILLS):
        newest_before = latest_backup([r.path for r in runs])
        step = in_backup.get(kill)
        env = {"OT_GRADIO_FAULT_PAUSE": f"{step}:60", "OT_GRADIO_FAULT_PAUSE_FILE": str(tmp_path / f"where{kill}")} if step else {}
        run = sup.start(_config(lora_config, continue_last_backup=bool(runs)), env=env)
        assert not _leftovers(runs), "the start of a run removes what the killed runs left"
        runs.append(run)
        _wait_training(sup, run)
        if step:
            flag = tmp_path / f"where{kill}"
            end = time.monotonic() + 120
            while not flag.exists() and not sup.state(run).finished:
                assert time.monotonic() < end, "the backup writer was never held"
                time.sleep(0.02)
            held += flag.exists()
        else:
            # a random moment once the run has written a backup of its own: on a slow or busy
            # machine a fixed moment could come before any, and the chain would never move on
            end = time.monotonic() + 240
            while latest_backup([run.path]) is None and not sup.state(run).finished:
                assert time.monotonic() < end, "the run never wrote a backup"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.2, 1.5))
        pid = sup._pid(run)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        assert sup.wait(run, timeout=60) is not None
        state = sup.state(run)
        if state.status == "done":
            break  # the chain reached the end before this kill
        assert state.status == "crashed" and state.exit_code == -signal.SIGKILL, (state.status, state.message)
        assert state.log_tail is not None
        if newest_before is not None:
            # it continued from the newest complete backup of the killed runs
            assert any(f"continuing from backup {newest_before.name}" in m for m in _statuses(run)), _statuses(run)

    assert held == 2, "both kills inside a backup write happened"
    final = sup.start(_config(lora_config, continue_last_backup=True))
    assert not _leftovers(runs)
    newest = latest_backup([r.path for r in runs])
    runs.append(final)
    assert sup.wait(final, timeout=600) == 0, final.log_tail()
    assert any(f"continuing from backup {newest.name}" in m for m in _statuses(final))
    assert sup.state(final).progress["global_step"] == total_steps
    got, _ = _final_weights(final)
    assert got.keys() == expected.keys()
    differing = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert not differing, f"{len(differing)} tensors differ from the uninterrupted run, e.g. {differing[:3]}"


# --- a full disk anywhere: the run stops with one message naming the path and the space ---------

@pytest.mark.parametrize("where", ["cache", "sample", "backup", "final save"])
def test_a_full_disk_stops_the_run_naming_the_path_and_leaves_nothing_half_written(where, lora_config, tmp_path, monkeypatch):
    from ot_gradio import fsutil
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.runner.worker import run_worker
    from ot_gradio.training import backup as backup_module

    data = lora_config(epochs=1, backup_after=1, backup_after_unit="STEP" if where == "backup" else "NEVER",
                       tensorboard=False, sample_after=1, sample_after_unit="STEP" if where == "sample" else "NEVER",
                       clear_cache_before_training=True)
    run = create_run(tmp_path / "ws", config_to_dict(load_config(data).config))
    folder = {"cache": tmp_path / "cache", "sample": run.samples, "backup": run.backup, "final save": tmp_path / "out"}[where]
    real_fsync = fsutil.fsync_file
    seen = {"n": 0}

    def fsync_on_a_full_disk(path):  # ENOSPC from fsync: the data did not fit (what NFS and quotas do)
        if str(path).startswith(str(folder)):
            seen["n"] += 1
            if where != "backup" or seen["n"] > 4:  # a backup: the first one (3 files and the marker) fits
                raise OSError(28, "No space left on device")
        real_fsync(path)

    monkeypatch.setattr(fsutil, "fsync_file", fsync_on_a_full_disk)
    monkeypatch.setattr(backup_module, "fsync_file", fsync_on_a_full_disk)
    assert run_worker(run.path) == 1
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    last = [e for e in events if e["type"] == "status"][-1]
    assert last["status"] == "error" and last["message"].startswith("disk full: could not write "), last
    assert str(folder) in last["message"] and " needed" in last["message"] and " free)" in last["message"], last
    assert "\n" not in last["message"]
    left = [p for p in folder.rglob("*") if p.name.startswith(".") or (p.is_dir() and where == "backup" and not (p / MARKER).exists())]
    assert not left, left  # no temp file, no half backup
    if where == "backup":
        (kept,) = complete_backups(run.backup)  # the first backup is intact and loads
        assert read_backup(kept).counters.global_step > 0
