"""RunQueue with a fake supervisor backend: order, failures, stops, persistence."""

import json
import time

import pytest

from ot_gradio.runner.queue import RunQueue


class FakeBackend:
    def __init__(self):
        self.started = []  # names in start order
        self.results = {}  # run_dir -> None (running) / the final status: "done", "stopped", "error", "crashed"
        self.external_busy = False
        self.fail_start = set()

    def busy(self):
        return self.external_busy or any(r is None for r in self.results.values())

    def start(self, config):
        assert not self.busy(), "two runs at once"
        if config["name"] in self.fail_start:
            raise RuntimeError("bad config")
        run_dir = f"/runs/{config['name']}"
        self.started.append(config["name"])
        self.results[run_dir] = None
        return run_dir

    def outcome(self, run_dir):
        return self.results[run_dir]

    def finish(self, name, result="done"):
        self.results[f"/runs/{name}"] = result


def states(queue):
    return [(e["name"], e["state"]) for e in queue.list()]


def test_runs_in_order_and_failed_run_does_not_stop_queue(tmp_path):
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend)
    for name in ("a", "b", "c"):
        queue.add({"name": name}, name)
    queue.step()
    queue.step()  # a still running: nothing else starts
    assert backend.started == ["a"]
    assert states(queue) == [("a", "running"), ("b", "waiting"), ("c", "waiting")]
    backend.finish("a", "error")
    queue.step()
    assert backend.started == ["a", "b"]
    assert states(queue)[0] == ("a", "failed")
    backend.finish("b")
    queue.step()
    backend.finish("c")
    queue.step()
    assert backend.started == ["a", "b", "c"]
    assert states(queue) == [("a", "failed"), ("b", "done"), ("c", "done")]
    assert queue.waiting() == 0


def test_waits_for_a_run_started_elsewhere_and_bad_start_is_marked(tmp_path):
    backend = FakeBackend()
    backend.external_busy = True
    backend.fail_start = {"bad"}
    queue = RunQueue(tmp_path, backend)
    queue.add({"name": "bad"}, "bad")
    queue.add({"name": "ok"}, "ok")
    queue.step()
    assert backend.started == []
    backend.external_busy = False
    queue.step()
    assert states(queue)[0] == ("bad", "failed")
    assert "bad config" in queue.list()[0]["note"]
    queue.step()
    assert backend.started == ["ok"]


def test_persistence_and_a_run_outliving_the_app_is_followed_again(tmp_path):
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend)
    queue.add({"name": "a", "lr": 0.1}, "a")
    queue.add({"name": "b"}, "b")
    queue.add({"name": "c"}, "c")
    queue.step()
    saved = json.loads((tmp_path / "queue.json").read_text())
    assert [e["state"] for e in saved["entries"]] == ["running", "waiting", "waiting"]
    assert saved["entries"][0]["run_dir"] == "/runs/a"
    assert not list(tmp_path.glob("*.tmp"))
    # the app is stopped; a's worker (its own process group) goes on training. A new queue on the
    # same folder follows it again: nothing else starts until it ends, then b does.
    backend2 = FakeBackend()
    backend2.results["/runs/a"] = None
    reloaded = RunQueue(tmp_path, backend2)
    entries = reloaded.list()
    assert [(e["name"], e["state"]) for e in entries] == [("a", "running"), ("b", "waiting"), ("c", "waiting")]
    assert entries[0]["config"] == {"name": "a", "lr": 0.1}
    reloaded.step()
    assert backend2.started == []
    backend2.finish("a")
    reloaded.step()
    assert backend2.started == ["b"]
    assert states(reloaded)[:2] == [("a", "done"), ("b", "running")]
    # the app is stopped again and b's worker dies with it (killed): b is failed, saying how, and c starts
    backend3 = FakeBackend()
    backend3.results["/runs/b"] = "crashed"
    third = RunQueue(tmp_path, backend3)
    third.step()
    assert states(third) == [("a", "done"), ("b", "failed"), ("c", "running")]
    assert "crashed" in third.list()[1]["note"]
    assert backend3.started == ["c"]


def test_an_entry_the_app_stopped_while_starting_is_failed(tmp_path):
    (tmp_path / "queue.json").write_text(json.dumps({"entries": [
        {"id": "x1", "name": "x", "config": {"name": "x"}, "state": "running", "added": "", "run_dir": ""},
        {"id": "y1", "name": "y", "config": {"name": "y"}, "state": "waiting", "added": "", "run_dir": ""}]}))
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend)
    assert states(queue) == [("x", "failed"), ("y", "waiting")]
    assert "starting" in queue.list()[0]["note"]
    queue.step()
    assert backend.started == ["y"]


def test_a_stopped_run_is_stopped_not_failed_and_the_queue_goes_on(tmp_path):
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend)
    for name in ("a", "b", "c"):
        queue.add({"name": name}, name)
    queue.step()
    backend.finish("a", "stopped")  # the user pressed Stop: the run folder says "stopped"
    queue.step()
    assert states(queue)[:2] == [("a", "stopped"), ("b", "running")]
    assert "note" not in queue.list()[0]
    backend.finish("b", "error")
    queue.step()
    assert states(queue) == [("a", "stopped"), ("b", "failed"), ("c", "running")]
    assert queue.list()[1]["note"] == "the run ended: error"
    assert queue.waiting() == 0
    # the state survives a reload (it is one of the stored states)
    assert states(RunQueue(tmp_path, FakeBackend()))[0] == ("a", "stopped")
    # and the page's queue table shows it as such, the failure with how the run ended
    from ot_gradio.ui.queue_panel import rows

    assert [r[2] for r in rows(queue)] == ["stopped", "failed (the run ended: error)", "running"]


def test_remove_and_move(tmp_path):
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend)
    ids = [queue.add({"name": n}, n) for n in ("a", "b", "c")]
    queue.move(ids[2], -1)
    assert [e["name"] for e in queue.list()] == ["a", "c", "b"]
    queue.move(ids[0], -1)  # already first: stays
    queue.move(ids[0], +1)
    assert [e["name"] for e in queue.list()] == ["c", "a", "b"]
    queue.remove(ids[1])
    assert [e["name"] for e in RunQueue(tmp_path, backend).list()] == ["c", "a"]
    with pytest.raises(KeyError):
        queue.remove("nope")
    queue.step()  # c is running now
    with pytest.raises(ValueError, match="running"):
        queue.remove(ids[2])
    assert backend.started == ["c"]


def test_runner_thread_starts_next_when_idle(tmp_path):
    backend = FakeBackend()
    queue = RunQueue(tmp_path, backend, poll_seconds=0.02)
    queue.add({"name": "a"}, "a")
    queue.add({"name": "b"}, "b")
    queue.start_thread()
    try:
        _wait(lambda: backend.started == ["a"])
        backend.finish("a")
        _wait(lambda: backend.started == ["a", "b"])
        backend.finish("b")
        _wait(lambda: states(queue) == [("a", "done"), ("b", "done")])
    finally:
        queue.close()


def _wait(check, timeout=10.0):
    end = time.time() + timeout
    while not check():
        assert time.time() < end, "condition not reached"
        time.sleep(0.01)
