"""The memory planner's probe measures every family: its batch is prepared with
the VAE and the frozen text encoders for real, and the step then runs only the denoiser (and the
text encoders, when one trains) on meta tensors, so latent caching can use the VAE meanwhile. A
family whose step touched another part would fail here with "not measured" (and AUTO would fall
back to ON without saying why in a test). Where a family has a second text encoder, it trains (the
default), so the probe runs the text encoders on meta too."""

from __future__ import annotations

import pytest

from ot_gradio.config.validation import validate
from ot_gradio.training import memory_plan

GB = 1024**3

FAMILIES = [
    ("STABLE_DIFFUSION_15", "tiny:sd15"), ("STABLE_DIFFUSION_15_INPAINTING", "tiny:sd15-inpainting"),
    ("STABLE_DIFFUSION_21", "tiny:sd2"), ("STABLE_DIFFUSION_20_DEPTH", "tiny:sd2-depth"), ("STABLE_DIFFUSION_XL_10_BASE", "tiny:sdxl"),
    ("STABLE_DIFFUSION_XL_10_BASE_INPAINTING", "tiny:sdxl-inpainting"), ("WUERSTCHEN_2", "tiny:wuerstchen2"),
    ("STABLE_CASCADE_1", "tiny:cascade"), ("PIXART_ALPHA", "tiny:pixart"), ("PIXART_SIGMA", "tiny:pixart-sigma"),
    ("STABLE_DIFFUSION_3", "tiny:sd3"), ("FLUX_DEV_1", "tiny:flux"), ("FLUX_FILL_DEV_1", "tiny:flux-fill"),
    ("CHROMA_1", "tiny:chroma"), ("QWEN", "tiny:qwen-image"), ("KREA_2", "tiny:krea2"), ("ANIMA", "tiny:anima"), ("WAN_2_1", "tiny:wan"),
    ("WAN_2_2_TI2V_5B", "tiny:wan22-5b"), ("HUNYUAN_VIDEO", "tiny:hunyuan_video"), ("LTX_2", "tiny:ltx2"), ("IDEOGRAM_4", "tiny:ideogram4"),
    ("HI_DREAM_FULL", "tiny:hidream"),
    ("WAN_2_2_T2V_A14B", "tiny:wan22-a14b"), ("WAN_2_2_I2V_A14B", "tiny:wan22-i2v-a14b"), ("WAN_2_1_I2V", "tiny:wan21-i2v"),
    ("ERNIE", "tiny:ernie"), ("QWEN_IMAGE_EDIT", "tiny:qwen-image-edit"),
]


def _config(tmp_path, model_type: str, base: str, **extra):
    return validate({
        "model_type": model_type, "training_method": "LORA", "base_model_name": base, "resolution": "64", "batch_size": 2,
        "train_device": "cpu", "text_encoder": {"train": False}, "text_encoder_3": {"train": False}, "concepts": [{"name": "x", "path": str(tmp_path)}],
        "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "output_model_destination": str(tmp_path / "out.safetensors"), **extra,
    })


@pytest.mark.parametrize("model_type, base", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_every_family_is_measured(model_type, base, tmp_path, monkeypatch):
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    line = memory_plan.estimate_line(_config(tmp_path, model_type, base))
    assert "AUTO -> OFF" in line and "not measured" not in line and "activations " in line, line


def test_a_trained_text_encoder_runs_in_the_probe_with_the_frozen_one(tmp_path, monkeypatch):
    # SDXL with its first text encoder trained: both encoders run in the step (no cached embeddings)
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    config = _config(tmp_path, "STABLE_DIFFUSION_XL_10_BASE", "tiny:sdxl", text_encoder={"train": True},
                      text_encoder_2={"train": False})
    line = memory_plan.estimate_line(config)
    assert "text_encoder off (AUTO)" in line and "not measured" not in line, line


@pytest.mark.parametrize("data_type", ["NFLOAT_4", "INT_8", "FLOAT_8", "INT_W8A8", "FLOAT_W8A8"])
def test_a_quantized_denoiser_is_measured(data_type, tmp_path, monkeypatch):
    # bitsandbytes' layers need a quantization state their meta stand-ins have not: the probe runs
    # them as the linear layer they compute (OneTrainer's Flux preset: an NF4 transformer); the
    # float8 layers ask for autocast on the inputs' device, which meta is not (Qwen, Z-Image, Chroma)
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    # (in BFLOAT_16: the probe's stand-ins take the autocast type, but float8 codes stay float8 for the W8A8 layers)
    config = _config(tmp_path, "FLUX_DEV_1", "tiny:flux", transformer={"train": True, "weight_dtype": data_type}, train_dtype="BFLOAT_16")
    line = memory_plan.estimate_line(config)
    assert "AUTO -> OFF" in line and "not measured" not in line and ("int8" in line or "float8" in line), line


@pytest.mark.parametrize("model_type, base", [("CHROMA_1", "tiny:chroma"), ("ANIMA", "tiny:anima")])
def test_flex_attention_is_measured_as_the_fused_kernel_it_compiles_to(model_type, base, tmp_path, monkeypatch):
    # FlexAttention on meta tensors would build block masks (Chroma's prompt mask) and score the whole
    # matrix; the probe counts it as SDP's kernel, whose backend Anima's processors take from diffusers' active one
    import re

    from ot_gradio.models.flow_family import FlowFamily

    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    set_attention = FlowFamily.set_attention  # FLEX trains on a GPU only: the run here is checked as one
    monkeypatch.setattr(FlowFamily, "set_attention", lambda self, mechanism, device=None: set_attention(self, mechanism, "cuda"))

    def activations(mechanism: str) -> str:
        # a fixed 128 px square: the probe runs the largest bucket of a resolution, and tiny Anima's rope reaches
        # no further than 128 px a side (a 224 px wide bucket of 128 px is beyond it)
        line = memory_plan.estimate_line(_config(tmp_path, model_type, base, attention_mechanism=mechanism, resolution="128x128"))
        return re.search(r"activations ([\d.]+) MB", line).group(1)

    try:
        assert activations("FLEX") == activations("SDP")
    finally:
        from diffusers.models.attention_dispatch import _AttentionBackendRegistry

        _AttentionBackendRegistry.set_active_backend("native")


def test_a_video_familys_probe_runs_the_runs_frame_count(tmp_path, monkeypatch):
    # Wan: clips of 17 frames (5 latent frames) take more activation memory than 1 frame (at 128 px, where
    # the tokens' activations outweigh the tiny model's fixed ones)
    import re

    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)

    def activations(frames: str) -> float:
        line = memory_plan.estimate_line(_config(tmp_path, "WAN_2_1", "tiny:wan", frames=frames, batch_size=1, resolution="128"))
        return float(re.search(r"activations ([\d.]+) MB", line).group(1))

    assert activations("17") > 1.5 * activations("1")


def test_ltx2s_text_connectors_are_counted_on_the_device(tmp_path, monkeypatch):
    """The connectors are not a config part but stay on the device with the parts."""
    monkeypatch.setattr(memory_plan, "free_memory", lambda device: 100 * GB)
    line = memory_plan.estimate_line(_config(tmp_path, "LTX_2", "tiny:ltx2"))
    assert "connectors" in line, line
