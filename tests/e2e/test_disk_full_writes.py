"""A disk that fills up between backups (an event or metric write, TensorBoard) ends the run with
the same one-line "disk full" status as a full disk in a backup, and leaves no cut-off line in
events.jsonl. The full disk is simulated by making the write fail with ENOSPC part-way."""

import errno
import json

import pytest

from ot_gradio.runner import rundir
from ot_gradio.runner.rundir import create_run
from ot_gradio.runner.worker import run_worker

pytestmark = pytest.mark.slow


def _events(run):
    return [json.loads(line) for line in run.events.read_bytes().splitlines()]  # every line whole


def _fail_events_write(monkeypatch, kind: str) -> None:
    """The first write of a `kind` event puts half its bytes on disk, then the disk is full."""
    real = rundir._write_fd
    done = {"failed": False}

    def write(fd, data):
        if not done["failed"] and f'"type": "{kind}"'.encode() in bytes(data):
            done["failed"] = True
            real(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(rundir, "_write_fd", write)


def _fail_tensorboard_write(monkeypatch) -> None:
    from tensorboard.summary.writer import record_writer

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)


@pytest.mark.parametrize("where", ["metrics event", "tensorboard"])
def test_a_full_disk_in_any_write_of_a_run_ends_in_the_disk_full_status(where, lora_config, tmp_path, monkeypatch, capsys):
    config = lora_config(samples=[], epochs=1, backup_after=0, tensorboard=where == "tensorboard",
                         workspace_dir=str(tmp_path / "ws"))
    run = create_run(tmp_path / "ws", config)
    if where == "tensorboard":
        _fail_tensorboard_write(monkeypatch)
    else:
        _fail_events_write(monkeypatch, where.split()[0])

    assert run_worker(run.path) == 1
    events = _events(run)
    status = [e for e in events if e["type"] == "status"][-1]
    assert status["status"] == "error"
    assert status["message"].startswith("disk full: could not write "), status["message"]
    assert "Free some disk space" in status["message"]
    assert "Traceback" not in capsys.readouterr().err  # an expected error: the traceback is only in log.txt
    assert not list(run.path.glob(".events-reserve-*"))  # the reserve is freed with the writer


def test_a_cut_off_line_does_not_hide_the_next_event(tmp_path):
    run = create_run(tmp_path / "ws", {"seed": 1})
    writer = rundir.EventWriter(run)
    writer.emit("progress", global_step=1)
    with open(run.events, "ab") as fh:  # a line a killed process or an older writer left cut off
        fh.write(b'{"type": "metrics", "global_st')
    writer.status("error", "disk full: ...")
    writer.close()
    events, _ = run.read_events(0)
    assert [e["type"] for e in events] == ["progress", "log", "status"]
    assert events[-1]["message"] == "disk full: ..."
