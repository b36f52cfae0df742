"""`attention_mechanism` on every family's denoiser (models/attention.py): what the config's
description of the family says reaches its attention (`FamilyInfo.attention`, which the doctor
and the page's dropdown read) is what the loaded model takes, and FLEX really runs through
PyTorch's FlexAttention in a sample; the others are refused with the field's name, not ignored."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from ot_gradio.config.families import family_info
from tests.models.test_common_sampling import FAMILIES


@pytest.mark.parametrize(("model_type", "tiny"), FAMILIES)
def test_flex_reaches_the_attention_the_description_says_it_does(tiny_dir, tmp_path, monkeypatch, model_type, tiny):
    import diffusers.models.attention_dispatch as dispatch

    from ot_gradio.models.registry import get_family

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    if "FLEX" not in family_info(model_type).attention:
        with pytest.raises(ValueError, match=r"^attention_mechanism: FLEX "):
            model.set_attention("FLEX", "cpu")
        model.set_attention("SDP", "cpu")
        return
    calls = []
    flex = dispatch.flex_attention.flex_attention
    monkeypatch.setattr(dispatch.flex_attention, "flex_attention", lambda *a, **k: calls.append(1) or flex(*a, **k))
    model.set_attention("FLEX", "meta")  # the memory planner's run: the fused kernel it counts is SDP's
    modules = model.attention_modules()
    assert all(p._attention_backend == "native" for m in modules for p in processors(m))
    with pytest.raises(ValueError, match="^attention_mechanism: FLEX needs a CUDA GPU"):  # it has no backward pass on the CPU
        model.set_attention("FLEX", "cpu")
    try:
        model.set_attention("FLEX", "cuda")  # (for a run on a GPU: the device is only checked; the sample runs on the CPU)
        # every transformer that samples takes it (Wan 2.2 A14B's idle expert, Ideogram 4's unconditional one)
        assert len(modules) == 1 + (model_type in ("WAN_2_2_T2V_A14B", "WAN_2_2_I2V_A14B", "IDEOGRAM_4"))
        assert all(p._attention_backend == "flex" for m in modules for p in processors(m))
        sample_with_flex(model, tmp_path)
    finally:
        model.set_attention("SDP", "cpu")  # diffusers keeps the last backend set active for the whole process
    assert calls


def sample_with_flex(model, tmp_path) -> None:
    if model.control_image or model.image_to_video:
        Image.new("RGB", (40, 24), (200, 30, 30)).save(tmp_path / "control.png")
        model.default_control_image = str(tmp_path / "control.png")
    image = model.sample("a red circle", height=32, width=32, steps=1, cfg_scale=2.0, device="cpu")
    frames = image if model.frame_step else [image]
    assert all(len(set(frame.getdata())) > 1 for frame in frames)


def processors(module: torch.nn.Module) -> list:
    found = [getattr(m, "processor", None) for m in module.modules()]
    return [p for p in found if p is not None and hasattr(p, "_attention_backend")]


def test_the_classic_processors_refuse_flex_by_name_and_plan_a_gpu_run_on_meta():
    from diffusers.models.attention_processor import AttnProcessor2_0

    from ot_gradio.models.attention import classic_processor

    with pytest.raises(ValueError, match=r"^attention_mechanism: FLEX reaches the transformers .*; use SDP"):
        classic_processor("FLEX", "cuda")
    with pytest.raises(ValueError, match=r"^attention_mechanism: unknown value 'CUDNN'"):
        classic_processor("CUDNN", "cuda")
    with pytest.raises(ValueError, match=r"^attention_mechanism: FLASH needs a CUDA GPU"):
        classic_processor("FLASH", "cpu")
    # the memory planner's run of a GPU run (meta): SDP, whose kernel it counts as the fused one
    assert classic_processor("FLASH", "meta") is AttnProcessor2_0 and classic_processor("XFORMERS", "meta") is AttnProcessor2_0


@pytest.mark.parametrize(("model_type", "tiny"), [("CHROMA_1", "chroma"), ("ANIMA", "anima")])
def test_a_lora_steps_loss_with_flex_is_sdps(tiny_dir, monkeypatch, model_type, tiny):
    """A training step's prediction through FlexAttention (Chroma's prompt mask as its score mask,
    Anima's processors by diffusers' active backend) gives SDP's loss. (Its backward pass runs on
    a GPU only: PyTorch has none on the CPU.)"""
    import diffusers.models.attention_dispatch as dispatch

    from ot_gradio.config.enums import DataType
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.batches import Batch
    from ot_gradio.models.registry import get_family
    from ot_gradio.training.device import Precision
    from ot_gradio.training.methods import get_method

    cpu = torch.device("cpu")
    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    cfg = TrainConfig.model_validate({"model_type": model_type, "training_method": "LORA", "text_encoder": {"train": False}})
    method = get_method("LORA")
    for group in method.setup(model, cfg, cpu):
        for p in group.params:
            torch.nn.init.normal_(p, std=0.05)
    pixels = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    latents = model.encode_images(pixels, sample=False)
    calls = []
    flex = dispatch.flex_attention.flex_attention
    monkeypatch.setattr(dispatch.flex_attention, "flex_attention", lambda *a, **k: calls.append(1) or flex(*a, **k))

    @torch.no_grad()
    def loss(mechanism):
        model.set_attention(mechanism, "cuda")  # (the device is only checked)
        noise = lambda x: (torch.randn(x.shape, generator=torch.Generator().manual_seed(1)), torch.tensor([300, 700]))  # noqa: E731
        step = method.training_step(model, cfg, cpu, Precision(DataType.FLOAT_32, cpu), noise)
        batch = Batch(size=(32, 32), captions=["a red circle", "a blue square on white"], loss_weights=torch.ones(2),
                      image_paths=["a.png", "b.png"], latents=latents.clone())
        return step.loss(batch).item()

    try:
        flexed = loss("FLEX")
        assert calls
    finally:
        plain = loss("SDP")
    assert flexed == pytest.approx(plain, rel=1e-5)
