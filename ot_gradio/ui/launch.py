"""`python app.py` flags -> checks -> page -> launch. Binds 127.0.0.1 unless told otherwise, and
never exposes the page (share link or a non-loopback host) without a password.

The page's folders are fixed here, at start-up: the workspace, the folder the app is started in
and each --browse-root (ui/paths.py). Gradio serves files from the workspace and the
--browse-root folders only (not the start folder, which may be a home folder), never the
secrets file nor hidden files (ui/guard.py)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from pathlib import Path


def in_notebook() -> bool:
    if "google.colab" in sys.modules or os.environ.get("COLAB_RELEASE_TAG"):
        return True
    try:
        from IPython import get_ipython  # noqa: PLC0415

        shell = get_ipython()
        return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"
    except Exception:  # noqa: BLE001
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python app.py", description="Start the ot_gradio page.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--share", action="store_true", help="create a public gradio.live link (needs --auth or --auth-file)")
    p.add_argument("--auth", help="USER:PASSWORD required to open the page")
    p.add_argument("--auth-file", help="file with one USER:PASSWORD per line")
    p.add_argument("--insecure", action="store_true", help="allow --share or a public --host without a password (anyone with the link controls this machine)")
    p.add_argument("--workspace", default="workspace", help="the page's folder: its saved form, uploads, secrets, and the runs of a config whose Workspace folder is blank; a config's Workspace folder (General tab) holds its runs (default ./workspace)")
    p.add_argument("--inbrowser", action="store_true", help="open the page in a browser")
    p.add_argument("--browse-root", action="append", default=[], metavar="DIR",
                   help="a folder the page may browse, read, write and show images from, besides the workspace and the current folder, "
                        "e.g. where your datasets are (repeatable); a concept folder typed in the page is trained on but not browsed")
    p.add_argument("--max-upload-mb", type=float, default=1024.0,
                   help="largest upload the page accepts in one request (all its files together: a dataset's images "
                        "or its .zip), in MB (default 1024); with --auth only a logged-in browser may upload")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the page answers to besides its address and localhost, e.g. a reverse proxy's (repeatable); "
                        "requests naming another host are refused (DNS rebinding)")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="IP",
                   help="the address of a reverse proxy in front of the page whose X-Forwarded-For header names the real client "
                        "(repeatable; default none: forwarded headers are ignored, so no one can pick their own address to dodge the login limit)")
    return p


def served_paths(workspace: str | os.PathLike, browse_roots: list[str] | tuple = ()) -> list[str]:
    """What gradio may serve as files: the workspace and the --browse-root folders, fixed at
    start-up (not the current folder, which may be a home directory holding keys and tokens,
    nor a concept folder typed in the page)."""
    from .paths import allowed_roots  # noqa: PLC0415

    return [str(p) for p in allowed_roots(workspace, browse_roots)]


def blocked_paths(workspace: str | os.PathLike) -> list[str]:
    """Files gradio must never serve whatever else allows them: the workspace's secrets file
    (the guard also refuses it by name anywhere, and every hidden file below a served root)."""
    from ..secrets import secrets_path  # noqa: PLC0415

    return [str(secrets_path(Path(workspace).resolve()))]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_address(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
        return True
    except ValueError:
        return False


def read_auth(args: argparse.Namespace) -> list[tuple[str, str]]:
    pairs: list[str] = []
    if args.auth:
        pairs.append(args.auth)
    if args.auth_file:
        path = Path(args.auth_file)
        if not path.is_file():
            raise SystemExit(f"--auth-file: {path} does not exist")
        pairs += [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    out = []
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user or not password:
            raise SystemExit("--auth: use USER:PASSWORD (both non-empty)")
        out.append((user, password))
    return out


def check_exposure(args: argparse.Namespace, auth: list[tuple[str, str]]) -> str | None:
    """An error message if the page would be reachable by others without a password, or if
    where it listens is not said (an empty --host: gradio would take GRADIO_SERVER_NAME, e.g.
    0.0.0.0, every interface)."""
    if not args.host.strip():
        return ("--host: empty; give the address to listen on: 127.0.0.1 (this machine only, the default) "
                "or e.g. 0.0.0.0 (every interface; needs --auth USER:PASSWORD)")
    exposed = args.share or not is_loopback(args.host)
    if exposed and not auth and not args.insecure:
        what = "--share" if args.share else f"--host {args.host}"
        return (
            f"refusing to start with {what} and no password: anyone who finds the page can run code on this machine.\n"
            "Set one with --auth USER:PASSWORD or --auth-file FILE (one USER:PASSWORD per line).\n"
            "(--insecure starts anyway; do not use it on a shared network.)"
        )
    return None


def launch_kwargs(args: argparse.Namespace, auth: list[tuple[str, str]], demo, served: list[str],
                  key: bytes | None = None) -> dict:
    """What `demo.launch` gets: the request guard (Host/Origin checks, whole-request size limit,
    login rate limit, files never served; guard.py) goes in as FastAPI middleware, so it sees
    every route. No OpenAPI schema (it answered without login), no static-file workers or Node
    front (they would serve requests past the guard). uvicorn takes X-Forwarded-For only from a
    --trusted-proxy (by default it trusts any local program, which could then pick its address)."""
    from starlette.middleware import Middleware  # noqa: PLC0415

    from .guard import HostRule, RequestGuard, host_name  # noqa: PLC0415

    os.environ["FORWARDED_ALLOW_IPS"] = ",".join(args.trusted_proxy)  # read by uvicorn.Config; "" trusts none
    _own_origin_cors()
    hosts = HostRule(args.host, args.allowed_host, share_host=lambda: host_name(getattr(demo, "share_url", None)))
    max_body = int(args.max_upload_mb * 1024 * 1024) + 64 * 1024  # room for the multipart headers
    guard = Middleware(RequestGuard, hosts=hosts, max_body=max_body, served=served, key=key)
    return dict(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        auth=auth or None,
        inbrowser=args.inbrowser,
        show_error=True,
        allowed_paths=served,
        blocked_paths=blocked_paths(args.workspace),
        max_file_size=int(args.max_upload_mb * 1024 * 1024),
        app_kwargs={"middleware": [guard], "openapi_url": None},
        num_workers=0,
        ssr_mode=False,
    )


def _patient_localhost_check() -> None:
    """Gradio checks that the page answers on localhost with one 3-second request and, when
    that times out (a busy machine, a big page), refuses to start without a share link. Wait
    for up to five minutes instead: the server is local and already running."""
    import time  # noqa: PLC0415

    import gradio.blocks  # noqa: PLC0415
    import gradio.networking as networking  # noqa: PLC0415
    import httpx  # noqa: PLC0415

    def url_ok(url: str) -> bool:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                if httpx.head(url, timeout=10, verify=False).status_code in (200, 401, 301, 302, 303, 307, 308):
                    return True
            except (httpx.HTTPError, OSError):
                pass
            time.sleep(0.5)
        return False

    networking.url_ok = url_ok
    if hasattr(gradio.blocks, "networking"):
        gradio.blocks.networking.url_ok = url_ok


def _own_origin_cors() -> None:
    """Gradio's CORS middleware answers any origin on localhost, 127.0.0.1 or 0.0.0.0, whatever
    its port, with credentials: another program's page on this machine could read the page's
    answers. Only the page's own origin gets CORS headers (same-origin pages need none)."""
    from gradio import route_utils  # noqa: PLC0415

    from .guard import exact_origin  # noqa: PLC0415

    route_utils.CustomCORSMiddleware.is_valid_origin = lambda self, headers: exact_origin(headers.get("origin"), headers.get("host"))


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if in_notebook() and not any(a.startswith("--share") for a in (argv or [])):
        args.share = True
    auth = read_auth(args)
    problem = check_exposure(args, auth)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if (args.share or not is_loopback(args.host)) and not auth:
        print("WARNING: the page is exposed WITHOUT a password (--insecure).", file=sys.stderr)

    for root in args.browse_root:
        if not Path(root).is_dir():
            print(f"--browse-root: {root} is not a folder", file=sys.stderr)
            return 2
    for proxy in args.trusted_proxy:
        if not is_address(proxy):
            print(f"--trusted-proxy: {proxy!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24)", file=sys.stderr)
            return 2
    from .guard import host_name  # noqa: PLC0415

    for name in args.allowed_host:
        if not host_name(name):
            print(f"--allowed-host: {name!r} is not a host name", file=sys.stderr)
            return 2
    if args.max_upload_mb <= 0:
        print("--max-upload-mb: must be above 0", file=sys.stderr)
        return 2
    # SIGTERM (a service manager, `kill`) exits like Ctrl-C, so atexit stops TensorBoard.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    from .guard import login_key  # noqa: PLC0415
    from .page import CSS, Page  # noqa: PLC0415

    cwd = Path.cwd()
    roots = ([] if cwd == Path(cwd.anchor) else [cwd]) + [Path(r) for r in args.browse_root]
    page = Page(Path(args.workspace), roots=roots)
    demo = page.blocks
    _patient_localhost_check()
    # gradio queues by default; another .queue() would build the whole app once more (0.3-0.4 s)
    served = served_paths(args.workspace, args.browse_root)
    sys.stdout = OwnHints(sys.stdout)
    demo.launch(css=CSS, **launch_kwargs(args, auth, demo, served, login_key(page.workspace) if auth else None))
    return 0


GRADIO_SHARE_HINT = "To create a public link, set `share=True` in `launch()`."
SHARE_HINT = "For a share link, start with --share --auth USER:PASSWORD (a password is required)."


class OwnHints:
    """stdout with gradio's start-up hint for a share link (set `share=True` in `launch()`, which a
    user of this app cannot) said this app's way."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(text.replace(GRADIO_SHARE_HINT, SHARE_HINT))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
