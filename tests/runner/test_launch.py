"""Processes are started only through runner/launch.py, with the environment every child needs."""

import ast
import os
import sys
import time
from pathlib import Path

from ot_gradio.runner.launch import PACKAGE_ROOT, module_command, run_child, start_child, stop_child

PACKAGE = Path(__file__).resolve().parents[2] / "ot_gradio"
LAUNCHER = PACKAGE / "runner" / "launch.py"
STARTS = {("subprocess", name) for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput",
                                            "getstatusoutput")}
STARTS |= {("os", name) for name in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
                                     "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
                                     "spawnve", "spawnl", "spawnle")}
STARTS |= {("multiprocessing", "Process"), ("pty", "spawn")}


def _starts(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls of a process-starting function, written `module.name(...)` or imported by name."""
    imported = {alias.asname or alias.name: (node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            key = (func.value.id, func.attr)
        elif isinstance(func, ast.Name) and func.id in imported:
            key = imported[func.id]
        else:
            continue
        if key in STARTS:
            found.append((node.lineno, ".".join(key)))
    return found


def test_only_the_launcher_starts_processes():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} calls {name}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != LAUNCHER
             for line, name in _starts(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == [], "start processes through ot_gradio/runner/launch.py (start_child, run_child):\n" + "\n".join(found)
    assert _starts(ast.parse("import subprocess\nfrom os import execve\nsubprocess.Popen(['x'])\nexecve('x', [], {})"))


def test_a_child_imports_the_package_from_any_folder_in_its_own_session_with_its_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "")
    log = tmp_path / "child.log"
    log.write_text("before\n")
    script = "import os, ot_gradio; print(os.getsid(0) == os.getpid(), os.getcwd())"
    proc = start_child([sys.executable, "-c", script], log=log, env={"OT_TEST_EXTRA": "1"})
    assert proc.wait(timeout=60) == 0
    assert log.read_text().split("\n")[:2] == ["before", f"True {tmp_path}"]

    out = run_child([sys.executable, "-c", "import os, sys; print(sys.stdin.read(), os.environ['PYTHONPATH'])"], "hi", 60)
    assert out.returncode == 0 and out.stdout.split() == ["hi", PACKAGE_ROOT]
    assert run_child([sys.executable, "-c", "import time; time.sleep(30)"], "", 0.5) is None
    assert module_command("ot_gradio", "presets") == [sys.executable, "-m", "ot_gradio", "presets"]


def test_stop_child_stops_what_the_child_started(tmp_path):
    script = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print(p.pid, flush=True); time.sleep(60)")
    log = tmp_path / "log"
    proc = start_child([sys.executable, "-c", script], log=log)
    for _ in range(600):
        if log.read_text().strip() or proc.poll() is not None:
            break
        time.sleep(0.05)
    grandchild = int(log.read_text().split()[0])
    stop_child(proc, grace=5)
    assert proc.poll() is not None
    for _ in range(100):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        try:
            os.waitpid(grandchild, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        raise AssertionError(f"the grandchild {grandchild} still runs")
