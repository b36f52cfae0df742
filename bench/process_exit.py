"""How long a finished worker process takes to end: Python's module teardown against `exit_now`.

    .venv/bin/python bench/process_exit.py [--rounds 5]

Each round starts two processes that import what a training worker imports (torch, diffusers with
StableDiffusionPipeline, transformers, peft, accelerate, bitsandbytes and the trainer), note the
time, and end: one by returning to the interpreter (module teardown), one through
`ot_gradio.runner.process_exit.exit_now` (what the worker, the job worker and
`python -m ot_gradio` do after their work). It prints the time from that note to the process's
end, per round and as medians. The two kinds alternate, so the machine's load hits both alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as C

CHILD = """
import sys, time
import torch, diffusers, transformers, peft, accelerate
from diffusers import StableDiffusionPipeline
import ot_gradio.training.trainer
try:
    import bitsandbytes
except ImportError:
    pass
with open(sys.argv[2], "w") as f:
    f.write(repr(time.time()))
if sys.argv[1] == "exit_now":
    from ot_gradio.runner.process_exit import exit_now
    exit_now(0)
"""


def one(kind: str, mark: Path, env: dict) -> float:
    subprocess.run([sys.executable, "-c", CHILD, kind, str(mark)], env=env, check=True, cwd=C.ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.time() - float(mark.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(C.ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    mark = Path(tempfile.mkdtemp(prefix="ot-bench-exit-")) / "mark"
    print(f"# process_exit: {C.machine_line()}; {args.rounds} rounds")
    teardown, fast = [], []
    for r in range(args.rounds):
        teardown.append(one("teardown", mark, env))
        fast.append(one("exit_now", mark, env))
        print(f"round {r + 1}: module teardown {teardown[-1]:.2f} s, exit_now {fast[-1]:.2f} s", flush=True)
    print(f"RESULT a finished worker ends {C.med(teardown) - C.med(fast):.2f} s sooner with exit_now "
          f"(median teardown {C.med(teardown):.2f} s, exit_now {C.med(fast):.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
