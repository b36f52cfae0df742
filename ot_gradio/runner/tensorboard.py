"""TensorBoard for the run on screen, as a child process of the app started through launch.py
(never imported: the page process stays free of torch and TensorFlow). Started when a run starts or the page reattaches
to one, stopped when the run ends (unless 'TensorBoard always on') and when the app exits."""

from __future__ import annotations

import atexit
import subprocess
import threading
from pathlib import Path
from typing import Any

from .launch import module_command, start_child, stop_child

DEFAULT_PORT = 6006


def settings(config: dict[str, Any]) -> tuple[bool, int, str, bool]:
    """(on, port, host, always on) from a config dict; 'expose' binds every interface."""
    port = config.get("tensorboard_port") or DEFAULT_PORT
    try:
        port = int(port)
    except (TypeError, ValueError):
        port = DEFAULT_PORT
    host = "0.0.0.0" if config.get("tensorboard_expose") else "127.0.0.1"
    return bool(config.get("tensorboard")), port, host, bool(config.get("tensorboard_always_on"))


def command(logdir: Path, port: int, host: str) -> list[str]:
    return [*module_command("tensorboard.main"), "--logdir", str(logdir), "--port", str(port), "--host", host]


class TensorBoard:
    """At most one TensorBoard process; `ensure` (re)starts it only when its logdir, port or
    host change, so the page's poll may call it every tick."""

    def __init__(self, log_file: Path | None = None):
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None
        self.key: tuple[str, int, str] | None = None
        self._lock = threading.Lock()
        self._registered = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def logdir(self) -> str | None:
        return self.key[0] if self.key and self.running else None

    def url(self) -> str | None:
        if not self.key:
            return None
        return f"http://127.0.0.1:{self.key[1]}/"

    def ensure(self, logdir: Path, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
        key = (str(Path(logdir).resolve()), int(port), host)
        with self._lock:
            if self.key == key and self.proc is not None:
                return self.url() or ""  # running, or exited (the footer says so): no restart loop
            self._stop_locked()
            Path(logdir).mkdir(parents=True, exist_ok=True)
            self.proc = start_child(command(Path(key[0]), port, host), log=self.log_file)
            self.key = key
            if not self._registered:
                atexit.register(self.stop)
                self._registered = True
            return self.url() or ""

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        proc, self.proc, self.key = self.proc, None, None
        if proc is not None:
            stop_child(proc)

    def status_markdown(self) -> str:
        if self.proc is None or self.key is None:
            return ""
        if self.proc.poll() is not None:
            where = f" (see `{self.log_file}`)" if self.log_file else ""
            return f"TensorBoard exited with code {self.proc.returncode}{where}: is port {self.key[1]} taken?"
        url = self.url()
        note = f" · listening on every interface, port {self.key[1]}" if self.key[2] != "127.0.0.1" else ""
        # a share link carries the page only: through it, or in Colab, 127.0.0.1 is the viewer's own computer
        return (f"[Open TensorBoard]({url}) (`{url}`){note} · it opens on the machine that runs the app: a share link "
                "or Colab does not carry it (the charts above show the same loss)")

    def serving(self, logdir: Path) -> bool:
        return self.key is not None and self.key[0] == str(Path(logdir).resolve())

    def sync(self, config: dict[str, Any], run_path: Path | None, run_alive: bool) -> str:
        """Follow the config of the run on screen: TensorBoard on the run's tensorboard folder
        while it runs, stopped when it ends; with 'always on', on the folder of every run (so
        switching runs needs no restart) and kept running. A page still showing an older run
        never stops the TensorBoard of another one. Returns the footer's text."""
        if run_path is not None:
            on, port, host, always = settings(config)
            logdir = Path(run_path).parent if always else Path(run_path) / "tensorboard"
            if on and (run_alive or always):
                self.ensure(logdir, port, host)
            elif self.serving(logdir):
                self.stop()
        return self.status_markdown()
