"""The parts of a model (models/sampling_parts.py) are parked for sampling and put back as they were, also when sampling
fails; every family but Stable Cascade sends its text encoders back to RAM once the prompt is
encoded, before its denoiser runs."""

import pytest
import torch
from PIL import Image

from ot_gradio.models import sampling_parts
from ot_gradio.models.sampling_parts import exact_size, generation_size, parked_for_sampling


def test_parts_are_put_back_after_a_failed_sample():
    parts = {"unet": torch.nn.Linear(2, 2), "vae": torch.nn.Linear(2, 2)}
    parts["unet"].train()
    parts["vae"].eval()
    with pytest.raises(RuntimeError, match="boom"), parked_for_sampling(parts, None, "unet") as places:
        assert places.device == torch.device("cpu")
        assert not any(m.training for m in parts.values())
        raise RuntimeError("boom")
    assert parts["unet"].training and not parts["vae"].training


def test_sizes():
    from PIL import Image

    assert generation_size(70, 64, 16) == (80, 64)
    image = Image.new("RGB", (64, 80))
    assert exact_size(image, 64, 70).size == (64, 70)
    assert exact_size(image, 64, 80) is image


# (model type, tiny model): the flow-matching families (FlowFamily.sample), SD 1.5 / SDXL (and the
# families built on them: SD 2, inpainting) and PixArt
FAMILIES = [("FLUX_DEV_1", "flux"), ("CHROMA_1", "chroma"), ("FLUX_2", "flux2-dev"), ("FLUX_2", "flux2-klein"), ("QWEN", "qwen-image"), ("KREA_2", "krea2"), ("ANIMA", "anima"),
            ("Z_IMAGE", "z-image"), ("STABLE_DIFFUSION_3", "sd3"), ("SANA", "sana"), ("WAN_2_1", "wan"), ("WAN_2_2_TI2V_5B", "wan22-5b"), ("HUNYUAN_VIDEO", "hunyuan_video"), ("LTX_2", "ltx2"), ("IDEOGRAM_4", "ideogram4"), ("HI_DREAM_FULL", "hidream"), ("STABLE_DIFFUSION_15", "sd15"),
            ("STABLE_DIFFUSION_XL_10_BASE", "sdxl"), ("PIXART_SIGMA", "pixart-sigma"),
            ("WAN_2_2_T2V_A14B", "wan22-a14b"), ("WAN_2_2_I2V_A14B", "wan22-i2v-a14b"), ("WAN_2_1_I2V", "wan21-i2v"), ("ERNIE", "ernie"), ("STABLE_DIFFUSION_20_DEPTH", "sd2-depth"),
            ("QWEN_IMAGE_EDIT", "qwen-image-edit")]


@pytest.mark.parametrize(("model_type", "tiny"), FAMILIES)
def test_text_encoders_leave_before_the_denoiser_runs(tiny_dir, tmp_path, monkeypatch, model_type, tiny):
    """As when a run parks its text encoders in RAM (`module_device` says they wait on the meta
    device here; moves are recorded, not made): each comes to the device for the encoding and is
    sent back before the transformer's first call, and the pipeline, without them, still makes
    the image on the device."""
    from ot_gradio.models.registry import get_family

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    names = set(model.text_encoder_names)
    events = []
    for name, module in model.parts.items():
        monkeypatch.setattr(module, "to", lambda device, name=name, module=module: (events.append((name, torch.device(device).type)), module)[1])
    real_device = sampling_parts.module_device
    parts = {id(m): n for n, m in model.parts.items()}
    monkeypatch.setattr(sampling_parts, "module_device", lambda m: torch.device("meta") if parts.get(id(m)) in names else real_device(m))
    hook = getattr(model, model.denoiser).register_forward_pre_hook(lambda *_: events.append(("transformer", "runs")))
    pipes, pipeline = [], model.pipeline
    monkeypatch.setattr(model, "pipeline", lambda *a, **k: pipes.append(pipeline(*a, **k)) or pipes[-1])
    if model.control_image or model.image_to_video:  # an editing (image-to-video) family's sample edits an image (the Qwen2.5-VL encoder reads it too)
        Image.new("RGB", (40, 24), (200, 30, 30)).save(tmp_path / "control.png")
        model.default_control_image = str(tmp_path / "control.png")
    image = model.sample("a red circle", height=32, width=32, steps=1, cfg_scale=2.0, device="cpu")
    hook.remove()
    frames = image if model.frame_step else [image]  # a video family: a clip's frames
    assert all(frame.size == (32, 32) for frame in frames)
    # one step still makes an image (NaN latents, e.g. a schedule stretched from one sigma, decode to all black)
    assert all(len(set(frame.getdata())) > 1 for frame in frames), "a constant image: NaN latents?"
    # the pipeline ran without them, so its device came from the parts on the device, not from RAM
    assert pipes and all(getattr(pipes[-1], name) is None for name in names)
    first_step = events.index(("transformer", "runs"))
    for name in names:
        assert events.index((name, "cpu")) < first_step  # on the device for the encoding
        assert events.index((name, "meta"), events.index((name, "cpu"))) < first_step, events  # and back where it waited


@pytest.mark.parametrize(("model_type", "tiny"), FAMILIES)
def test_a_sample_with_the_parts_in_the_types_a_gpu_loads_them_in(tiny_dir, tmp_path, model_type, tiny):
    """The presets load the denoiser and the text encoders in half types and most VAEs in FLOAT_32
    (a FLOAT_16 UNet beside a FLOAT_32 VAE; in a FLOAT_16 run the T5 / LLM text encoders and
    LTX-2's connectors at the bfloat16 fallback beside a float16 denoiser); a GPU loads them so, a
    CPU all in float32. Samples run outside autocast: each part must get its inputs in its type
    (diffusers' SD pipelines hand the VAE the latents in the UNet's type, the denoiser the prompt
    in the text encoder's)."""
    from ot_gradio.models.registry import get_family

    model = get_family(model_type).load(f"tiny:{tiny}", offline=True)
    # the parts and what loads with them in their type (Ideogram 4's unconditional transformer, LTX-2's connectors)
    modules = {**model.parts, **getattr(model, "saved_parts", {}), **{n: getattr(model, n) for n in getattr(model, "resident_modules", ())}}
    denoisers = {model.denoiser, "transformer_2", "unconditional_transformer"}
    for name, module in modules.items():
        if name != "vae":
            module.to(torch.float16 if name in denoisers else torch.bfloat16)
    if model.control_image or model.image_to_video:
        Image.new("RGB", (40, 24), (200, 30, 30)).save(tmp_path / "control.png")
        model.default_control_image = str(tmp_path / "control.png")
    image = model.sample("a red circle", height=32, width=32, steps=1, cfg_scale=2.0, device="cpu")
    frames = image if model.frame_step else [image]
    assert all(frame.size == (32, 32) and len(set(frame.getdata())) > 1 for frame in frames)


def test_the_denoiser_takes_its_inputs_in_its_type_and_answers_in_the_callers():
    """Outside autocast a pipeline hands the denoiser the prompt states in the encoder's type and
    the latents in one of its choosing; the denoiser gets them in its type (and half-type
    timesteps; float32 ones keep their precision) and answers in the latents' type, and nothing is
    hooked afterwards."""
    from ot_gradio.models.sampling_parts import denoiser_in_its_dtype

    seen = []

    class Denoiser(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4).half()

        def forward(self, hidden_states, timestep, encoder_hidden_states=None, extra=()):
            seen.append((hidden_states.dtype, timestep.dtype, encoder_hidden_states.dtype, [e.dtype for e in extra]))
            return (self.proj(hidden_states + encoder_hidden_states),)

    denoiser = Denoiser()
    latents, t, states = torch.randn(1, 2, 4), torch.tensor([999.5]), torch.randn(1, 2, 4, dtype=torch.bfloat16)
    with denoiser_in_its_dtype(denoiser):
        (out,) = denoiser(latents, t, encoder_hidden_states=states, extra=[torch.randn(1, 3)])
        (same,) = denoiser(latents.half(), t, encoder_hidden_states=states.half())
        denoiser(latents.half(), t.bfloat16(), encoder_hidden_states=states.half())  # (Ideogram 4's: the other transformer's type)
    assert seen[0] == (torch.float16, torch.float32, torch.float16, [torch.float16])
    assert seen[2][1] == torch.float16
    assert out.dtype == torch.float32 and same.dtype == torch.float16
    assert not denoiser._forward_pre_hooks and not denoiser._forward_hooks
    with pytest.raises(RuntimeError):  # (as a pipeline would call it without: the types differ)
        denoiser(latents, t, encoder_hidden_states=states)
