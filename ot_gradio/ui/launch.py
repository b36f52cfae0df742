"""`python app.py` flags -> checks -> page -> launch. Binds 127.0.0.1 unless told otherwise, and
never exposes the page (share link or a non-loopback host) without a password."""

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
    p.add_argument("--workspace", default="workspace", help="folder for runs (default ./workspace)")
    p.add_argument("--inbrowser", action="store_true", help="open the page in a browser")
    p.add_argument("--browse-root", action="append", default=[], metavar="DIR",
                   help="a folder the page's file browser may show, besides the workspace, the current folder and the concept folders (repeatable)")
    p.add_argument("--max-upload-mb", type=float, default=100.0,
                   help="largest upload the page accepts in one request (all its files together), in MB (default 100; config imports and images are far smaller)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the page answers to besides its address and localhost, e.g. a reverse proxy's (repeatable); "
                        "requests naming another host are refused (DNS rebinding)")
    return p


def served_paths(workspace: str | os.PathLike, config: dict | None) -> list[str]:
    """What gradio may serve as files: the workspace and the configured dataset folders only (not
    the current folder, which may be a home directory holding keys and tokens)."""
    from .paths import allowed_roots  # noqa: PLC0415

    return [str(p) for p in allowed_roots(workspace, (), config)]


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
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
    """An error message if the page would be reachable by others without a password."""
    exposed = args.share or not is_loopback(args.host)
    if exposed and not auth and not args.insecure:
        what = "--share" if args.share else f"--host {args.host}"
        return (
            f"refusing to start with {what} and no password: anyone who finds the page can run code on this machine.\n"
            "Set one with --auth USER:PASSWORD or --auth-file FILE (one USER:PASSWORD per line).\n"
            "(--insecure starts anyway; do not use it on a shared network.)"
        )
    return None


def launch_kwargs(args: argparse.Namespace, auth: list[tuple[str, str]], demo, served: list[str]) -> dict:
    """What `demo.launch` gets: the request guard (Host/Origin checks, whole-request size limit,
    login rate limit; guard.py) goes in as FastAPI middleware, so it sees every route. No
    OpenAPI schema (it answered without login), no static-file workers or Node front (they would
    serve requests past the guard)."""
    from starlette.middleware import Middleware  # noqa: PLC0415

    from .guard import HostRule, RequestGuard, host_name  # noqa: PLC0415

    hosts = HostRule(args.host, args.allowed_host, share_host=lambda: host_name(getattr(demo, "share_url", None)))
    max_body = int(args.max_upload_mb * 1024 * 1024) + 64 * 1024  # room for the multipart headers
    return dict(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        auth=auth or None,
        inbrowser=args.inbrowser,
        show_error=True,
        allowed_paths=served,
        max_file_size=int(args.max_upload_mb * 1024 * 1024),
        app_kwargs={"middleware": [Middleware(RequestGuard, hosts=hosts, max_body=max_body)], "openapi_url": None},
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

    from .page import CSS, Page  # noqa: PLC0415
    from .state import load_ui_config  # noqa: PLC0415

    cwd = Path.cwd()
    roots = ([] if cwd == Path(cwd.anchor) else [cwd]) + [Path(r) for r in args.browse_root]
    page = Page(Path(args.workspace), roots=roots)
    demo = page.blocks
    _patient_localhost_check()
    # gradio queues by default; another .queue() would build the whole app once more (0.3-0.4 s)
    demo.launch(css=CSS, **launch_kwargs(args, auth, demo, served_paths(args.workspace, load_ui_config(page.workspace))))
    return 0
