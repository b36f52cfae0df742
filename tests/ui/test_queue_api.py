"""The HTTP API handlers with a fake supervisor, and their registration."""

import json
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from ot_gradio.runner.queue import RunQueue
from ot_gradio.ui.api import QueueApi, register_api


class FakeSupervisor:
    def __init__(self):
        self.active = []
        self.stopped = []

    def active_runs(self):
        return list(self.active)

    def stop(self, run):
        self.stopped.append(run)
        self.active.remove(run)
        return f"stop requested for {run.path.name}"

    def state(self, run):
        return SimpleNamespace(status="training", progress={"global_step": 3, "total_steps": 10}, losses=[(1, 0.5), (2, 0.4), (3, 0.3)])


class FakeBackend:
    def __init__(self, sup):
        self.sup = sup
        self.started = []

    def busy(self):
        return bool(self.sup.active)

    def start(self, config):
        run = SimpleNamespace(path=Path(f"/runs/{config['name']}"))
        self.sup.active.append(run)
        self.started.append(config["name"])
        return str(run.path)

    def outcome(self, run_dir):
        return None if any(str(r.path) == run_dir for r in self.sup.active) else "done"


def validate(config):
    if config.get("batch_size", 1) < 1:
        return None, ["batch_size: must be at least 1"], []
    return config, [], []


def make(tmp_path):
    sup = FakeSupervisor()
    sup.workspace = tmp_path
    backend = FakeBackend(sup)
    return QueueApi(RunQueue(tmp_path, backend), sup, validate), sup, backend


def test_queue_config_refuses_bad_configs_and_queues_good_ones(tmp_path):
    api, _sup, backend = make(tmp_path)
    assert "not valid JSON" in api.queue_config("{nope")["problems"][0]
    assert "JSON object" in api.queue_config("[1]")["problems"][0]
    assert api.queue_config(json.dumps({"name": "x", "batch_size": 0})) == {"problems": ["batch_size: must be at least 1"]}
    assert api.queue.list() == []
    result = api.queue_config(json.dumps({"name": "a"}))
    assert [e["id"] for e in api.queue.list()] == [result["id"]]
    assert backend.started == []  # queuing alone does not start
    # a token in a queued config goes to the workspace's secrets file, as the CLI moves it, never into the queue
    result = api.queue_config(json.dumps({"name": "b", "secrets": {"huggingface_token": "hf_APITOKEN"}}))
    assert "secrets.huggingface_token: moved" in result["warnings"][0]
    assert json.loads((tmp_path / "secrets.json").read_text()) == {"huggingface_token": "hf_APITOKEN"}
    assert not any("hf_APITOKEN" in p.read_text() for p in tmp_path.rglob("*.json") if p.name != "secrets.json")



def test_a_refused_config_leaves_the_stored_tokens_as_they_were(tmp_path):
    """A config sent to the HTTP API had its tokens written over the stored ones before it was
    checked: a refused config (or one refused on purpose) replaced or, empty, left them as it said."""
    from ot_gradio.secrets import read_secrets, write_secrets

    api, _sup, _backend = make(tmp_path)
    write_secrets(tmp_path, huggingface_token="hf_STORED", civitai_token="civ_STORED")
    refused = {"name": "x", "batch_size": 0, "secrets": {"huggingface_token": "hf_OTHER", "civitai_token": "civ_OTHER"}}
    assert api.queue_config(json.dumps(refused)) == {"problems": ["batch_size: must be at least 1"]}
    assert read_secrets(tmp_path) == {"huggingface_token": "hf_STORED", "civitai_token": "civ_STORED"}
    # taken: its token replaces the stored one; a token it leaves empty stays
    result = api.queue_config(json.dumps({"name": "y", "secrets": {"huggingface_token": "hf_OTHER", "civitai_token": ""}}))
    assert "id" in result and read_secrets(tmp_path) == {"huggingface_token": "hf_OTHER", "civitai_token": "civ_STORED"}
    assert not any("hf_OTHER" in p.read_text() for p in tmp_path.rglob("*.json") if p.name != "secrets.json")

def test_start_status_stop(tmp_path):
    api, sup, backend = make(tmp_path)
    api.queue_config(json.dumps({"name": "a"}))
    try:
        out = api.start(json.dumps({"name": "b"}))
        assert "id" in out and out["queue_length"] == 1
        assert backend.started == ["a"]
        status = api.status()
        assert status["status"] == "training" and status["step"] == 3 and status["total"] == 10
        assert status["last_losses"][-1] == [3, 0.3] and status["queue_length"] == 1
        assert api.stop()["stopped"] == 1 and sup.active == []
        assert api.status()["status"] == "idle"
        assert api.start(json.dumps({"batch_size": 0}))["problems"]
    finally:
        api.queue.close()


def test_register_adds_named_endpoints(tmp_path):
    api, _sup, _backend = make(tmp_path)
    with gr.Blocks() as blocks:
        register_api(api)
    names = {fn.api_name for fn in blocks.fns.values()}
    assert {"queue_config", "start", "stop", "status"} <= names


def test_api_refused_without_login_and_works_with_it(tmp_path):
    import httpx

    from tests.ui.test_security_requests import launch

    api, _sup, _backend = make(tmp_path)
    with gr.Blocks() as blocks:
        register_api(api)
    base = launch(blocks, auth=[("me", "right")])
    try:
        with httpx.Client(timeout=30) as client:
            refused = client.post(f"{base}/gradio_api/call/status", json={"data": []})
            assert refused.status_code == 401
            assert client.post(f"{base}/login", data={"username": "me", "password": "right"}).status_code == 200
            call = client.post(f"{base}/gradio_api/call/status", json={"data": []})
            assert call.status_code == 200, call.text
            result = client.get(f"{base}/gradio_api/call/status/{call.json()['event_id']}")
            assert "idle" in result.text and "queue_length" in result.text
    finally:
        blocks.close()


def test_queue_panel_handlers(tmp_path):
    from ot_gradio.ui.queue_panel import QueuePanel

    api, _sup, backend = make(tmp_path)
    panel = QueuePanel(api.queue, lambda values: values["config"], validate)
    table, length, message, _choices = panel.on_add({"config": {"name": "x", "batch_size": 0}})
    assert table == [] and "Not queued" in message and "Training → Batch size: must be at least 1" in message  # by tab and label
    assert length == "Queue: empty"
    panel.add_config({"name": "a"})
    table, length, message, dropdown = panel.add_config({"name": "b"})
    assert [value for _label, value in dropdown["choices"]] == [r[0] for r in table]
    assert [r[1] for r in table] == ["a", "b"] and length == "Queue: 2 waiting" and "Queued as" in message
    b_id = table[1][0]
    table = panel.on_action(b_id, "Up")[0]
    assert [r[1] for r in table] == ["b", "a"]
    assert "choose an entry" in panel.on_action(None, "Down")[2]
    table, length, message, _choices = panel.on_action(f" {b_id} ", "Remove")
    assert [r[1] for r in table] == ["a"] and length == "Queue: 1 waiting" and message == "Removed."
    api.queue.step()
    assert "stop the run first" in panel.on_action(table[0][0], "Remove")[2]
    assert backend.started == ["a"]


def test_page_mounts_queue_and_public_api(tmp_path):
    from ot_gradio.ui.page import Page

    page = Page(tmp_path)
    try:
        public = {fn.api_name for fn in page.blocks.fns.values() if fn.api_visibility == "public"}
        assert public == {"queue_config", "start", "stop", "status"}
        # the page's own checks refuse a config without concepts/model before it is queued
        _table, _length, message, _choices = page.queue_panel.add_config({"batch_size": 0})
        assert "Not queued" in message and page.queue.list() == []
    finally:
        page.queue.close()
