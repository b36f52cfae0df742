"""A local stand-in for Civitai's site API, so tests download a model the way the trainer does from
civitai.com, with no network: `CIVITAI_ENDPOINT=<url>` in the downloading process.

It answers what a download asks, in the shapes Civitai's API reference gives
(https://developer.civitai.com/site/reference/model-versions): a model's record with its versions
newest first (`/api/v1/models/<id>`), a version's record with its files, sizes and SHA-256
(`/api/v1/model-versions/<id>`), and each file's download link (`/api/download/models/<version>`),
which wants `Authorization: Bearer <key>` (401 without, as Civitai answers) and redirects with a
307 to a signed link on another host (`localhost` where the API is `127.0.0.1`), which serves the
bytes with Range support and refuses a request that still carries the key. Every request is
recorded in `requests` as (method, path, Authorization header, Range header)."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


@dataclass
class Version:
    id: int
    model_id: int
    files: dict[str, Path]  # name -> its bytes' file; the first is the primary
    base_model: str = "SD 1.5"
    model_type: str = "Checkpoint"
    fp: dict[str, str] = field(default_factory=dict)  # name -> its metadata's fp
    sha256: dict[str, str] = field(default_factory=dict)  # name -> a SHA-256 to list instead of the true one


class FakeCivitai:
    def __init__(self, versions: list[Version], key: str = "civitai-key"):
        self.versions = {v.id: v for v in versions}
        self.key = key
        self.requests: list[tuple[str, str, str | None, str | None]] = []
        self.cut_after: int | None = None  # serve a file only up to this many bytes, then close (a broken download)
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                site._answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self.storage = f"http://localhost:{port}"  # another origin: a client must not send the key there
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeCivitai:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def downloads(self) -> list[tuple[str, str | None]]:
        """(path, Range) of each request for a file's bytes."""
        return [(path, rng) for _, path, _, rng in self.requests if path.startswith("/storage/")]

    def _record(self, version: Version) -> dict:
        files = []
        for index, (name, path) in enumerate(version.files.items()):
            data = path.read_bytes()
            fmt = "SafeTensor" if name.endswith(".safetensors") else "PickleTensor"
            files.append({"id": version.id * 10 + index, "name": name, "type": "Model", "sizeKB": len(data) / 1024,
                          "metadata": {"format": fmt, "size": "pruned", "fp": version.fp.get(name, "fp16")},
                          "hashes": {"SHA256": version.sha256.get(name, hashlib.sha256(data).hexdigest()).upper()},
                          "downloadUrl": f"{self.url}/api/download/models/{version.id}?type=Model&format={fmt}"
                                         + (f"&fp={version.fp[name]}" if name in version.fp else ""),
                          "primary": index == 0})
        return {"id": version.id, "modelId": version.model_id, "name": f"v{version.id}", "baseModel": version.base_model,
                "status": "Published", "model": {"name": f"model {version.model_id}", "type": version.model_type},
                "files": files, "downloadUrl": f"{self.url}/api/download/models/{version.id}"}

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        auth = handler.headers.get("Authorization")
        self.requests.append((handler.command, path, auth, handler.headers.get("Range")))
        segments = [p for p in path.split("/") if p]
        if segments[:3] == ["api", "v1", "models"] and len(segments) == 4:
            versions = sorted((v for v in self.versions.values() if v.model_id == int(segments[3])), key=lambda v: -v.id)
            if not versions:
                return self._send(handler, 404, b'{"error": "No model with id"}')
            body = {"id": int(segments[3]), "modelVersions": [self._record(v) for v in versions]}
            return self._send(handler, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})
        if segments[:3] == ["api", "v1", "model-versions"] and len(segments) == 4:
            version = self.versions.get(int(segments[3]))
            if version is None:
                return self._send(handler, 404, b'{"error": "Model not found"}')
            return self._send(handler, 200, json.dumps(self._record(version)).encode(), {"Content-Type": "application/json"})
        if segments[:3] == ["api", "download", "models"] and len(segments) == 4:
            version = self.versions.get(int(segments[3]))
            if version is None:
                return self._send(handler, 404, b"")
            if auth != f"Bearer {self.key}":
                return self._send(handler, 401, b'{"error": "Unauthorized"}', {"Content-Type": "application/json"})
            names = [n for n in version.files if (query.get("fp") is None or version.fp.get(n) == query["fp"])
                     and (query.get("format") is None or n.endswith(".safetensors") == (query["format"] == "SafeTensor"))]
            location = f"{self.storage}/storage/{version.id}/{names[0]}?X-Amz-Signature=abc"
            return self._send(handler, 307, b"", {"Location": location})
        if segments[:1] == ["storage"] and len(segments) == 3:
            version = self.versions.get(int(segments[1]))
            if version is None or segments[2] not in version.files:
                return self._send(handler, 404, b"")
            if auth is not None:  # a signed link refuses a second way of signing in, as S3 does
                return self._send(handler, 400, b"Only one auth mechanism allowed")
            data = version.files[segments[2]].read_bytes()
            start = int(handler.headers["Range"].split("=")[1].split("-")[0]) if handler.headers.get("Range") else 0
            headers = {"Content-Type": "application/octet-stream", "Content-Disposition": f'attachment; filename="{segments[2]}"'}
            status = 206 if start else 200
            if start:
                if start >= len(data):
                    return self._send(handler, 416, b"")
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            if self.cut_after is not None:  # the header promises everything; the connection closes early
                handler.send_response(status)
                for key, value in headers.items():
                    handler.send_header(key, value)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body[: self.cut_after])
                handler.wfile.flush()
                handler.close_connection = True
                return None
            return self._send(handler, status, body, headers)
        return self._send(handler, 404, b"")

    @staticmethod
    def _send(handler, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
