"""A local stand-in for the Hugging Face hub's HTTP API, serving folders as model repos, so tests
can load a hub id through huggingface_hub's and diffusers' real download code with no network:
`HF_ENDPOINT=<url>` in the loading process.

It answers what a model download asks: the repo's info (`/api/models/<repo>[/revision/<rev>]`),
its file tree (`/api/models/<repo>/tree/<rev>[/<path>]`) and each file (`HEAD`/`GET
/<repo>/resolve/<rev>/<path>`, with the commit and ETag headers the client checks); every request
is recorded in `requests`. A gated repo's files come only with its token, as the hub answers a
user not granted access (401, `GatedRepo`; its info and file list stay public). Anything else is a 404."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "1" * 40


class FakeHub:
    def __init__(self, repos: dict[str, Path], gated: dict[str, str] | None = None):
        """`gated`: repo -> the token it answers (as `Authorization: Bearer <token>`); without it, 401."""
        self.repos = {name: Path(folder) for name, folder in repos.items()}
        self.gated = dict(gated or {})
        self.requests: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []  # requests to a gated repo without its token
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> list[str]:
        root = self.repos[repo]
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def _repo_and_rest(self, path: str) -> tuple[str | None, str]:
        for repo in self.repos:
            if path == repo or path.startswith(repo + "/"):
                return repo, path[len(repo):].lstrip("/")
        return None, ""

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        self.requests.append((handler.command, path))
        repo, rest = self._repo_and_rest(path.lstrip("/"))  # a file: as on the hub, a gated repo's info and file list are public
        if repo in self.gated and rest.startswith("resolve/") and handler.headers.get("Authorization") != f"Bearer {self.gated[repo]}":
            self.refused.append((handler.command, path))
            message = json.dumps({"error": f"Access to model {repo} is restricted. You must have access to it and be authenticated."})
            return self._send(handler, 401, message.encode(), body, {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"})
        if path.startswith("/api/models/"):
            repo, rest = self._repo_and_rest(path[len("/api/models/"):])
            if repo is None:
                return self._send(handler, 404, b'{"error": "Repository not found"}', body)
            if rest.startswith("tree/"):
                prefix = rest.split("/", 2)[2] if rest.count("/") >= 2 else ""
                root = self.repos[repo]
                entries = [{"type": "file", "path": name, "size": (root / name).stat().st_size, "oid": self._etag(root / name)}
                           for name in self.files(repo) if not prefix or name.startswith(prefix.rstrip("/") + "/")]
                return self._send(handler, 200, json.dumps(entries).encode(), body)
            info = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "disabled": False, "gated": False,
                    "siblings": [{"rfilename": name} for name in self.files(repo)], "tags": [], "downloads": 0, "likes": 0}
            return self._send(handler, 200, json.dumps(info).encode(), body)
        repo, rest = self._repo_and_rest(path.lstrip("/"))
        if repo is not None and rest.startswith("resolve/"):
            name = rest.split("/", 2)[2]
            file = self.repos[repo] / name
            if file.is_file():
                headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{self._etag(file)}"'}
                return self._send(handler, 200, file.read_bytes(), body, headers)
            return self._send(handler, 404, b"", body, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        return self._send(handler, 404, b"", body)

    @staticmethod
    def _etag(file: Path) -> str:
        return hashlib.sha1(file.read_bytes()).hexdigest()

    @staticmethod
    def _send(handler, status: int, data: bytes, body: bool, headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)
