"""What every request to the page passes before gradio sees it (an ASGI middleware).

- Host: only the address the page is bound to, localhost / 127.0.0.1 / [::1] (any port), the share
  link's host and --allowed-host names. A web page elsewhere that rebinds its own name to
  127.0.0.1 (DNS rebinding) sends its own name as Host, and is refused (403) on every route.
- Origin: a request that changes something (POST, PUT, PATCH, DELETE, a websocket) from a browser
  carries its page's origin; one from another site is refused (403). No Origin (curl, scripts) is
  allowed: it cannot come from another site's page.
- Login (when a password is set): a client's wrong passwords make it wait, longer each time
  (1 s after the third, doubling to a minute), one attempt at a time; early tries get 429.
  Of gradio's API only what the login page reads answers without a login (gradio left its
  heartbeat and run history open).
- Size: the whole request body is limited (--max-upload-mb; gradio's own limit is per file).
No gradio or torch imports: launch.py hands it to gradio through `app_kwargs["middleware"]`.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}
WILDCARDS = {"", "0.0.0.0", "::"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE"}
LOGIN_PATHS = ("/login", "/login/")
API = "/gradio_api/"
# Of gradio's API, what answers without a login: what its login page reads (login state, app id,
# theme) and startup-events, which launch() itself calls without a login (it runs the start-up
# once, then answers "false"). Gradio also left the heartbeat and the run history page open.
OPEN_API = {"login_check", "user", "token", "app_id", "theme.css", "startup-events"}


def host_name(value: str | None) -> str | None:
    """The host of a Host header or an Origin ("http://h:1"), lower case, without port or brackets."""
    if not value:
        return None
    text = value.strip().lower()
    if "://" not in text:
        text = "//" + text
    try:
        name = urlsplit(text).hostname
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


async def _reply(send, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """The ASGI middleware. `hosts` decides Host and Origin; `max_body` (bytes, None = no limit)
    bounds a whole request; `limiter` rate-limits logins."""

    def __init__(self, app, hosts: HostRule, max_body: int | None = None, limiter: LoginLimiter | None = None):
        self.app, self.hosts, self.max_body = app, hosts, max_body
        self.limiter = limiter or LoginLimiter()

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        problem = self.refusal(kind, scope.get("method", "GET"), headers)
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
            await self._login(scope, receive, send)
            return
        await self._run(scope, receive, send)

    # --- checks ---------------------------------------------------------------------------------
    def refusal(self, kind: str, method: str, headers: dict[str, str]) -> str | None:
        host = headers.get("host")
        if not self.hosts.allows(host_name(host)):
            return (f"Host {host!r} is not this page's address; refused (DNS rebinding?). "
                    "Behind a reverse proxy, start the page with --allowed-host NAME.")
        origin = headers.get("origin")
        if origin is not None and (kind == "websocket" or method.upper() not in SAFE_METHODS):
            if not self.hosts.allows(host_name(origin)) or origin.strip().lower() == "null":
                return f"Origin {origin!r} is another site; refused."
        return None

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
        return f"Request too large: the page accepts at most {self.max_body / 1024 / 1024:.1f} MB in one request (--max-upload-mb)."

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

    async def _login(self, scope, receive, send) -> None:
        client = (scope.get("client") or ("?", 0))[0]
        wait = self.limiter.begin(client)
        if wait > 0:
            await _reply(send, 429, f"Too many wrong passwords: try again in {wait:.0f} s.",
                         [(b"retry-after", str(max(1, round(wait))).encode())])
            return
        status = 500
        try:
            status = await self._run(scope, receive, send)
        finally:
            self.limiter.end(client, 200 <= status < 400)
