"""Wan 2.1 end to end on the tiny model: a LoRA from our preset trained in a worker process from a folder of three
short generated clips and one image (with hostile clips beside them, named and skipped), that
WanPipeline reloads with `load_lora_weights` (nothing ignored) and that changes its output."""

from __future__ import annotations

import numpy as np
import pytest

from ot_gradio.config.presets import PRESETS_DIR
from ot_gradio.data.video import FrameSampling, probe_clip
from tests.e2e.runs import (
    clip_run,
    imported,
    local_pipeline,
    lora_load_problems,
    losses_with_fixed_noise,
    run_until_done,
    tiny_fixture,
    train_from_cli,
    video_latents,
)
from tests.video_clips import write_clip, write_clips_and_an_image, write_hostile_clips

pytestmark = pytest.mark.slow
PROMPT = "a yellow square moving"

tiny_wan = tiny_fixture("wan", "tiny_wan")


def _video(pipe) -> np.ndarray:
    return video_latents(pipe, PROMPT, guidance_scale=1.0)


def _config(tiny_wan, data, tmp_path, **changes) -> dict:
    """Our preset with only the base model, the data, the output and the run's size changed (its
    bfloat16 transformer and UMT5 and float32 VAE kept)."""
    config = imported(PRESETS_DIR / "wan21-lora.json", tiny_wan.diffusers_dir, data, tmp_path, "lora.safetensors",
                      resolution="64", frames="5", frame_rate=24.0, epochs=1, learning_rate=5e-2, lora_rank=4, lora_alpha=4.0,
                      samples=[], latent_caching=True)
    assert (config["model_type"], config["output_model_format"], config["text_encoder"]["train"]) == ("WAN_2_1", "COMFY_LORA", False)
    config.update(changes)
    return config


def test_lora_from_clips_and_an_image_reloads_in_the_wan_pipeline(tiny_wan, tmp_path):
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    hostile = write_hostile_clips(data)
    events, keys = clip_run(_config(tiny_wan, data, tmp_path), tmp_path)
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    for path in hostile.values():
        assert any(path.name in w for w in warnings), (path.name, warnings)
    # the preset's COMFY_LORA file: Wan's original names (what ComfyUI maps), its blocks' layers only
    # (attn-mlp), which diffusers' converter for such files reads too
    assert any(k.startswith("lora_unet_blocks_0_self_attn_q.") for k in keys)
    assert all(k.startswith("lora_unet_blocks_") for k in keys), keys
    pipe = local_pipeline(tiny_wan.diffusers_dir)
    before = _video(pipe)
    assert lora_load_problems(pipe, tmp_path / "out" / "lora.safetensors") == []
    assert np.abs(_video(pipe) - before).max() > 1e-3


def test_without_the_latent_cache_clips_are_read_at_each_step_and_a_sample_is_drawn(tiny_wan, tmp_path):
    data = write_clips_and_an_image(tmp_path / "clips", PROMPT)
    config = _config(tiny_wan, data, tmp_path, latent_caching=False, frame_rate=12.0, sample_after=1, sample_after_unit="EPOCH",
                     samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2}])
    _, events = run_until_done(config, tmp_path)
    assert len([e for e in events if e["type"] == "metrics" and "loss" in e]) == 4
    samples = [e for e in events if e["type"] == "sample"]
    assert samples and all(e["path"].endswith(".mp4") for e in samples)  # a clip of the run's 5 frames, not a still
    assert probe_clip(samples[-1]["path"], FrameSampling(frames=100, step=1, fps=1000.0)).available == 5


@pytest.mark.parametrize("weights", ["FLOAT_8", "NFLOAT_4"])
def test_a_quantized_transformer_trains(tiny_wan, tmp_path, weights):
    """In this process: the transformer stored in 8 or 4 bits (its embedders kept in the compute
    type, as the time embedder casts the timestep to its weights' type) trains a LoRA."""
    data = tmp_path / "two"
    for i in range(2):
        write_clip(data / f"clip{i}.mp4", frames=5, seed=i)
    config = _config(tiny_wan, data, tmp_path, train_dtype="FLOAT_32")
    config["transformer"]["weight_dtype"] = weights
    losses = losses_with_fixed_noise(config, tmp_path)
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_a_folder_of_clips_alone_trains_masked_from_the_cli_with_moving_windows(tiny_wan, tmp_path):
    """What a video user brings: a folder of clips only (no image), one of them with a painted mask
    and longer than Frames (its window moves: the random clip window, on by default), trained
    headless. The start check takes the folder, and the long clip's steps train with its mask."""
    from PIL import Image
    from safetensors.torch import load_file

    data = tmp_path / "clips"
    write_clip(data / "long.mp4", frames=48, seed=1)  # 2 s: its 5-frame window can move
    write_clip(data / "short.webm", frames=5, codec="libvpx-vp9")
    for name in ("long", "short"):
        (data / f"{name}.txt").write_text(PROMPT)
    mask = Image.new("L", (32, 32), 0)
    mask.paste(255, (0, 0, 16, 32))
    mask.save(data / "long-masklabel.png")
    config = _config(tiny_wan, data, tmp_path, masked_training=True, unmasked_weight=0.0, epochs=2, debug_mode=True,
                     debug_dir=str(tmp_path / "debug"))
    train_from_cli(config, tmp_path)
    assert any(k.startswith("lora_unet_blocks_0_") for k in load_file(str(tmp_path / "out" / "lora.safetensors")))
    masks = [p.name for p in (tmp_path / "debug").rglob("*-mask.png")]
    assert any("long" in name for name in masks), masks
