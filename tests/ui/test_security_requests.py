"""Requests against a really launched app, with app.py's launch settings (launch.launch_kwargs):
DNS rebinding and cross-site requests are refused on every route, logins are rate-limited, only
what a login page needs answers without a login, and the upload limit covers a whole request."""

import os
import socket
import time

import gradio as gr
import httpx
import pytest

from ot_gradio.ui.guard import HostRule, LoginLimiter, exact_origin, host_name, split_host, split_origin
from ot_gradio.ui.launch import _patient_localhost_check, build_parser, launch_kwargs

EVIL = "attacker.example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(blocks: gr.Blocks, *argv: str, auth=()) -> str:
    args = build_parser().parse_args(["--port", str(free_port()), *argv])
    _patient_localhost_check()
    blocks.launch(prevent_thread_lock=True, quiet=True, **launch_kwargs(args, list(auth), blocks, []))
    return f"http://127.0.0.1:{args.port}"


def routes(app, prefix: str = "") -> list[tuple[str, str]]:
    """(method, path) of every route, mounted sub-apps included."""
    out = []
    for route in app.routes:
        path = prefix + (getattr(route, "path", None) or "")
        included = getattr(route, "original_router", None)  # FastAPI's include_router
        if included is not None:
            out += routes(included, prefix + getattr(getattr(route, "include_context", None), "prefix", ""))
        elif getattr(route, "routes", None):  # a Mount
            out += routes(route, path)
        elif path:
            methods = getattr(route, "methods", None) or {"GET"}
            out.append(("GET" if "GET" in methods else sorted(methods)[0], path))
    return out


def status(client: httpx.Client, method: str, url: str, **kw) -> int:
    with client.stream(method, url, **kw) as resp:  # heartbeats and streams stay open: read the status only
        return resp.status_code


@pytest.fixture(scope="module")
def page_app(tmp_path_factory):
    """The real page, as `python app.py` serves it (127.0.0.1, no password)."""
    from ot_gradio.ui.page import Page

    page = Page(tmp_path_factory.mktemp("sec") / "workspace")
    base = launch(page.blocks)
    yield page, base
    page.blocks.close()
    page.tensorboard.stop()


def join_payload(page) -> dict:
    """A queue/join of a real handler of the page (the browser panel's Close: no inputs)."""
    fn_index = next(i for i, fn in page.blocks.fns.items() if getattr(fn.fn, "__func__", None) is type(page.browser).hide)
    return {"data": [], "fn_index": fn_index, "session_hash": "sec-test", "event_data": None, "trigger_id": None}


def test_dns_rebinding_requests_are_refused(page_app):
    page, base = page_app
    port = base.rsplit(":", 1)[1]
    with httpx.Client(timeout=30) as client:
        resp = client.get(f"{base}/config", headers={"Host": EVIL})
        assert resp.status_code == 403 and "Host" in resp.json()["detail"]
        resp = client.post(f"{base}/gradio_api/queue/join", json=join_payload(page),
                           headers={"Host": EVIL, "Origin": f"http://{EVIL}"})
        assert resp.status_code == 403 and "event_id" not in resp.text
        # cross-site POST with a local Host (CSRF) and the "null" origin of sandboxed frames
        for origin in (f"http://{EVIL}", f"http://{EVIL}:{port}", "null", f"http://127.0.0.1.{EVIL}",
                       f"http://127.0.0.1:{port}.{EVIL}", f"http://localhost:{int(port) + 1}", f"ftp://127.0.0.1:{port}",
                       f"http://me@127.0.0.1:{port}"):
            resp = client.post(f"{base}/gradio_api/queue/join", json=join_payload(page), headers={"Origin": origin})
            assert resp.status_code == 403, origin
            assert "Origin" in resp.json()["detail"]
        for host in (f"127.0.0.1:{port}.{EVIL}", f"localhost:{port}@{EVIL}"):  # parsed whole, not by a URL parser
            assert client.get(f"{base}/config", headers={"Host": host}).status_code == 403, host
        # the page itself, from this machine, by any local name
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            assert client.get(f"{base}/config", headers={"Host": host}).status_code == 200, host
        for origin in (None, base, f"http://localhost:{port}"):
            headers = {"Origin": origin} if origin else {}
            resp = client.post(f"{base}/gradio_api/queue/join", json=join_payload(page), headers=headers)
            assert resp.status_code == 200 and resp.json()["event_id"], origin


def test_every_route_refuses_a_foreign_host(page_app):
    page, base = page_app
    with httpx.Client(timeout=30) as client:
        checked = 0
        for method, path in routes(page.blocks.app):
            url = base + path.replace("{", "").replace("}", "")
            code = status(client, method, url, headers={"Host": EVIL, "Origin": f"http://{EVIL}"})
            assert code == 403, (method, path, code)
            checked += 1
    assert checked > 60  # gradio's own routes and its /gradio_api ones


@pytest.fixture(scope="module")
def auth_app():
    """A small app launched as app.py launches it, with a password and a 1 MB upload limit."""
    with gr.Blocks() as demo:
        text = gr.Textbox()
        gr.Button().click(lambda x: x, text, text)
    base = launch(demo, "--max-upload-mb", "1", auth=[("me", "right")])
    yield demo, base
    demo.close()


def test_without_login_only_the_login_page_answers(auth_app):
    demo, base = auth_app
    login_page = {"/", "/favicon.ico", "/theme.css", "/robots.txt", "/manifest.json",  # the page and its assets
                  *(f"/gradio_api/{p}{s}" for p in ("user", "token", "app_id", "theme.css") for s in ("", "/")),
                  "/gradio_api/startup-events"}  # login state; start-up (launch calls it, runs once)
    with httpx.Client(timeout=30) as client:
        open_routes = set()
        for method, path in routes(demo.app):
            url = base + path.replace("{", "").replace("}", "")
            if status(client, method, url) < 300:
                open_routes.add(path)
        assert open_routes <= login_page, open_routes - login_page
        assert status(client, "GET", f"{base}/gradio_api/heartbeat/anything") == 401
        assert client.get(f"{base}/openapi.json").status_code in (401, 404)
        assert log_in(client, base) == 200
        assert status(client, "GET", f"{base}/gradio_api/heartbeat/anything") == 200  # logged in: the cookie


def log_in(client: httpx.Client, base: str, password: str = "right", patience: float = 90) -> int:
    """POST /login, waiting out 429s (as a person would); the last status."""
    deadline = time.monotonic() + patience
    while True:
        resp = client.post(f"{base}/login", data={"username": "me", "password": password})
        if resp.status_code != 429 or time.monotonic() > deadline:
            return resp.status_code
        time.sleep(float(resp.headers["retry-after"]))


def test_login_attempts_wait_longer_after_each_wrong_password(auth_app):
    _, base = auth_app
    wrong = {"username": "me", "password": "wrong"}
    with httpx.Client(timeout=30) as client:
        assert log_in(client, base) == 200  # a clean count, whatever ran before
        answers = []
        for _ in range(40):  # as fast as the client can send them
            code = client.post(f"{base}/login", data=wrong).status_code
            answers.append((time.monotonic(), code))
        codes = [c for _, c in answers]
        checked = [t for t, c in answers if c == 400]
        assert set(codes) == {400, 429} and codes[:3] == [400, 400, 400], codes
        # from the 3rd wrong password on, each next one is checked only after 1, 2, 4 ... s
        for k in range(2, len(checked) - 1):
            assert checked[k + 1] - checked[k] >= 2 ** (k - 2) - 0.15, (k, checked)
        assert codes.count(429) >= 30  # of 40 tries in a few seconds, only a handful were checked
        wait_left = checked[-1] + min(2 ** (len(checked) - 3), 60) - time.monotonic()
        resp = client.post(f"{base}/login", data={"username": "me", "password": "right"})
        if wait_left > 0.2:  # (always, unless the machine stalled for a second just now)
            assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1  # even the right one waits
        assert log_in(client, base) == 200
        assert client.post(f"{base}/login", data=wrong).status_code == 400  # the right one cleared the count


def test_login_limiter_grows_to_a_minute_and_allows_one_try_at_a_time():
    now = [0.0]
    limiter = LoginLimiter(clock=lambda: now[0])
    waits = []
    for _ in range(12):
        assert limiter.begin("1.2.3.4") == 0
        assert limiter.begin("1.2.3.4") >= 1  # a parallel try while one is in flight
        limiter.end("1.2.3.4", ok=False)
        waits.append(limiter.clients["1.2.3.4"].next_try - now[0])
        now[0] += waits[-1]
    assert waits == [0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert limiter.begin("5.6.7.8") == 0  # per client


def test_the_upload_limit_covers_the_whole_request(auth_app):
    _, base = auth_app
    with httpx.Client(timeout=60) as client:
        assert log_in(client, base) == 200
        small = [("files", (f"f{i}.bin", b"x" * 300_000)) for i in range(2)]
        assert client.post(f"{base}/gradio_api/upload", files=small).status_code == 200
        many = [("files", (f"f{i}.bin", b"x" * 900_000)) for i in range(30)]  # each under 1 MB, 27 MB in all
        resp = client.post(f"{base}/gradio_api/upload", files=many)
        assert resp.status_code == 413 and "--max-upload-mb" in resp.json()["detail"]

        def chunks():  # a multipart body without Content-Length: counted as it arrives
            for i in range(30):
                yield (f'--b\r\nContent-Disposition: form-data; name="files"; filename="c{i}.bin"\r\n'
                       "Content-Type: application/octet-stream\r\n\r\n").encode() + b"y" * 900_000 + b"\r\n"
            yield b"--b--\r\n"

        resp = client.post(f"{base}/gradio_api/upload", content=chunks(), headers={"Content-Type": "multipart/form-data; boundary=b"})
        assert resp.status_code == 413, resp.text


def test_host_rule():
    rule = HostRule("127.0.0.1", ["proxy.example.org"], share_host=lambda: "abc.gradio.live")
    assert all(rule.allows(host_name(h)) for h in ("127.0.0.1:7860", "localhost", "[::1]:1", "proxy.example.org:443", "abc.gradio.live"))
    assert not any(rule.allows(host_name(h)) for h in (EVIL, "10.0.0.1", "localhost.attacker.example", "", None))
    wildcard = HostRule("0.0.0.0")
    assert wildcard.allows("10.0.0.1") and wildcard.allows(socket.gethostname().lower()) and not wildcard.allows(EVIL)


def test_known_browser_cookies_are_signed_with_the_workspace_key(tmp_path):
    from ot_gradio.ui.guard import KNOWN_BROWSER, RequestGuard, login_key
    from ot_gradio.ui.paths import PathRefused, check

    key = login_key(tmp_path)
    assert login_key(tmp_path) == key and len(key) == 32  # kept across restarts
    assert (tmp_path / ".login-key").stat().st_mode & 0o077 == 0
    with pytest.raises(PathRefused, match="hidden"):
        check(tmp_path / ".login-key", [tmp_path])
    guard, other = RequestGuard(None, HostRule("127.0.0.1"), key=key), RequestGuard(None, HostRule("127.0.0.1"))
    cookie = {"cookie": f"{KNOWN_BROWSER}=abc.{guard._sign('abc')}"}
    assert guard.browser_id(cookie) == "abc"
    assert other.browser_id(cookie) is None  # another key: a cookie made up by a client names no browser
    assert guard.browser_id({"cookie": f"{KNOWN_BROWSER}=abc.{'0' * 64}"}) is None


def test_origins_are_compared_whole():
    assert split_origin("http://127.0.0.1:7860") == ("http", "127.0.0.1", 7860)
    assert split_origin("https://abc.gradio.live") == ("https", "abc.gradio.live", 443)
    for bad in ("http://127.0.0.1:7860.attacker.example", "null", "http://127.0.0.1:7860/", "http://u@127.0.0.1", "file://x"):
        assert split_origin(bad) is None, bad
    assert split_host("127.0.0.1:7860.attacker.example") is None and split_host("[::1]:7860") == ("::1", 7860)
    assert exact_origin("http://127.0.0.1:7860", "127.0.0.1:7860") and exact_origin("https://abc.gradio.live", "abc.gradio.live")
    assert not exact_origin("http://localhost:7861", "localhost:7860") and not exact_origin("http://localhost:7860", "127.0.0.1:7860")


def test_an_empty_host_is_refused_and_forwarded_headers_need_a_trusted_proxy(monkeypatch):
    """`--host ""` let gradio take GRADIO_SERVER_NAME (0.0.0.0: every interface, no password)."""
    from ot_gradio.ui.launch import check_exposure

    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    for argv in (["--host", ""], ["--host", " ", "--auth", "me:pw"]):
        problem = check_exposure(args := build_parser().parse_args(argv), [("me", "pw")] if args.auth else [])
        assert problem and problem.startswith("--host: empty"), argv
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")  # uvicorn's default trusts any local program
    with gr.Blocks() as demo:
        gr.Markdown("x")
    launch_kwargs(build_parser().parse_args([]), [], demo, [])
    assert os.environ["FORWARDED_ALLOW_IPS"] == ""  # trusts no one
    launch_kwargs(build_parser().parse_args(["--trusted-proxy", "10.0.0.5", "--trusted-proxy", "10.1.0.0/16"]), [], demo, [])
    assert os.environ["FORWARDED_ALLOW_IPS"] == "10.0.0.5,10.1.0.0/16"


def test_allowed_host_flag_is_checked(tmp_path, capsys):
    from ot_gradio.ui.launch import main

    assert main(["--allowed-host", "http://", "--workspace", str(tmp_path)]) == 2
    assert "--allowed-host" in capsys.readouterr().err
    assert main(["--trusted-proxy", "proxy.example", "--workspace", str(tmp_path)]) == 2
    assert "--trusted-proxy" in capsys.readouterr().err
    assert build_parser().parse_args(["--allowed-host", "a.example", "--allowed-host", "b"]).allowed_host == ["a.example", "b"]
