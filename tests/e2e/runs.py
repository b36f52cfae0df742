"""Helpers the end-to-end run tests share: a run through the page's supervisor to the end."""

import json

from ot_gradio.runner.supervisor import Supervisor


def run_until_done(config, tmp_path, timeout=600):
    """Start `config` as the page would (a worker process of the supervisor of `tmp_path/ws`),
    wait for it and check it ended "done"; returns (run folder, its events)."""
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert sup.wait(run, timeout=timeout) == 0, run.log_tail()
    events = [json.loads(line) for line in run.events.read_text().splitlines()]
    assert [e["status"] for e in events if e["type"] == "status"][-1] == "done", run.log_tail()
    return run, events
