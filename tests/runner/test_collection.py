"""The garbage collector in a process that is one training run (runner/collection.py): off while
the libraries import, their objects frozen, setup's cycles freed before the model is frozen.
Each check runs in a process of its own: freezing inside pytest would keep every earlier test's
garbage for good."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, tmp_path: Path) -> dict:
    """Runs `code` in a fresh interpreter; it prints one JSON line last."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "TMP_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_settle_frees_setup_cycles_before_it_freezes(tmp_path):
    out = run_python("""
        import gc, json, weakref
        from ot_gradio.runner import collection

        class Big:
            def __init__(self):
                self.data = bytearray(50_000_000)
                self.me = self  # a cycle: only the collector frees it

        collection.pause()
        paused = gc.isenabled()
        collection.resume()
        resumed, frozen_at_resume = gc.isenabled(), gc.get_freeze_count()
        gc.disable()  # keep the cycle alive until settle() runs
        ref = weakref.ref(Big())
        alive_before = ref() is not None
        collection.settle()
        print(json.dumps({"paused": paused, "resumed": resumed, "frozen_at_resume": frozen_at_resume,
                          "alive_before": alive_before, "alive_after": ref() is not None,
                          "enabled_after": gc.isenabled(), "frozen_after": gc.get_freeze_count()}))
    """, tmp_path)
    assert out["paused"] is False and out["resumed"] is True and out["frozen_at_resume"] > 1000
    assert out["alive_before"] and not out["alive_after"]  # collected, not frozen with the model
    assert out["enabled_after"] and out["frozen_after"] > 0


def test_a_process_that_did_not_pause_keeps_its_collector(tmp_path):
    """Tests and benchmarks that train in their own process: resume and settle change nothing."""
    out = run_python("""
        import gc, json
        from ot_gradio.runner import collection

        collection.resume()
        collection.settle()
        print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
    """, tmp_path)
    assert out == {"enabled": True, "frozen": 0}


def test_the_worker_resumes_before_setup_and_settles_before_the_first_step(tmp_path):
    """A training process (as `python -m ot_gradio.runner.worker` starts one): collection is back
    on when the model loads, and more is frozen when training starts than when setup began."""
    out = run_python("""
        import gc, json, os
        from pathlib import Path
        from ot_gradio.runner import collection

        collection.pause()
        from ot_gradio.runner.rundir import create_run
        from ot_gradio.runner.worker import run_worker
        from ot_gradio.training import trainer
        from ot_gradio.ui.state import preset_config

        seen = {}

        def setup(self):
            seen["setup"] = [gc.isenabled(), gc.get_freeze_count()]
            self.kept = [[] for _ in range(50_000)]  # what setup builds and training keeps

        def train(self):
            seen["train"] = [gc.isenabled(), gc.get_freeze_count()]
            return "done"

        trainer.Trainer.setup, trainer.Trainer.train = setup, train
        tmp = Path(os.environ["TMP_DIR"])
        config = preset_config("demo")
        config["workspace_dir"] = str(tmp / "ws")
        code = run_worker(create_run(tmp / "ws", config).path)
        print(json.dumps({"code": code, **seen}))
    """, tmp_path)
    assert out["code"] == 0
    (on_at_setup, frozen_at_setup), (on_at_train, frozen_at_train) = out["setup"], out["train"]
    assert on_at_setup and on_at_train
    assert frozen_at_setup > 10_000  # the imports' objects
    assert frozen_at_train >= frozen_at_setup + 50_000  # setup's objects too


def test_python_m_ot_gradio_train_pauses_the_collector_before_the_command_imports(tmp_path):
    out = run_python("""
        import gc, json, runpy, sys
        import ot_gradio.cli as cli
        import ot_gradio.runner.process_exit as process_exit

        seen = {}
        cli.main = lambda: seen.setdefault("enabled", gc.isenabled()) and 0
        def exit_now(code):
            print(json.dumps(seen), flush=True)
            raise SystemExit(0)
        process_exit.exit_now = exit_now
        sys.argv = ["ot_gradio", "train", "--config", "x.json"]
        runpy.run_module("ot_gradio", run_name="__main__")
    """, tmp_path)
    assert out == {"enabled": False}
