"""What every request to the page passes before gradio sees it (an ASGI middleware).

- Host: only the address the page is bound to, localhost / 127.0.0.1 / [::1] (any port), the share
  link's host and --allowed-host names. A web page elsewhere that rebinds its own name to
  127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused (403) on every route.
- Origin: a request that changes something (POST, PUT, PATCH, DELETE, a websocket) from a browser
  carries its page's origin; one from another origin is refused (403). Origins are compared whole:
  scheme http(s), an allowed host and the port the request came to (another program's page on
  localhost:3000 is another origin), parsed strictly (no "127.0.0.1:7860.attacker.example").
  No Origin (curl, scripts) is allowed: it cannot come from another site's page.
- CORS: only the page's own origin (`exact_origin`; gradio's own rule echoed any localhost origin
  with credentials: launch.py replaces it).
- Files: the secrets file (by name, anywhere) and hidden files and folders below a served root
  are never served, whatever gradio's allowed_paths say.
- Login (when a password is set): a client's wrong passwords make it wait, longer each time
  (1 s after the third, doubling to a minute), one attempt at a time; early tries get 429. The
  client is the connection's address (X-Forwarded-For counts only from a --trusted-proxy: launch.py
  tells uvicorn), or, for a browser that has logged in before, that browser (a signed cookie set
  at each login): an attacker retrying behind the same tunnel or proxy never delays its owner.
  Of gradio's API only what the login page reads answers without a login (gradio left its
  heartbeat and run history open).
- Size: the whole request body is limited (--max-upload-mb; gradio's own limit is per file).
No gradio or torch imports: launch.py hands it to gradio through `app_kwargs["middleware"]`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

from .paths import SECRET_NAMES, private_part, root_of

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
WILDCARDS = {"", "0.0.0.0", "::"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE"}
LOGIN_PATHS = ("/login", "/login/")
API = "/gradio_api/"
# Of gradio's API, what answers without a login: what its login page reads (login state, app id,
# theme) and startup-events, which launch() itself calls without a login (it runs the start-up
# once, then answers "false"). Gradio also left the heartbeat and the run history page open.
OPEN_API = {"login_check", "user", "token", "app_id", "theme.css", "startup-events"}
FILE_ROUTES = ("file=", "file/")  # gradio's /gradio_api/file=PATH and its older /file/PATH
KNOWN_BROWSER = "ot-known-browser"  # the cookie naming a browser that has logged in before
_NAME = r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)"
_HOST = re.compile(_NAME + r"(?::([0-9]{1,5}))?")
_ORIGIN = re.compile(r"(https?)://" + _NAME + r"(?::([0-9]{1,5}))?")


def split_host(value: str | None) -> tuple[str, int | None] | None:
    """(name, port) of a Host header ("h", "h:1", "[::1]:1"), lower case, without brackets; None
    for anything else ("127.0.0.1:7860.attacker.example" is not a host)."""
    match = _HOST.fullmatch((value or "").strip().lower())
    return (match[1].strip("[]"), int(match[2]) if match[2] else None) if match else None


def split_origin(value: str | None) -> tuple[str, str, int] | None:
    """(scheme, name, port) of an Origin header, the port filled in from the scheme; None for
    anything that is not exactly scheme://host[:port] ("null", a path, userinfo, a bad port)."""
    match = _ORIGIN.fullmatch((value or "").strip().lower())
    if not match:
        return None
    return match[1], match[2].strip("[]"), int(match[3]) if match[3] else (443 if match[1] == "https" else 80)


def host_name(value: str | None) -> str | None:
    """The host of a Host header, an Origin or a URL ("http://h:1/x"), lower case, without port
    or brackets; None if it does not parse whole (a port that is not a number included)."""
    if not value:
        return None
    text = value.strip().lower()
    if "://" not in text:
        text = "//" + text
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for "h:7860.attacker.example"
        name = parts.hostname
    except ValueError:
        return None
    return name or None


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class HostRule:
    """Which host names may reach the page: see the module docstring. Bound to every interface
    (0.0.0.0, ::) the page also answers to any IP address (a rebinding attack needs a name, not
    an address) and to this machine's own names."""

    def __init__(self, bound: str, allowed: Iterable[str] = (), share_host: Callable[[], str | None] = lambda: None):
        bound = (host_name(bound) or "") if bound not in WILDCARDS else bound
        self.any_ip = bound in WILDCARDS
        self.names = set(LOCAL_NAMES) | {h for h in (host_name(a) for a in allowed) if h}
        if bound and not self.any_ip:
            self.names.add(bound)
        if self.any_ip:
            for own in (socket.gethostname(), socket.getfqdn()):
                if own:
                    self.names.add(own.lower())
        self.share_host = share_host

    def allows(self, name: str | None) -> bool:
        if not name:
            return False
        if name in self.names or (self.any_ip and is_ip(name)):
            return True
        share = self.share_host()
        return bool(share) and name == share.lower()


@dataclass
class _Client:
    failures: int = 0
    next_try: float = 0.0
    busy: bool = False
    seen: float = field(default_factory=time.monotonic)


class LoginLimiter:
    """Per client: `free` wrong passwords without delay, then a wait of 1 s doubling up to `cap`
    before the next try is answered; one try at a time. A right password clears the count."""

    def __init__(self, free: int = 2, cap: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.free, self.cap, self.clock = free, cap, clock
        self.clients: dict[str, _Client] = {}

    def delay(self, failures: int) -> float:
        return 0.0 if failures <= self.free else min(2.0 ** (failures - self.free - 1), self.cap)

    def begin(self, client: str) -> float:
        """0 if this try may go ahead (and marks it in flight), else the seconds to wait."""
        now = self.clock()
        if len(self.clients) > 10_000:  # forget clients quiet for an hour
            self.clients = {k: c for k, c in self.clients.items() if now - c.seen < 3600 or c.busy}
        state = self.clients.setdefault(client, _Client(seen=now))
        if state.busy:
            return max(1.0, state.next_try - now)
        if now < state.next_try:
            return state.next_try - now
        state.busy, state.seen = True, now
        return 0.0

    def end(self, client: str, ok: bool) -> None:
        state = self.clients.setdefault(client, _Client())
        state.busy, state.seen = False, self.clock()
        state.failures = 0 if ok else state.failures + 1
        state.next_try = state.seen + (0.0 if ok else self.delay(state.failures))


class BodyTooLarge(Exception):
    pass


def exact_origin(origin: str | None, host: str | None) -> bool:
    """`origin` names exactly the host and port the request was sent to (the Host header): the
    only origin gradio's CORS headers may name (launch.py puts this in gradio's place)."""
    parsed, to = split_origin(origin), split_host(host)
    return parsed is not None and to is not None and (parsed[1], parsed[2]) == (to[0], to[1] or parsed[2])


async def _reply(send, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def login_key(workspace: str | os.PathLike) -> bytes:
    """The key signing the known-browser cookies, kept in the workspace (a hidden file, mode 0600:
    never listed or served), so a browser stays known across restarts."""
    path = Path(workspace) / ".login-key"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".login-key.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    os.replace(tmp, path)
    return key


class RequestGuard:
    """The ASGI middleware. `hosts` decides Host and Origin; `max_body` (bytes, None = no limit)
    bounds a whole request; `limiter` rate-limits logins; `served` are the roots gradio serves
    files from (their hidden files are refused); `key` signs the known-browser cookies."""

    def __init__(self, app, hosts: HostRule, max_body: int | None = None, limiter: LoginLimiter | None = None,
                 served: Iterable[str | os.PathLike] = (), key: bytes | None = None):
        self.app, self.hosts, self.max_body = app, hosts, max_body
        self.limiter = limiter or LoginLimiter()
        self.served = [Path(p).resolve() for p in served]
        self.key = key or secrets.token_bytes(32)

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        problem = self.refusal(kind, scope.get("method", "GET"), headers) or self.file_refusal(scope.get("path", ""))
        if problem:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": problem[:120]})
            else:
                await _reply(send, 403, problem)
            return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if API in path and path.split(API, 1)[1].strip("/") not in OPEN_API and not self.logged_in(scope, headers):
            await _reply(send, 401, "Not authenticated: log in first.")
            return
        if self.max_body is not None:
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > self.max_body:
                await _reply(send, 413, self.too_large())
                return
            receive = self._counted(receive)
        if scope.get("method") == "POST" and path.endswith(LOGIN_PATHS) and self._auth(scope):
            await self._login(scope, receive, send, headers)
            return
        await self._run(scope, receive, send)

    # --- checks ---------------------------------------------------------------------------------
    def refusal(self, kind: str, method: str, headers: dict[str, str]) -> str | None:
        host = headers.get("host")
        if not self.hosts.allows((split_host(host) or ("",))[0]):
            return (f"Host {host!r} is not this page's address; refused (DNS rebinding?). "
                    "Behind a reverse proxy, start the page with --allowed-host NAME.")
        origin = headers.get("origin")
        if origin is not None and (kind == "websocket" or method.upper() not in SAFE_METHODS):
            if not self.same_origin(origin, host):
                return f"Origin {origin!r} is not this page's origin; refused."
        return None

    def same_origin(self, origin: str, host: str | None) -> bool:
        """`origin` is the page's own: http(s), an allowed host, and the port of the Host the
        request came to (a Host without one: the origin scheme's default, as behind a proxy)."""
        parsed, to = split_origin(origin), split_host(host)
        if parsed is None or to is None or not self.hosts.allows(parsed[1]):
            return False
        return parsed[2] == (to[1] or parsed[2])

    def file_refusal(self, path: str) -> str | None:
        """Why gradio must not serve the file this request path names (None: gradio decides)."""
        route = path.split(API, 1)[1] if API in path else path.lstrip("/")
        if not route.startswith(FILE_ROUTES):
            return None
        wanted = route[len(FILE_ROUTES[0]):]
        if any(name in SECRET_NAMES for name in wanted.replace("\\", "/").split("/")):
            return "The secrets file is never served."
        try:
            resolved = Path(wanted).resolve()
        except (OSError, ValueError, RuntimeError):
            return "Not a file this page serves."
        root = root_of(resolved, self.served)
        if root is not None and private_part(resolved, root) is not None:
            return "Hidden and secret files are never served."
        return None

    def browser_id(self, headers: dict[str, str]) -> str | None:
        """The id in a valid known-browser cookie (signed with this app's key), else None."""
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header names no browser
            return None
        morsel = cookies.get(KNOWN_BROWSER)
        ident, _, sig = (morsel.value if morsel is not None else "").partition(".")
        if ident and hmac.compare_digest(sig, self._sign(ident)):
            return ident
        return None

    def _sign(self, ident: str) -> str:
        return hmac.new(self.key, ident.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def _auth(scope) -> bool:
        app = scope.get("app")
        return getattr(app, "auth", None) is not None or getattr(app, "auth_dependency", None) is not None

    def logged_in(self, scope, headers: dict[str, str]) -> bool:
        app = scope.get("app")
        if not self._auth(scope):
            return True
        if getattr(app, "auth_dependency", None) is not None:
            return True  # the app's own dependency decides on its routes
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header is no login
            return False
        cookie_id = getattr(app, "cookie_id", "")
        tokens = getattr(app, "tokens", {}) or {}
        for name in (f"access-token-{cookie_id}", f"access-token-unsecure-{cookie_id}"):
            morsel = cookies.get(name)
            if morsel is not None and morsel.value in tokens:
                return True
        return False

    def too_large(self) -> str:
        return (f"Request too large: the page accepts at most {self.max_body / 1024 / 1024:.1f} MB in one request. Upload fewer "
                "files at a time, or start the app with a larger --max-upload-mb.")

    def _counted(self, receive):
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise BodyTooLarge
            return message

        return counted

    async def _run(self, scope, receive, send) -> int:
        status = 0

        async def tracked(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except BodyTooLarge:
            if status:
                raise
            await _reply(send, 413, self.too_large())
            return 413
        return status

    async def _login(self, scope, receive, send, headers: dict[str, str]) -> None:
        known = self.browser_id(headers)
        client = f"browser {known}" if known else f"address {(scope.get('client') or ('?', 0))[0]}"
        wait = self.limiter.begin(client)
        if wait > 0:
            await _reply(send, 429, f"Too many wrong passwords: try again in {wait:.0f} s.",
                         [(b"retry-after", str(max(1, round(wait))).encode())])
            return
        ident = known or secrets.token_hex(16)
        cookie = (f"{KNOWN_BROWSER}={ident}.{self._sign(ident)}; Path=/; Max-Age=31536000; HttpOnly; "
                  "SameSite=Strict").encode()

        async def remembered(message):  # a right password: this browser is known from now on
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        status = 500
        try:
            status = await self._run(scope, receive, remembered)
        finally:
            self.limiter.end(client, 200 <= status < 400)
