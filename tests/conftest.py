"""Shared test setup: the repository on sys.path, no network, no telemetry, and one torch
thread for tiny models (they are dominated by thread start-up and contention), in the test
process and the processes it starts."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# one torch thread in every process the tests start too (training workers, the CLI, the app):
# scripts/test.sh runs a pytest worker per core, so a second thread per process only contends
os.environ.setdefault("OMP_NUM_THREADS", "1")

# as in the worker processes: bitsandbytes and onnxruntime load when first used, so every test of
# 8-bit optimizers, quantized parts and the WD14 tagger also checks that the deferral hands over
from ot_gradio.runner.deferred_imports import defer_optional_imports  # noqa: E402

defer_optional_imports()


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    if "torch" not in sys.modules:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny SD 1.5, saved once a session (`.diffusers_dir`, `.single_file`); tests read it, never write it."""
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15

    return save_tiny_sd15(tmp_path_factory.mktemp("tiny-sd15"))


@pytest.fixture(scope="session")
def four_shapes(tmp_path_factory):
    """Four square images of the demo set with their captions: 2 steps an epoch at batch 2."""
    from ot_gradio.data import ensure_demo_dataset

    folder = tmp_path_factory.mktemp("data") / "four-shapes"
    ensure_demo_dataset(folder)
    for extra in sorted(folder.glob("*.png"))[4:]:
        extra.unlink()
        extra.with_suffix(".txt").unlink()
    return folder
