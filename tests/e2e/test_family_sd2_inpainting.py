"""SD 2.x and the inpainting models end to end: a LoRA run in the worker process on each tiny
model, reloaded with the matching diffusers pipeline's `load_lora_weights`."""

import logging
import shutil

import pytest
import torch
from PIL import Image
from safetensors import safe_open

from ot_gradio.runner.supervisor import Supervisor

pytestmark = pytest.mark.slow

CASES = {
    # model type: (tiny model, diffusers pipeline, kohya base model version, v-prediction)
    "STABLE_DIFFUSION_20": ("sd2", "StableDiffusionPipeline", "sd_v2_v", True),
    "STABLE_DIFFUSION_21_BASE": ("sd2-base", "StableDiffusionPipeline", "sd_v2", False),
    "STABLE_DIFFUSION_15_INPAINTING": ("sd15-inpainting", "StableDiffusionInpaintPipeline", "sd_v1", False),
    "STABLE_DIFFUSION_20_INPAINTING": ("sd2-inpainting", "StableDiffusionInpaintPipeline", "sd_v2", False),
}


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from ot_gradio.models.tiny.sd2 import save_tiny_sd2, save_tiny_sd2_base
    from ot_gradio.models.tiny.sd_inpainting import save_tiny_sd2_inpainting, save_tiny_sd15_inpainting

    root = tmp_path_factory.mktemp("tiny-families")
    builders = {"sd2": save_tiny_sd2, "sd2-base": save_tiny_sd2_base, "sd15-inpainting": save_tiny_sd15_inpainting, "sd2-inpainting": save_tiny_sd2_inpainting}
    return {name: build(root / name) for name, build in builders.items()}


@pytest.fixture(scope="module")
def masked_shapes(shapes, tmp_path_factory):
    """Four of the demo shapes (square, so two steps of batch 2), every other one with a mask
    over its left half."""
    folder = tmp_path_factory.mktemp("masked-shapes")
    images = [p for p in sorted(shapes.glob("*.png")) if _size(p) == (64, 64)][:4]
    for i, image in enumerate(images):
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
        if i % 2 == 0:
            with Image.open(image) as img:
                mask = Image.new("L", img.size, 0)
                mask.paste(255, (0, 0, img.size[0] // 2, img.size[1]))
                mask.save(folder / f"{image.stem}-masklabel.png")
    return folder, len(images), (len(images) + 1) // 2


def _size(path):
    with Image.open(path) as img:
        return img.size


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _output(pipe, inpainting: bool):
    pipe.set_progress_bar_config(disable=True)
    extra = {"image": Image.new("RGB", (64, 64)), "mask_image": Image.new("L", (64, 64), 255)} if inpainting else {}
    g = torch.Generator().manual_seed(0)
    return pipe("a red circle", num_inference_steps=2, height=64, width=64, generator=g, output_type="np", **extra).images[0]


@pytest.mark.parametrize("model_type", list(CASES))
def test_lora_run_reloads_in_diffusers(model_type, lora_config, tiny_models, masked_shapes, tmp_path):
    import diffusers

    tiny, pipeline_name, base_version, v_prediction = CASES[model_type]
    inpainting = "INPAINTING" in model_type
    folder, image_count, mask_count = masked_shapes
    config = lora_config(
        model_type=model_type,
        base_model_name=str(tiny_models[tiny].diffusers_dir),
        concepts=[{"name": "shapes", "path": str(folder)}],
        epochs=1,
        learning_rate=1e-2,
        latent_caching=True,
        masked_training=inpainting,
        unmasked_probability=0.0,
    )
    sup = Supervisor(tmp_path / "ws")
    run = sup.start(config)
    assert sup.wait(run, timeout=300) == 0, run.log_tail()
    state = sup.state(run)
    assert state.status == "done" and state.samples, run.log_tail()  # the end of the run samples

    if inpainting:  # the masked images' latents were cached beside the images' own
        cached = list((tmp_path / "cache" / "latents").rglob("*.safetensors"))
        assert len(cached) == image_count + mask_count

    out = tmp_path / "out" / "lora.safetensors"
    with safe_open(str(out), "pt") as f:
        keys, meta = list(f.keys()), f.metadata()
    assert keys and all(k.startswith(("lora_unet_", "lora_te_")) for k in keys)
    assert meta["ss_base_model_version"] == base_version and meta["ss_v2"] == str(base_version.startswith("sd_v2"))
    assert meta.get("ss_v_parameterization") == ("True" if v_prediction else None)

    pipe = getattr(diffusers, pipeline_name).from_pretrained(str(tiny_models[tiny].diffusers_dir), safety_checker=None)
    assert (pipe.scheduler.config.prediction_type == "v_prediction") == v_prediction
    before = _output(pipe, inpainting)
    handler = _Warnings()
    loggers = [logging.getLogger(name) for name in ("diffusers", "peft", "transformers")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        pipe.load_lora_weights(str(out))
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    bad = [m for m in handler.messages if any(w in m.lower() for w in ("unexpected", "not found", "no lora keys", "missing"))]
    assert not bad, bad
    after = _output(pipe, inpainting)
    assert abs(after - before).max() > 1e-3  # the trained LoRA changes the image
