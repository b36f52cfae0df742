"""Benchmark 3: what the data pipeline delivers against what the training step consumes.

    .venv/bin/python bench/data_pipeline.py [--images 32] [--source-size 512] [--threads 1]

The images are photos-sized sources (512 px PNGs by default) trained at 64 px with aspect
ratio bucketing, random flip, crop jitter, rotation and colour augmentation on, so loading does
real work: decode, resize, crop, rotate, colour changes. Two data paths:

- cached (latent caching on, the default): a batch is the cached latents, read from disk;
- pixels (latent caching off): a batch is decoded and augmented images; the VAE runs in the step.

For each path it prints: images per second the loader delivers on one thread (`EpochBatches[i]`
in a loop), images per second the training step consumes (batch / median step time of the real
trainer), and, from real trainer runs with `dataloader_threads` 0 and the default (2), the share
of training wall time the loop spent waiting for its next batch (`Trainer.data_stats`, measured
around the batch hand-over in the loop). Target: < 2 % with the default number of workers.

Then the caching phase (every source decoded, cut and encoded, every latent written) with
`dataloader_threads` 0 and 2, alternating for `--caching-rounds` rounds on an empty cache each
time: with threads, images are decoded while the VAE encodes and latents are written meanwhile
(data/caching.py). It prints each round and the median ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common as C

AUGMENT = {
    "enable_crop_jitter": True, "enable_random_flip": True, "enable_random_rotate": True, "random_rotate_max_angle": 10,
    "enable_random_brightness": True, "random_brightness_max_strength": 0.2, "enable_random_contrast": True,
    "random_contrast_max_strength": 0.2, "enable_random_saturation": True, "random_saturation_max_strength": 0.2,
    "enable_random_hue": True, "random_hue_max_strength": 0.05,
}


def loader_rate(trainer, rounds: int = 2) -> float:
    """Images per second `EpochBatches[i]` delivers on this thread."""
    count, began = 0, time.perf_counter()
    for epoch in range(rounds):
        batches = trainer.dataset.epoch_batches(epoch)
        for i in range(len(batches)):
            count += len(batches[i])
    return count / (time.perf_counter() - began)


def run(model_dir: Path, data_dir: Path, work: Path, latent_caching: bool, threads: int, epochs: int) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"dp-{int(latent_caching)}-{threads}-", dir=work))
    data = C.config_dict(model_dir, data_dir, run_dir, epochs=epochs, latent_caching=latent_caching,
                         dataloader_threads=threads, concepts=[{"name": "photos", "path": str(data_dir), "image": AUGMENT}],
                         backup_before_save=False)
    clock = C.Clock()
    trainer = C.make_trainer(data, run_dir, clock)
    trainer.setup()
    rate = loader_rate(trainer) if threads == 0 else None
    trainer.train()
    training_started = next(t for t, s in clock.statuses if s == "training")
    saving = next(t for t, s in clock.statuses if s == "saving")
    wall = saving - training_started
    return {"wait": trainer.data_stats.waited, "wall": wall, "batches": trainer.data_stats.batches,
            "step": C.med(clock.step_times[2:]), "loader_rate": rate, "batch_size": trainer.config.batch_size}


def caching_phase(model_dir: Path, data_dir: Path, work: Path, threads: int) -> float:
    """Seconds from the caching status to the end of setup (scan, decode, encode, write)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"cache-{threads}-", dir=work))
    data = C.config_dict(model_dir, data_dir, run_dir, epochs=1, dataloader_threads=threads,
                         concepts=[{"name": "photos", "path": str(data_dir), "image": AUGMENT}], backup_before_save=False)
    clock = C.Clock()
    trainer = C.make_trainer(data, run_dir, clock)
    trainer.setup()
    seconds = time.perf_counter() - next(t for t, s in clock.statuses if s == "caching")
    assert trainer.dataset.cache_report.encoded == trainer.dataset.cache_report.total > 0
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--source-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--caching-rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    C.setup_torch(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = C.bench_model(work / "models")
    data_dir = work / "photos"
    if not data_dir.is_dir():
        C.make_photos(data_dir, args.images, args.source_size)
    print(f"# data_pipeline: {C.machine_line()}; {args.images} sources of {args.source_size} px, trained at 64 px, batch 2, "
          f"{args.epochs} epochs per run")
    results = {}
    for cached in (True, False):
        for threads in (0, 2):  # 2 = the default dataloader_threads
            r = run(model_dir, data_dir, work, cached, threads, args.epochs)
            results[(cached, threads)] = r
            path = "cached latents" if cached else "pixels"
            consumes = r["batch_size"] / r["step"]
            line = (f"{path:<14} dataloader_threads={threads}: waited {r['wait']:.3f} s of {r['wall']:.1f} s training "
                    f"({100 * r['wait'] / r['wall']:.2f} %), {r['batches']} batches; step consumes {consumes:.1f} images/s")
            if r["loader_rate"] is not None:
                line += f"; loader delivers {r['loader_rate']:.1f} images/s on one thread ({r['loader_rate'] / consumes:.0f}x the step's need)"
            print(line, flush=True)
    worst = max(results[(c, 2)]["wait"] / results[(c, 2)]["wall"] for c in (True, False))
    print(f"RESULT data wait with the default 2 threads: at most {100 * worst:.2f} % of training wall time "
          f"(target < 2 %): {'met' if worst < 0.02 else 'NOT met'}")
    ratios = []
    for r in range(args.caching_rounds):
        none, two = caching_phase(model_dir, data_dir, work, 0), caching_phase(model_dir, data_dir, work, 2)
        ratios.append(none / two)
        print(f"caching phase, round {r + 1}: dataloader_threads=0 {none:.2f} s, =2 {two:.2f} s ({none / two:.2f}x)", flush=True)
    if ratios:
        print(f"RESULT caching phase with the default 2 threads: {C.med(ratios):.2f}x faster than with 0 (median of {len(ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
