"""Background batch loading (`dataloader_threads`): same batches in the same order, bounded
read-ahead, early stop cancels, and the trainer loads in its threads."""

from __future__ import annotations

import threading
import time

import pytest

from ot_gradio.data.prefetch import LoadStats, prefetched


class Slow:
    """A sequence whose items take a while and record which thread loaded them."""

    def __init__(self, n: int, delay: float = 0.0):
        self.n = n
        self.delay = delay
        self.loaded: list[int] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, str]:
        time.sleep(self.delay)
        with self.lock:
            self.loaded.append(i)
            self.threads.add(threading.current_thread().name)
        return i, f"batch-{i}"


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_same_batches_in_order(threads):
    data = Slow(7)
    stats = LoadStats()
    got = list(prefetched(data, 2, threads, stats=stats))
    assert got == [(i, (i, f"batch-{i}")) for i in range(2, 7)]
    assert stats.batches == 5
    assert (threads == 0) == (data.threads == {threading.current_thread().name})


def test_read_ahead_is_bounded_and_stop_cancels():
    data = Slow(50, delay=0.01)
    it = prefetched(data, 0, threads=2, ahead=3)
    assert next(it)[0] == 0
    time.sleep(0.1)
    assert len(data.loaded) <= 4  # the one handed out and at most 3 ahead
    it.close()
    settled = len(data.loaded)
    time.sleep(0.05)
    assert len(data.loaded) == settled <= 6


def test_overlaps_with_the_consumer():
    data = Slow(6, delay=0.03)
    stats = LoadStats()
    for _ in prefetched(data, 0, threads=2, stats=stats):
        time.sleep(0.03)  # the "step"
    assert stats.waited < 0.6 * 6 * 0.03


def test_trainer_loads_in_its_threads(tmp_path):
    from ot_gradio.config.io import load_config
    from ot_gradio.data import ensure_demo_dataset
    from ot_gradio.models.tiny.sd15 import save_tiny_sd15
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    data = ensure_demo_dataset(tmp_path / "shapes")
    for extra in sorted(data.glob("*.png"))[4:]:
        extra.unlink()
    tiny = save_tiny_sd15(tmp_path / "tiny").diffusers_dir
    config = load_config({
        "model_type": "STABLE_DIFFUSION_15", "training_method": "LORA", "base_model_name": str(tiny),
        "train_device": "cpu", "train_dtype": "FLOAT_32", "workspace_dir": str(tmp_path / "ws"),
        "cache_dir": str(tmp_path / "cache"), "output_model_destination": str(tmp_path / "out" / "l.safetensors"),
        "concepts": [{"name": "c", "path": str(data)}], "resolution": "64", "batch_size": 2, "epochs": 1,
        "lora_rank": 2, "text_encoder": {"train": False}, "unet": {"gradient_checkpointing": False},
        "samples": [], "backup_after_unit": "NEVER", "backup_before_save": False, "tensorboard": False,
        "dataloader_threads": 2,
    }).config
    trainer = Trainer(config, RunPaths(tmp_path / "s", tmp_path / "b", tmp_path / "o", None, []), Reporter())
    trainer.setup()
    names: list[str] = []
    epoch_batches = trainer.dataset.epoch_batches

    def recording(epoch, shard=None):
        batches = epoch_batches(epoch, shard=shard)
        get = batches.__getitem__

        class Recorded(type(batches)):
            def __getitem__(self, i):
                names.append(threading.current_thread().name)
                return get(i)

        batches.__class__ = Recorded
        return batches

    trainer.dataset.epoch_batches = recording
    assert trainer.train() == "done"
    assert len(names) == 2 and all(n.startswith("ot-data") for n in names)
    assert trainer.data_stats.batches == 2
