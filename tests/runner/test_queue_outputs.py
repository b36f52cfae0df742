"""Queued runs of one config never write over each other's model (runner/outputs.py): an output
file that an earlier run wrote, or a queued or running run will write, is numbered, and the run
is told so in its log."""

import json
from pathlib import Path

from ot_gradio.runner.outputs import claim_output, numbered
from ot_gradio.runner.queue import RunQueue, SupervisorBackend
from ot_gradio.runner.rundir import RunDir
from ot_gradio.runner.supervisor import Supervisor


class IdleBackend:
    def busy(self):
        return False

    def outcome(self, run_dir):
        return None


def test_numbered_names_keep_the_suffix():
    assert numbered("/m/demo-lora.safetensors", 2) == "/m/demo-lora-2.safetensors"
    assert numbered("/m/out", 3) == "/m/out-3"  # a DIFFUSERS folder


def test_queued_runs_of_one_config_get_their_own_files(tmp_path):
    dest = tmp_path / "models" / "demo.safetensors"
    dest.parent.mkdir()
    dest.write_bytes(b"an earlier run's model")
    queue = RunQueue(tmp_path, IdleBackend())
    config = {"name": "demo", "output_model_destination": str(dest)}
    for _ in range(3):
        queue.add(dict(config))
    outputs = [e["config"]["output_model_destination"] for e in queue.list()]
    assert outputs == [str(tmp_path / "models" / f"demo-{n}.safetensors") for n in (2, 3, 4)]
    notes = [e["output_note"] for e in queue.list()]
    assert "an earlier run wrote it" in notes[0] and "demo-2.safetensors instead" in notes[0]
    assert "demo-3.safetensors instead" in notes[1]
    fresh = {"name": "new", "output_model_destination": str(tmp_path / "models" / "new.safetensors")}
    queue.add(dict(fresh))
    queue.add(dict(fresh))
    assert "output_note" not in queue.list()[3]
    assert "a queued or running run will write it" in queue.list()[4]["output_note"]
    assert dest.read_bytes() == b"an earlier run's model"
    # a run continuing from its backup keeps its file (it continues that model)
    assert claim_output({"output_model_destination": str(dest), "continue_last_backup": True})[1] == ""


def test_a_queued_run_is_renamed_when_its_file_was_written_since_and_its_log_says_so(tmp_path):
    dest = tmp_path / "models" / "demo.safetensors"
    supervisor = Supervisor(tmp_path)
    started = []

    def start(config, workspace=None, notes=()):
        started.append((dict(config), list(notes)))
        return RunDir(tmp_path / "runs" / "r1")

    supervisor.start = start
    queue = RunQueue(tmp_path, SupervisorBackend(supervisor, tmp_path))
    queue.add({"name": "demo", "output_model_destination": str(dest)})
    assert "output_note" not in queue.list()[0]
    dest.parent.mkdir()
    dest.write_bytes(b"written by a run started from the page meanwhile")
    queue.step()
    (config, notes), = started
    assert config["output_model_destination"] == str(tmp_path / "models" / "demo-2.safetensors")
    assert queue.list()[0]["config"]["output_model_destination"] == config["output_model_destination"]  # the table shows it
    assert len(notes) == 1 and "demo-2.safetensors instead" in notes[0]


def test_the_notes_are_the_first_events_and_lines_of_the_run_log(tmp_path, monkeypatch):
    supervisor = Supervisor(tmp_path)
    class Ended:  # the worker's process, already ended
        pid, returncode = 0, 0

        def poll(self):
            return 0

    monkeypatch.setattr("ot_gradio.runner.supervisor.subprocess.Popen", lambda *a, **k: Ended())
    run = supervisor.start({"name": "demo"}, notes=["Output file: x is taken; this run writes x-2 instead"])
    first = json.loads(Path(run.events).read_text().splitlines()[0])
    assert first["type"] == "warning" and "x-2 instead" in first["message"]
    assert "x-2 instead" in run.log.read_text()
    assert supervisor.state(run).warnings == ["Output file: x is taken; this run writes x-2 instead"]
