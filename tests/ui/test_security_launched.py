"""`python app.py --auth` really started in a home-like folder (keys in hidden folders, a token in
the workspace) after a concept folder outside every root was typed in the page (so it is in the
saved ui-config.json, as after a restart), then attacked over loopback: what it serves, the
login limit with forged X-Forwarded-For, CORS for another local port, and whole-origin checks."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
EVIL = "attacker.example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    outside = tmp_path_factory.mktemp("concept-outside")  # stands for /etc: typed as a concept folder
    (outside / "shadow").write_text("root:secret-hash")
    for name, text in ((".docker/config.json", '{"auths": "key"}'), (".ssh/id_ed25519", "KEY"), ("notes.txt", "notes")):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    ws = home / "workspace"
    (ws / ".hidden").mkdir(parents=True)
    (ws / ".hidden" / "x.txt").write_text("hidden")
    (ws / "sample.txt").write_text("a sample")
    (ws / "secrets.json").write_text(json.dumps({"huggingface_token": "hf_SECRET"}))
    from ot_gradio.ui.state import default_config, save_ui_config

    config = default_config()
    config["concepts"] = [{"name": "etc", "path": str(outside)}]
    save_ui_config(ws, config)
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("FORWARDED_ALLOW_IPS", None)
    log = open(home / "app.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--workspace", str(ws),
                             "--auth", "me:right"], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(base + "/", timeout=15)
            break
        except OSError:
            time.sleep(0.5)
    assert proc.poll() is None, (home / "app.log").read_text()[-3000:]
    yield {"base": base, "port": port, "home": home, "ws": ws.resolve(), "outside": outside.resolve()}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def log_in(client: httpx.Client, base: str, password: str = "right", patience: float = 60) -> int:
    deadline = time.monotonic() + patience
    while True:
        resp = client.post(f"{base}/login", data={"username": "me", "password": password})
        if resp.status_code != 429 or time.monotonic() > deadline:
            return resp.status_code
        time.sleep(float(resp.headers["retry-after"]))


@pytest.fixture(scope="module")
def owner(app):
    """The owner's browser, logged in once before the attack (as after any earlier visit)."""
    with httpx.Client(timeout=30) as client:
        assert log_in(client, app["base"]) == 200
        yield client


def test_only_the_workspace_is_served_never_secrets_hidden_files_or_concept_folders(app, owner):
    base, ws, home = app["base"], app["ws"], app["home"]
    file = f"{base}/gradio_api/file="
    assert owner.get(file + str(ws / "sample.txt")).status_code == 200  # what the page shows
    refused = [ws / "secrets.json", ws / ".hidden" / "x.txt", app["outside"] / "shadow", home / ".docker" / "config.json",
               home / ".ssh" / "id_ed25519", home / "notes.txt", Path("/etc/passwd")]
    for path in refused:
        for url in (file + str(path), f"{base}/gradio_api/file/{path}", file + str(ws / ".." / ws.name / path.name)):
            resp = owner.get(url)
            assert resp.status_code == 403, (url, resp.status_code)
            assert "hf_SECRET" not in resp.text and "secret-hash" not in resp.text


def test_forged_forwarded_addresses_do_not_dodge_the_login_limit_nor_lock_out_the_owner(app, owner):
    base = app["base"]
    with httpx.Client(timeout=30) as attacker:
        codes = [attacker.post(f"{base}/login", data={"username": "me", "password": f"guess{i}"},
                               headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(12)]
        assert codes.count(400) <= 4 and codes.count(429) >= 8, codes  # checked: the free tries and one after 1 s at most
        started = time.monotonic()
        assert owner.post(f"{base}/login", data={"username": "me", "password": "right"}).status_code == 200  # at once
        assert time.monotonic() - started < 10
        assert attacker.post(f"{base}/login", data={"username": "me", "password": "right"}).status_code == 429  # still waits


def test_cors_answers_only_the_page_own_origin(app, owner):
    base, port = app["base"], app["port"]
    for origin in (f"http://localhost:{port + 1}", f"http://127.0.0.1:{port + 1}", f"http://{EVIL}", "null"):
        resp = owner.get(f"{base}/config", headers={"Origin": origin})
        assert "access-control-allow-origin" not in resp.headers, (origin, resp.headers)
        pre = owner.options(f"{base}/gradio_api/queue/join",
                            headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in pre.headers, origin
    for origin in (f"http://127.0.0.1:{port}.{EVIL}", f"http://localhost:{port + 1}"):
        resp = owner.post(f"{base}/gradio_api/queue/join", json={}, headers={"Origin": origin})
        assert resp.status_code == 403 and "Origin" in resp.json()["detail"], origin
    assert owner.get(f"{base}/config", headers={"Host": f"127.0.0.1:{port}.{EVIL}"}).status_code == 403
