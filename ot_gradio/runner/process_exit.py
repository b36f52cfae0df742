"""End a finished worker or command-line process without Python's module teardown.

Tearing down the modules torch, diffusers, transformers and bitsandbytes import takes about
1.5 s on the benchmark machine (measured with `bench/process_exit.py`), after the run or tool has
already written and closed everything. Processes that did their work call `exit_now` instead of
returning to the interpreter: logging and the standard streams are flushed, then `os._exit`.
Only for processes that own no cleanup of their own: the page (TensorBoard is stopped by an
atexit handler) exits normally.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced streams
            pass
    os._exit(int(code))
