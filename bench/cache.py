"""Benchmark 4: the latent and text-embedding caches encode only what changed.

    .venv/bin/python bench/cache.py [--images 200]

Runs the real trainer (tiny SD 1.5, LoRA, text encoder frozen, latent caching on,
`clear_cache_before_training` off so the cache carries over, 1 epoch) five times on one
concept folder of 200 images:

1. first run: the cache is empty;
2. the same folder again;
3. one image added;
4. one image's pixels changed (same file name);
5. one caption changed.

For each run it counts the images the VAE encodes (every call of the model's `encode_images`,
the caching phase's and any other) and the captions the text encoder encodes (a forward hook on
it), and times the caching phase. Target: run 2 runs the VAE zero times; run 3 encodes exactly one
image; the text encoder encodes each caption once, ever.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common as C


class Counts:
    def __init__(self):
        self.vae_images = 0
        self.vae_calls = 0
        self.text_rows = 0
        self.text_calls = 0


def patch_vae_counter(counts: Counts) -> None:
    from ot_gradio.models.sd15 import StableDiffusion15

    original = StableDiffusion15.encode_images

    def counting(self, pixels, **kwargs):
        counts.vae_calls += 1
        counts.vae_images += int(pixels.shape[0])
        return original(self, pixels, **kwargs)

    StableDiffusion15.encode_images = counting


def one_run(model_dir: Path, data_dir: Path, work: Path, counts: Counts) -> dict:
    before = (counts.vae_images, counts.vae_calls)
    data = C.config_dict(model_dir, data_dir, work, training_method="LORA", lora_rank=4, lora_alpha=4,
                         output_model_destination=str(work / "out" / "lora.safetensors"), clear_cache_before_training=False,
                         backup_before_save=False, epochs=1)
    clock = C.Clock()
    trainer = C.make_trainer(data, work, clock)
    trainer.setup()
    cached_at = next(t for t, s in clock.statuses if s == "caching")
    caching_s = time.perf_counter() - cached_at
    text_before = counts.text_rows

    def hook(module, args, output):
        counts.text_calls += 1
        counts.text_rows += int(args[0].shape[0])

    handle = trainer.model.text_encoder.register_forward_hook(hook)
    trainer.train()
    handle.remove()
    report = trainer.dataset.cache_report
    text_cache = trainer.diffusion.text_cache
    return {"vae_images": counts.vae_images - before[0], "vae_calls": counts.vae_calls - before[1],
            "text_rows": counts.text_rows - text_before, "caching_s": caching_s, "report": report,
            "text_hits": text_cache.hits if text_cache else None, "text_encoded": text_cache.encoded if text_cache else None,
            "steps": len(clock.step_times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    C.setup_torch(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-cache-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = C.tiny_model(work / "models")
    data_dir = work / "concept"
    C.make_images(data_dir, args.images, size=64)
    counts = Counts()
    patch_vae_counter(counts)
    print(f"# cache: {C.machine_line()}; tiny SD 1.5, {args.images} images of 64 px, batch 2, 1 epoch per run")

    def show(label: str, r: dict) -> dict:
        rep = r["report"]
        print(f"{label:<28} VAE encoded {r['vae_images']:>3} image(s) in {r['vae_calls']:>2} call(s) "
              f"(cache: {rep.total} needed, {rep.hits} on disk, {rep.encoded} encoded; caching phase {r['caching_s']:.2f} s); "
              f"text encoder encoded {r['text_rows']:>3} caption(s) (text cache hits {r['text_hits']}); {r['steps']} steps", flush=True)
        return r

    first = show("1. first run (empty cache)", one_run(model_dir, data_dir, work, counts))
    again = show("2. same folder again", one_run(model_dir, data_dir, work, counts))
    C.make_images(data_dir, 1, size=64, start=args.images)
    added = show("3. one image added", one_run(model_dir, data_dir, work, counts))
    from PIL import Image

    target = data_dir / "00007.png"
    with Image.open(target) as img:
        img.convert("RGB").rotate(90).save(target)
    edited = show("4. one image's pixels changed", one_run(model_dir, data_dir, work, counts))
    (data_dir / "00011.txt").write_text("a completely new caption\n")
    recaptioned = show("5. one caption changed", one_run(model_dir, data_dir, work, counts))
    ok = (first["vae_images"] == args.images and again["vae_images"] == 0 and added["vae_images"] == 1
          and edited["vae_images"] == 1 and recaptioned["vae_images"] == 0 and again["text_rows"] == 0
          and added["text_rows"] <= 1 and recaptioned["text_rows"] == 1)
    print(f"RESULT second run VAE images {again['vae_images']} (target 0), one added image -> {added['vae_images']} encoded "
          f"(target 1), text encoder on the unchanged run {again['text_rows']} (target 0): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
