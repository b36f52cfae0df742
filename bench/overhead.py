"""Benchmark 1: the trainer's step time against a bare PyTorch loop (the machine's compute floor).

    .venv/bin/python bench/overhead.py [--steps 30] [--threads 1] [--variants] [--experiments]

Both train the same benchmark model (SD 1.5's UNet layout at reduced width, see _common.py) in
one process: our real `Trainer` (FINE_TUNE of the UNet, text encoder frozen, latent caching,
FLOAT_32, batch 2, 64 px, AdamW as configured) and a bare loop over a second copy of the same
weights that does only the necessary work: cached latents already in memory, text embeddings
computed once, noise, UNet forward, MSE loss, backward, clip_grad_norm_, AdamW step. They
alternate step by step (trainer step, bare step, ...), so machine noise hits both alike; the
first steps of each are warm-up and not counted. Prints the median step times and their ratio,
the median of the per-pair ratios (each trainer step over the bare step right after it), and the
median of each trainer step over the mean of the bare steps just before and after it (a load
drifting during the run cancels out), which the RESULT line judges. Target: 1.03x or less.

--variants runs the trainer again with one thing changed, each against the same bare loop, so
the ratios show what each costs or saves: the text encoder run every step (as before text
encoder outputs were cached), no background batch loading (as before `dataloader_threads` was
acted on), gradient checkpointing, DEFAULT attention instead of SDP, a foreach or plain AdamW
step instead of the default fused one, BFLOAT_16 autocast.

--experiments compares bare loops only (no trainer option exists for these yet): channels_last
memory format, and torch.compile of the UNet.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import _common as C


class BareLoop:
    """The floor: the same model from the same folder, the same batch, dtype and optimizer."""

    def __init__(self, model_dir: Path, latents: list, hidden, batch_size: int, optimizer_kwargs: dict,
                 lr: float, clip: float | None, autocast_dtype=None, seed: int = 1):
        import torch
        from diffusers import DDPMScheduler, UNet2DConditionModel
        from diffusers.models.attention_processor import AttnProcessor2_0

        self.torch = torch
        self.unet = UNet2DConditionModel.from_pretrained(model_dir / "unet")
        self.unet.set_attn_processor(AttnProcessor2_0())
        self.unet.train()
        self.scheduler = DDPMScheduler.from_pretrained(model_dir / "scheduler")
        self.params = [p for p in self.unet.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, **optimizer_kwargs)
        self.latents = latents
        self.hidden = hidden
        self.batch_size = batch_size
        self.clip = clip
        self.autocast_dtype = autocast_dtype
        self.gen = torch.Generator().manual_seed(seed)
        self.times: list[float] = []
        self.forward = self.unet

    def step(self) -> None:
        torch = self.torch
        start = time.perf_counter()
        picks = torch.randint(0, len(self.latents), (self.batch_size,), generator=self.gen).tolist()
        latents = torch.stack([self.latents[i] for i in picks])
        hidden = self.hidden.expand(self.batch_size, -1, -1)
        noise = torch.randn(latents.shape, generator=self.gen)
        timesteps = torch.randint(0, 1000, (self.batch_size,), generator=self.gen)
        noisy = self.scheduler.add_noise(latents, noise, timesteps)
        if self.autocast_dtype is not None:
            with torch.autocast("cpu", dtype=self.autocast_dtype):
                pred = self.forward(noisy, timesteps, hidden).sample
        else:
            pred = self.forward(noisy, timesteps, hidden).sample
        loss = torch.nn.functional.mse_loss(pred.float(), noise)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.times.append(time.perf_counter() - start)


def prepare(work: Path, images: int):
    model_dir = C.bench_model(work / "models")
    data_dir = work / "data"
    if not data_dir.is_dir():
        C.make_images(data_dir, images, size=64)
    return model_dir, data_dir


def floor_inputs(trainer):
    """The cached latents of every image (in memory) and the text embedding of one caption."""
    import torch

    plan = trainer.dataset.plan(0)
    latents = []
    for batch in plan.batches:
        for sample in batch:
            from ot_gradio.data.batches import latent_key

            concept = trainer.dataset.concepts[sample.concept]
            item = concept.items[sample.item]
            latents.append(trainer.dataset.cache.load(latent_key(trainer.dataset.cache, item, sample.variant)).float())
    with torch.no_grad():
        hidden = trainer.model.encode_text(["a red circle on a light background"])["encoder_hidden_states"].detach().clone()
    return latents, hidden


def run_pair(label: str, model_dir: Path, data_dir: Path, work: Path, steps: int, warmup: int, overrides: dict,
             bare_kwargs: dict | None = None, after_setup=None) -> dict:
    """Trainer (with `overrides`, and `after_setup(trainer)`) and the bare loop, alternating step by step."""
    import torch

    bare_kwargs = dict(bare_kwargs or {})
    run_dir = Path(tempfile.mkdtemp(prefix=f"ovh-{label}-", dir=work))
    per_epoch = 8  # 16 images, batch 2
    epochs = math.ceil((steps + warmup) / per_epoch)
    data = C.config_dict(model_dir, data_dir, run_dir, epochs=epochs, **overrides)
    holder: dict = {}

    def between():
        holder["bare"].step()

    clock = C.Clock(between=between)
    trainer = C.make_trainer(data, run_dir, clock)
    trainer.setup()
    if after_setup is not None:
        after_setup(trainer)
    latents, hidden = floor_inputs(trainer)
    cfg = trainer.config
    from ot_gradio.training.optimizers.registry import resolve_settings

    opt = resolve_settings(cfg.optimizer)
    opt_kwargs = {k: opt[k] for k in ("eps", "weight_decay", "betas") if k in opt}
    # the same step kernel as the trainer chose (fused / foreach / plain), unless a variant says otherwise
    opt_kwargs.update({k: trainer.optimizer.defaults[k] for k in ("foreach", "fused") if k in trainer.optimizer.defaults})
    holder["bare"] = BareLoop(model_dir, latents, hidden, cfg.batch_size, {**opt_kwargs, **bare_kwargs.pop("optimizer", {})},
                              cfg.learning_rate, cfg.clip_grad_norm, **bare_kwargs)
    trainer.train()
    ours = clock.step_times[warmup:]
    floor = holder["bare"].times[warmup:]
    n = min(len(ours), len(floor))
    ours, floor = ours[:n], floor[:n]
    torch.set_grad_enabled(True)
    # each trainer step against the mean of the bare steps just before and just after it: a
    # load that drifts during the run cancels out, whichever side a step falls on
    before = holder["bare"].times[warmup - 1:]
    around = [a / ((b0 + b1) / 2) for a, b0, b1 in zip(ours, before[:n], floor, strict=True)]
    result = {"label": label, "ours": C.med(ours), "floor": C.med(floor), "n": n,
              "ratio": C.med(ours) / C.med(floor),
              "ratio_of_pairs": C.med([a / b for a, b in zip(ours, floor, strict=True)]),
              "ratio_around": C.med(around)}
    print(f"{label:<34} trainer {C.ms(result['ours']):>10}  bare {C.ms(result['floor']):>10}  "
          f"ratio {result['ratio']:.3f}x (median of per-pair ratios {result['ratio_of_pairs']:.3f}x, "
          f"against the bare steps around each {result['ratio_around']:.3f}x, {n} pairs)", flush=True)
    return result


def run_bare_pair(label: str, a: BareLoop, b: BareLoop, steps: int, warmup: int) -> None:
    for _ in range(steps + warmup):
        a.step()
        b.step()
    ta, tb = a.times[warmup:], b.times[warmup:]
    print(f"{label:<34} A {C.ms(C.med(ta)):>10}  B {C.ms(C.med(tb)):>10}  B/A {C.med(tb) / C.med(ta):.3f}x "
          f"(median of per-pair ratios {C.med([y / x for x, y in zip(ta, tb, strict=True)]):.3f}x)", flush=True)


def experiments(model_dir: Path, data_dir: Path, work: Path, steps: int, warmup: int) -> None:
    import torch

    run_dir = Path(tempfile.mkdtemp(prefix="ovh-exp-", dir=work))
    trainer = C.make_trainer(C.config_dict(model_dir, data_dir, run_dir), run_dir, C.Clock())
    trainer.setup()
    latents, hidden = floor_inputs(trainer)
    kwargs = {"eps": 1e-8, "weight_decay": 0.01, "fused": True}

    def make():
        return BareLoop(model_dir, latents, hidden, 2, kwargs, 1e-5, 1.0)

    base, channels_last = make(), make()
    channels_last.unet.to(memory_format=torch.channels_last)
    channels_last.latents = [x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in latents]
    run_bare_pair("channels_last (B) vs plain (A)", base, channels_last, steps, warmup)

    base, compiled = make(), make()
    try:
        start = time.perf_counter()
        compiled.forward = torch.compile(compiled.unet)
        compiled.step()
        print(f"torch.compile: first step (compiling) {time.perf_counter() - start:.1f} s")
        compiled.times.clear()
        run_bare_pair("torch.compile (B) vs eager (A)", base, compiled, steps, warmup)
    except Exception as err:  # noqa: BLE001  a missing compiler is a result too
        print(f"torch.compile: failed on this machine: {type(err).__name__}: {str(err).splitlines()[0][:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="measured steps per side")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", action="store_true", help="also time trainer options against the same floor")
    parser.add_argument("--experiments", action="store_true", help="also time channels_last and torch.compile (bare loops)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the model, data and runs (default: a temp folder)")
    args = parser.parse_args()
    C.setup_torch(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-bench-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir, data_dir = prepare(work, 16)
    print(f"# overhead: {C.machine_line()}")
    import torch

    results = [run_pair("default (SDP, no checkpointing)", model_dir, data_dir, work, args.steps, args.warmup, {})]
    if args.variants:
        def no_text_cache(trainer):
            trainer.diffusion.text_cache = None

        results.append(run_pair("text encoder every step (no cache)", model_dir, data_dir, work, args.steps, args.warmup, {},
                                after_setup=no_text_cache))
        results.append(run_pair("dataloader_threads 0 (no prefetch)", model_dir, data_dir, work, args.steps, args.warmup,
                                {"dataloader_threads": 0}))
        results.append(run_pair("gradient checkpointing on", model_dir, data_dir, work, args.steps, args.warmup,
                                {"unet": {"gradient_checkpointing": True}}))
        results.append(run_pair("attention DEFAULT (not SDP)", model_dir, data_dir, work, args.steps, args.warmup,
                                {"attention_mechanism": "DEFAULT"}))
        # the floor keeps the default's fused AdamW step: these show what the other steps cost
        fused_floor = {"optimizer": {"fused": True, "foreach": False}}
        results.append(run_pair("AdamW foreach (fused off)", model_dir, data_dir, work, args.steps, args.warmup,
                                {"optimizer": {"optimizer": "ADAMW", "fused": False, "foreach": True}}, fused_floor))
        results.append(run_pair("AdamW plain step (fused off)", model_dir, data_dir, work, args.steps, args.warmup,
                                {"optimizer": {"optimizer": "ADAMW", "fused": False, "foreach": False}}, fused_floor))
        results.append(run_pair("train_dtype BFLOAT_16 (autocast)", model_dir, data_dir, work, args.steps, args.warmup,
                                {"train_dtype": "BFLOAT_16"}, {"autocast_dtype": None}))
    if args.experiments:
        experiments(model_dir, data_dir, work, args.steps, args.warmup)
    del torch
    main = results[0]
    print(f"RESULT overhead: trainer step / bare steps around it {main['ratio_around']:.3f}x (per pair "
          f"{main['ratio_of_pairs']:.3f}x, ratio of medians {main['ratio']:.3f}x) (target <= 1.03x): "
          f"{'met' if main['ratio_around'] <= 1.03 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
