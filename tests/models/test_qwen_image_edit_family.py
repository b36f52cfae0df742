"""The Qwen-Image-Edit family on the tiny model: the prompt read with its control image exactly as
QwenImageEditPipeline encodes it, predict (control latents after the noisy ones, output cut back)
reproducing the pipeline's denoising, a sample equal to the pipeline's edit, and what is checked
before a run (a control image somewhere in the concepts, a sample's control image; no text cache)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from ot_gradio.models.qwen_image_edit import EDIT_TEMPLATE, QwenImageEdit, sample_size
from tests.models.family_checks import family_fixtures

PROMPT = "make the circle blue"
tiny_edit_paths, edit = family_fixtures("qwen-image-edit", QwenImageEdit, "tiny_edit_paths", "edit")
tiny_plus_paths, plus = family_fixtures("qwen-image-edit-plus", QwenImageEdit, "tiny_plus_paths", "plus")


def _control() -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8))  # 56 x 40: the pipeline resizes it to ~1 MP


class _image_positions:
    """The pipeline's text encoder told which tokens are the image's (`mm_token_type_ids`, as
    transformers' Qwen2VLProcessor returns it; transformers 4 found them from the image token), so
    that they get Qwen2.5-VL's 3-D positions, as the model was trained and ComfyUI reads it."""

    def __init__(self, encoder):
        self.encoder, self.forward = encoder, encoder.forward

    def __enter__(self):
        image_token = self.encoder.config.image_token_id

        def forward(*args, input_ids=None, pixel_values=None, **kwargs):
            if pixel_values is not None and "mm_token_type_ids" not in kwargs:
                kwargs["mm_token_type_ids"] = (input_ids == image_token).long()
            return self.forward(*args, input_ids=input_ids, pixel_values=pixel_values, **kwargs)

        self.encoder.forward = forward

    def __exit__(self, *exc):
        self.encoder.forward = self.forward


@pytest.mark.parametrize("variant", ["edit", "plus"])
def test_prompt_with_its_control_image_and_predict_reproduce_the_pipeline(variant, request):
    """Qwen-Image-Edit, and Edit Plus (2511: `zero_cond_t`), whose text encoder sees the image at
    about 384 x 384 pixels (the pipeline's condition size); the image's tokens at their 3-D
    positions (the pipeline's encoder told them, as transformers 4 found them)."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import calculate_shift

    from ot_gradio.data.pixels import pixels_tensor
    from ot_gradio.models.flow_family import pack_latents, unpack_latents

    edit = request.getfixturevalue(variant)
    pipe = edit.pipeline()
    image = _control()
    resized = image.resize(sample_size(*image.size), resample=Image.Resampling.LANCZOS)
    assert resized.size == (1216, 864)  # diffusers' calculate_dimensions(1024 * 1024, 56 / 40)
    condition = image.resize((448, 320), resample=Image.Resampling.LANCZOS)  # calculate_dimensions(384 * 384, 56 / 40)
    given = resized if variant == "edit" else [condition]
    with torch.no_grad():
        flat, _ = pipe.encode_prompt(PROMPT, image=given, device="cpu")
        with _image_positions(pipe.text_encoder):
            theirs, theirs_mask = pipe.encode_prompt(PROMPT, image=given, device="cpu")
        hidden, mask = edit.trimmed(edit.encode_text([PROMPT], control=[resized if variant == "edit" else image]))
    assert theirs_mask is None and mask is None
    torch.testing.assert_close(hidden, theirs)
    # the pipeline under transformers 5 passes no mm_token_type_ids: its image tokens get a text's 1-D positions
    assert not torch.allclose(hidden, flat, atol=1e-3)

    noise = torch.randn(1, 4, 4, 6, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = pipe(image=image, prompt_embeds=hidden, true_cfg_scale=1.0, latents=pack_latents(noise), height=32, width=48,
                   num_inference_steps=3, output_type="latent").images
        control = edit.encode_conditioning(pixels_tensor(resized)[None])
        assert control.shape == (1, 4, 108, 152)
        scheduler = type(edit.scheduler).from_config(edit.scheduler.config)
        mu = calculate_shift(edit.image_seq_len(noise), *(edit.scheduler.config[k] for k in ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")))
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / 3, 3), mu=mu)
        sigmas = scheduler.sigmas.tolist()
        x, batch = noise.clone(), SimpleNamespace(conditioning_latents=control)
        cond = {"encoder_hidden_states": hidden, "attention_mask": torch.ones(hidden.shape[:2], dtype=torch.bool)}
        for t, t_next in zip(sigmas[:-1], sigmas[1:], strict=True):
            x = x + (t_next - t) * edit.predict(x, torch.tensor([t]), cond, batch)
    torch.testing.assert_close(x, unpack_latents(out, 4, 6), atol=1e-5, rtol=1e-5)


def test_a_sample_is_the_pipelines_edit_and_needs_a_control_image(edit, tmp_path):
    image = _control()
    image.save(tmp_path / "c.png")
    ours = edit.sample(PROMPT, height=32, width=48, steps=2, cfg_scale=1.0, seed=5, control_image=str(tmp_path / "c.png"))
    pipe = edit.pipeline()
    theirs = pipe(image=image, prompt=PROMPT, true_cfg_scale=1.0, height=32, width=48, num_inference_steps=2,
                  generator=torch.Generator().manual_seed(5)).images[0]
    assert ours.size == theirs.size == (48, 32)
    assert np.abs(np.asarray(ours, dtype=np.int16) - np.asarray(theirs, dtype=np.int16)).max() <= 1
    with pytest.raises(ValueError, match="control image"):
        edit.sample(PROMPT, height=32, width=32, steps=1)


def test_pairs_and_sample_control_images_are_checked_before_the_run_and_the_text_cache_is_off(tmp_path):
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.validation import validate
    from ot_gradio.data.text_cache import text_cache_problem

    sample = {"prompt": "x", "control_image": str(tmp_path / "missing.png")}
    found = errors(validate({"model_type": "QWEN_IMAGE_EDIT", "samples": [sample]}))
    assert f"samples[0].control_image: file '{tmp_path / 'missing.png'}' does not exist." in found
    plain = errors(validate({"model_type": "QWEN", "samples": [sample]}))
    assert any(p.startswith("samples[0].control_image: QWEN samples from a prompt alone") for p in plain)
    (tmp_path / "data").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "data" / "a.png")
    concepts = [{"name": "c", "path": str(tmp_path / "data")}]
    assert any(p.startswith("concepts: no image of the enabled concepts has a control image")
               for p in errors(validate({"model_type": "QWEN_IMAGE_EDIT", "concepts": concepts})))
    Image.new("RGB", (8, 8)).save(tmp_path / "data" / "a-control.jpg")
    assert not [p for p in errors(validate({"model_type": "QWEN_IMAGE_EDIT", "concepts": concepts})) if "control image" in p]
    ok = {"latent_caching": True, "trained_text_parts": set(), "uses_embeddings": False, "concepts": []}
    assert text_cache_problem(**ok) is None
    assert "control image" in text_cache_problem(**ok, reads_images=True)


def test_edit_plus_loads_as_such_and_a_sample_is_its_pipelines_edit(plus, tmp_path):
    """A QwenImageEditPlusPipeline folder (2509 / 2511) loads as QwenImageEditPlus, whose prompt
    names "Picture 1" (another reading than Qwen-Image-Edit's), and samples its pipeline's edit."""
    from ot_gradio.models.qwen_image_edit import QwenImageEditPlus

    assert type(plus) is QwenImageEditPlus and plus.transformer.config.zero_cond_t
    pipe = plus.pipeline()
    assert type(pipe).__name__ == "QwenImageEditPlusPipeline"
    image = _control()
    with torch.no_grad():
        hidden, _ = plus.trimmed(plus.encode_text([PROMPT], control=[image]))
        plus.prompt_template = EDIT_TEMPLATE
        edit_reading, _ = plus.trimmed(plus.encode_text([PROMPT], control=[image]))
        del plus.prompt_template
    assert edit_reading.shape[1] < hidden.shape[1]

    image.save(tmp_path / "c.png")
    ours = plus.sample(PROMPT, height=32, width=48, steps=2, cfg_scale=1.0, seed=5, control_image=str(tmp_path / "c.png"))
    theirs = pipe(image=image, prompt=PROMPT, true_cfg_scale=1.0, height=32, width=48, num_inference_steps=2,
                  generator=torch.Generator().manual_seed(5)).images[0]
    assert np.abs(np.asarray(ours, dtype=np.int16) - np.asarray(theirs, dtype=np.int16)).max() <= 1


def test_another_pipelines_folder_is_refused(tiny_edit_paths, tmp_path):
    import json
    import shutil

    from ot_gradio.models.common import ModelLoadError

    folder = tmp_path / "other"
    shutil.copytree(tiny_edit_paths.diffusers_dir, folder)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "_class_name": "QwenImageEditInpaintPipeline"}))
    with pytest.raises(ModelLoadError, match="QwenImageEditInpaintPipeline model; QWEN_IMAGE_EDIT trains Qwen-Image-Edit models"):
        QwenImageEdit.load(str(folder), offline=True)
