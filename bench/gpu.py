"""GPU speed for users: steps per second and model FLOP utilisation of SD 1.5 and SDXL LoRA training.

    .venv/bin/python bench/gpu.py [--family sd15 sdxl] [--steps 30] [--warmup 5] [--batch 1]
                                  [--dtype BFLOAT_16] [--peak-tflops N] [--device cuda] [--compile]

Nothing is downloaded: each family's model is built at full size with random weights from its
published layout (SD 1.5: UNet 860 M, CLIP ViT-L; SDXL: UNet 2.6 G, CLIP ViT-L + OpenCLIP bigG),
saved as a float16 diffusers folder in a temp folder, and trained through the real trainer: a
rank-16 LoRA on the UNet (OneTrainer's default layers), text encoders frozen, latents and text
embeddings cached, AdamW, `--dtype` autocast, SD 1.5 at 512 px and SDXL at 1024 px. Random
weights cost the same FLOPs and time as trained ones.

Printed per family: the median time of the steps after `--warmup`, steps/s and images/s, the
FLOPs of one training step (counted with torch.utils.flop_counter on that step's forward and
backward), achieved TFLOP/s, and the model FLOP utilisation (MFU) against the GPU's dense
16-bit tensor peak: from a small table of common GPUs, or `--peak-tflops`. Compare steps/s with
OneTrainer or kohya on the same GPU, batch size, resolution, rank and data type. `--compile` turns
on the trainer's `compile` option (torch.compile of the UNet); run it with and without to see its
gain on your GPU, with a `--warmup` long enough to cover the compile.

Without a CUDA GPU the timing is skipped (exit 0) and only the FLOPs of a step are counted, on
the meta device (no memory, no weights). `--device cpu --resolution 64 --steps 2` runs the
whole timing path on a CPU with the full-size model, to check the script (slow; not a number
to compare).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import Clock, make_images  # noqa: E402

# Dense 16-bit tensor-core peaks from the vendors' datasheets (TFLOP/s, without sparsity, with
# float32 accumulation where the datasheet tells them apart). Approximate: pass --peak-tflops.
PEAK_TFLOPS = {
    "H200": 989.0, "H100 SXM": 989.0, "H100 PCIe": 756.0, "H100": 756.0, "A100": 312.0, "L40S": 362.0, "L40": 181.0,
    "L4": 121.0, "A10G": 70.0, "A10": 125.0, "A6000": 155.0, "RTX 6000 Ada": 365.0, "RTX 4090": 165.0,
    "RTX 4080": 97.0, "RTX 3090": 71.0, "RTX 3080": 59.0, "V100": 125.0, "T4": 65.0,
}

SD15_UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2, cross_attention_dim=768, attention_head_dim=8,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
)
SDXL_UNET = dict(
    sample_size=128, in_channels=4, out_channels=4, layers_per_block=2, cross_attention_dim=2048,
    attention_head_dim=(5, 10, 20), transformer_layers_per_block=(1, 2, 10), use_linear_projection=True,
    block_out_channels=(320, 640, 1280), addition_embed_type="text_time", addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
)
VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
)
CLIP_L = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768)
CLIP_BIG_G = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                  max_position_embeddings=77, hidden_act="gelu", projection_dim=1280)
FAMILIES = {
    "sd15": {"model_type": "STABLE_DIFFUSION_15", "resolution": 512, "unet": SD15_UNET, "vae_scale": 0.18215},
    "sdxl": {"model_type": "STABLE_DIFFUSION_XL_10_BASE", "resolution": 1024, "unet": SDXL_UNET, "vae_scale": 0.13025},
}


def build_pipeline(family: str):
    """The family's pipeline at full size with random weights (float32, on the CPU)."""
    import torch
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from ot_gradio.models.tiny.sd15 import tiny_clip_tokenizer

    spec = FAMILIES[family]
    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer()  # the tokenizer's vocabulary does not change the step's cost
    vocab = {"vocab_size": 49408, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
    scheduler = DDPMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, steps_offset=1)
    unet = UNet2DConditionModel(**spec["unet"])
    vae = AutoencoderKL(**VAE, sample_size=spec["resolution"], scaling_factor=spec["vae_scale"])
    if family == "sd15":
        from diffusers import StableDiffusionPipeline

        text_encoder = CLIPTextModel(CLIPTextConfig(**CLIP_L, **vocab))
        return StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    from diffusers import StableDiffusionXLPipeline

    text_encoder = CLIPTextModel(CLIPTextConfig(**CLIP_L, **vocab))
    text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(**CLIP_BIG_G, **vocab))
    return StableDiffusionXLPipeline(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2, tokenizer=tokenizer,
                                     tokenizer_2=tiny_clip_tokenizer(), unet=unet, scheduler=scheduler)


def step_flops_on_meta(family: str, resolution: int, batch: int, rank: int) -> int:
    """FLOPs of one LoRA training step of the UNet (forward and backward), counted on the meta
    device. Text embeddings are cached during training, so the text encoders are not counted."""
    import torch
    from diffusers import UNet2DConditionModel
    from peft import LoraConfig
    from torch.utils.flop_counter import FlopCounterMode

    spec = FAMILIES[family]
    with torch.device("meta"):
        unet = UNet2DConditionModel(**spec["unet"])
        unet.requires_grad_(False)
        unet.add_adapter(LoraConfig(r=rank, lora_alpha=rank, target_modules=["to_q", "to_k", "to_v", "to_out.0",
                                                                              "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2"]))
        side = resolution // 8
        latents = torch.randn(batch, 4, side, side)
        context = torch.randn(batch, 77, spec["unet"]["cross_attention_dim"])
        t = torch.randint(0, 1000, (batch,))
        extra = {}
        if family == "sdxl":
            extra["added_cond_kwargs"] = {"text_embeds": torch.randn(batch, 1280), "time_ids": torch.randn(batch, 6)}
        with FlopCounterMode(display=False) as counter:
            out = unet(latents, t, context, **extra).sample
            out.float().pow(2).mean().backward()
    return counter.get_total_flops()


def peak_for(name: str) -> float | None:
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):  # "H100 PCIe" before "H100"
        if key.lower() in name.lower():
            return PEAK_TFLOPS[key]
    return None


def time_training(family: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch

    from bench._common import make_trainer

    folder = work / f"{family}-model"
    if not (folder / "model_index.json").is_file():
        t0 = time.perf_counter()
        build_pipeline(family).to(torch.float16).save_pretrained(folder, safe_serialization=True)
        print(f"{family}: built and saved the full-size random model in {time.perf_counter() - t0:.0f} s", flush=True)
    resolution = args.resolution or FAMILIES[family]["resolution"]
    images = make_images(work / f"{family}-data-{resolution}", max(8, args.batch * 4), size=resolution)
    steps = args.warmup + args.steps
    config = {
        "model_type": FAMILIES[family]["model_type"], "training_method": "LORA", "base_model_name": str(folder),
        "train_device": args.device, "train_dtype": args.dtype, "workspace_dir": str(work / "ws"),
        "cache_dir": str(work / f"cache-{family}-{resolution}"), "output_model_destination": str(work / "out" / f"{family}.safetensors"),
        "concepts": [{"name": "shapes", "path": str(images)}], "resolution": str(resolution), "batch_size": args.batch,
        "epochs": -(-steps // (len(list(images.glob('*.png'))) // args.batch)), "learning_rate": 1e-4,
        "lora_rank": args.rank, "lora_alpha": args.rank, "latent_caching": True,
        "text_encoder": {"train": False}, "text_encoder_2": {"train": False}, "unet": {"train": True, "gradient_checkpointing": False},
        "optimizer": {"optimizer": "ADAMW"}, "samples": [], "sample_after_unit": "NEVER", "backup_after_unit": "NEVER",
        "save_every_unit": "NEVER", "tensorboard": False, "compile": args.compile,
    }
    clock = Clock()
    trainer = make_trainer(config, work / f"run-{family}", clock)
    trainer.setup()
    synced: list[float] = []
    original = trainer._optimizer_step

    def step_and_sync() -> None:  # time what the GPU did, not what was queued
        original()
        if torch.cuda.is_available() and args.device.startswith("cuda"):
            torch.cuda.synchronize()
        synced.append(time.perf_counter())
        if len(synced) >= steps:
            trainer.stop_requested = True

    trainer._optimizer_step = step_and_sync
    trainer.save = lambda intermediate: None  # the LoRA file is not what is measured
    trainer.write_backup = lambda: None
    trainer.train()
    timed = [b - a for a, b in zip(synced[args.warmup:-1], synced[args.warmup + 1:], strict=True)]
    flops = count_step_flops(trainer)
    median = statistics.median(timed) if timed else float("nan")
    return {"median_s": median, "steps": len(timed), "flops": flops,
            "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None}


def count_step_flops(trainer) -> int:
    """FLOPs of one real training step of the trainer (its loss, then backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = trainer.dataset.epoch_batches(0)[0]
    with FlopCounterMode(display=False) as counter:
        loss = trainer.diffusion.loss(batch, trainer.trained_text_parts)
        loss.backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", nargs="+", choices=sorted(FAMILIES), default=["sd15", "sdxl"])
    parser.add_argument("--steps", type=int, default=30, help="timed steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="BFLOAT_16", choices=["BFLOAT_16", "FLOAT_16", "FLOAT_32"])
    parser.add_argument("--resolution", type=int, help="default: 512 for sd15, 1024 for sdxl")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true", help="the trainer's `compile` option (raise --warmup: compiling takes minutes)")
    parser.add_argument("--peak-tflops", type=float, help="your GPU's dense 16-bit tensor peak (default: from a table)")
    parser.add_argument("--work", type=Path, help="keep the models and data here (default: a temp folder)")
    args = parser.parse_args()

    import torch

    from bench._common import setup_torch

    setup_torch(torch.get_num_threads())
    has_gpu = torch.cuda.is_available()
    results = {}
    for family in args.family:
        resolution = args.resolution or FAMILIES[family]["resolution"]
        flops = step_flops_on_meta(family, resolution, args.batch, args.rank)
        print(f"{family} LoRA rank {args.rank}, {resolution} px, batch {args.batch}: "
              f"{flops / 1e12:.2f} TFLOPs per step (UNet forward + backward, counted on the meta device)", flush=True)
        results[family] = {"meta_flops": flops}
    if args.device.startswith("cuda") and not has_gpu:
        print("RESULT: SKIPPED: no CUDA GPU on this machine; steps/s and MFU need one (FLOPs per step above)")
        return 0
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    peak = args.peak_tflops or (peak_for(name) if args.device.startswith("cuda") else None)
    work = args.work or Path(tempfile.mkdtemp(prefix="ot-gpu-bench-"))
    for family in args.family:
        got = time_training(family, args, work)
        per_s = 1 / got["median_s"]
        achieved = got["flops"] * per_s / 1e12
        mfu = f"{100 * achieved / peak:.1f} % of {peak:.0f} TFLOP/s" if peak else "unknown (pass --peak-tflops)"
        memory = f", peak memory {got['peak_mb']:.0f} MB" if got["peak_mb"] is not None else ""
        print(f"{family} on {name}: {per_s:.2f} steps/s ({per_s * args.batch:.2f} images/s), median step "
              f"{got['median_s'] * 1000:.0f} ms over {got['steps']} steps; {got['flops'] / 1e12:.2f} TFLOPs per step "
              f"(counted on the real step) -> {achieved:.1f} TFLOP/s, MFU {mfu}{memory}", flush=True)
        results[family].update(got)
    print("RESULT: " + json.dumps({k: {kk: vv for kk, vv in v.items()} for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
