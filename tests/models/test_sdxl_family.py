"""The SDXL family on the tiny model: loading, text encoding, size/crop conditioning from the data,
sampling, saving, and LoRA files that diffusers and ComfyUI's key rules accept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from ot_gradio.config.enums import DataType, ModelFormat, NoiseScheduler
from ot_gradio.config.schema import TrainConfig
from ot_gradio.data.batches import Batch
from ot_gradio.data.buckets import Bucketing
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.sdxl import StableDiffusionXL, StableDiffusionXLInpainting
from ot_gradio.training.device import Precision
from ot_gradio.training.diffusion import DiffusionStep
from ot_gradio.training.lora import lora_state_dict
from ot_gradio.training.lora_method import LoraMethod
from tests.e2e.runs import lora_load_problems
from tests.models.family_checks import add_random_lora, family_fixtures, pipeline_images

CPU = torch.device("cpu")
PROMPT = "a red circle"


tiny_sdxl_paths, sdxl = family_fixtures("sdxl", StableDiffusionXL, "tiny_sdxl_paths", "sdxl")


def _same_model(a, b) -> bool:
    for part in a.parts:
        sa, sb = a.parts[part].state_dict(), b.parts[part].state_dict()
        if sa.keys() != sb.keys() or not all(torch.equal(sa[k], sb[k].to(sa[k].dtype)) for k in sa):
            return False
    return True


_images = pipeline_images()


def _config(**values) -> TrainConfig:
    return TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_XL_10_BASE", **values})


# ------------------------------------------------------------------ loading


def test_tiny_model_has_sdxl_s_parts(sdxl):
    """Loading by name, by folder, from the single file: tests/models/test_families.py."""
    assert set(sdxl.parts) == {"unet", "text_encoder", "text_encoder_2", "vae"}
    assert type(sdxl.text_encoder_2).__name__ == "CLIPTextModelWithProjection"
    assert type(sdxl.noise_scheduler).__name__ == "DDPMScheduler"


def test_dtypes_per_part(tiny_sdxl_paths):
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True, dtypes={"text_encoder_2": torch.bfloat16})
    assert next(model.text_encoder_2.parameters()).dtype == torch.bfloat16
    assert next(model.text_encoder.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="text_encoder_3"):
        StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True, dtypes={"text_encoder_3": torch.float16})


def test_another_model_type_is_a_clear_error(tiny_sd15_paths, tiny_sdxl_paths):
    with pytest.raises(ModelLoadError, match="is not an SDXL model .*text_encoder_2"):
        StableDiffusionXL.load(str(tiny_sd15_paths.diffusers_dir), offline=True)
    with pytest.raises(ModelLoadError, match="takes 4 input channels but STABLE_DIFFUSION_XL_10_BASE_INPAINTING needs 9"):
        StableDiffusionXLInpainting.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)


def test_offline_single_file_without_config_names_the_sdxl_repo(tiny_sdxl_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelLoadError, match="stabilityai/stable-diffusion-xl-base-1.0"):
        StableDiffusionXL.load(str(tiny_sdxl_paths.single_file), offline=True, cache_dir=str(tmp_path))


# ------------------------------------------------------------------ text encoding


def test_encode_text_is_what_the_diffusers_pipeline_feeds_the_unet(sdxl):
    cond = sdxl.encode_text([PROMPT, "b"])
    assert cond["encoder_hidden_states"].shape == (2, 77, 32 + 48) and cond["text_embeds"].shape == (2, 24)
    embeds, _, pooled, _ = sdxl.pipeline().encode_prompt([PROMPT, "b"], device=CPU, do_classifier_free_guidance=False)
    torch.testing.assert_close(cond["encoder_hidden_states"], embeds, rtol=0, atol=0)
    torch.testing.assert_close(cond["text_embeds"], pooled, rtol=0, atol=0)


def test_layer_skip_per_encoder(tiny_sdxl_paths):
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    base = model.encode_text([PROMPT])["encoder_hidden_states"]
    model.layer_skips = {"text_encoder": 1, "text_encoder_2": 0}
    skipped = model.encode_text([PROMPT])["encoder_hidden_states"]
    ids = model.tokenizer([PROMPT], padding="max_length", max_length=77, return_tensors="pt").input_ids
    third_last = model.text_encoder(ids, output_hidden_states=True).hidden_states[-3]
    torch.testing.assert_close(skipped[..., :32], third_last, rtol=0, atol=0)
    torch.testing.assert_close(skipped[..., 32:], base[..., 32:], rtol=0, atol=0)  # encoder 2 untouched
    model.layer_skips = {"text_encoder": 1, "text_encoder_2": 1}  # as the pipeline's clip_skip=1 does for both
    embeds = model.pipeline().encode_prompt([PROMPT], device=CPU, do_classifier_free_guidance=False, clip_skip=1)[0]
    torch.testing.assert_close(model.encode_text([PROMPT])["encoder_hidden_states"], embeds, rtol=0, atol=0)
    with pytest.raises(ValueError, match="text_encoder_2_layer_skip: 3"):
        model.layer_skips = {"text_encoder_2": 3}  # the tiny bigG has 3 layers


def test_gradients_only_through_the_named_encoders(tiny_sdxl_paths):
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    model.text_encoder.requires_grad_(True)
    model.text_encoder_2.requires_grad_(True)
    cond = model.encode_text([PROMPT], grad={"text_encoder_2"})
    out = model.predict(torch.randn(1, 4, 8, 8), torch.tensor([500]), cond)
    out.pow(2).mean().backward()
    assert model.text_encoder.get_input_embeddings().weight.grad is None
    assert model.text_encoder_2.get_input_embeddings().weight.grad.abs().sum() > 0
    assert model.text_encoder_2.text_projection.weight.grad.abs().sum() > 0  # the pooled output conditions too


def test_caption_dropout_per_encoder(sdxl):
    step = DiffusionStep(sdxl, _config(text_encoder_2={"dropout_probability": 1.0}), CPU, Precision(DataType.FLOAT_32, CPU))
    texts = step.text_inputs([PROMPT, "b"])
    assert texts == {"text_encoder": [PROMPT, "b"], "text_encoder_2": ["", ""]}
    mixed = sdxl.encode_text(texts)["encoder_hidden_states"]
    torch.testing.assert_close(mixed[..., :32], sdxl.encode_text([PROMPT, "b"])["encoder_hidden_states"][..., :32])
    torch.testing.assert_close(mixed[..., 32:], sdxl.encode_text(["", ""])["encoder_hidden_states"][..., 32:])


def test_whole_caption_dropout_empties_every_encoders_caption_at_once(sdxl):
    """caption_dropout_probability (kohya's, ai-toolkit's, diffusion-pipe's): a dropped sample is
    empty for both encoders; the text cache holds that variant too."""
    torch.manual_seed(0)
    step = DiffusionStep(sdxl, _config(caption_dropout_probability=0.5), CPU, Precision(DataType.FLOAT_32, CPU))
    draws = [step.text_inputs(["a", "b"]) for _ in range(400)]
    pairs = [(t["text_encoder"][i], t["text_encoder_2"][i]) for t in draws for i in range(2)]
    assert all((one == "") == (two == "") for one, two in pairs)  # never one encoder alone
    assert sum(one == "" for one, _ in pairs) / len(pairs) == pytest.approx(0.5, abs=0.06)
    assert {"text_encoder": "", "text_encoder_2": ""} in step.text_variants("a")
    assert step.text_variants("a")[0] == {"text_encoder": "a", "text_encoder_2": "a"} and len(step.text_variants("a")) == 2


# ------------------------------------------------------------------ size and crop conditioning


def _capture_time_ids(model):
    seen = []

    def hook(module, args, kwargs):
        seen.append(kwargs["added_cond_kwargs"]["time_ids"].detach().clone())

    return seen, model.unet.register_forward_pre_hook(hook, with_kwargs=True)


def _batch(original_sizes, crops, size=(64, 48)):
    n = len(original_sizes)
    return Batch(
        size=size,
        captions=[PROMPT] * n,
        loss_weights=torch.ones(n),
        image_paths=[f"{i}.png" for i in range(n)],
        latents=torch.randn(n, 4, size[0] // 8, size[1] // 8, generator=torch.Generator().manual_seed(0)),
        original_sizes=original_sizes,
        crop_top_lefts=crops,
    )


def test_time_ids_are_the_batch_sizes_and_crops(sdxl):
    batch = _batch([(600, 400), (48, 64)], [(12, 0), (0, 5)])
    cond = sdxl.encode_text(batch.captions)
    seen, handle = _capture_time_ids(sdxl)
    try:
        with torch.no_grad():
            pred = sdxl.predict(batch.latents, torch.tensor([500, 500]), cond, batch)
            other = sdxl.predict(batch.latents, torch.tensor([500, 500]), cond, _batch([(64, 48), (64, 48)], [(0, 0), (0, 0)]))
    finally:
        handle.remove()
    assert seen[0].tolist() == [[600, 400, 12, 0, 64, 48], [48, 64, 0, 5, 64, 48]]
    assert not torch.allclose(pred, other)  # the UNet does use them


def _concept(tmp_path, **image):
    from ot_gradio.config.concept import ConceptConfig

    folder = tmp_path / "concept"
    folder.mkdir(exist_ok=True)
    Image.new("RGB", (100, 60), (200, 30, 30)).save(folder / "wide.png")
    (folder / "wide.txt").write_text(PROMPT)
    return ConceptConfig(name="wide", path=str(folder), image={"enable_crop_jitter": False, **image})


@pytest.mark.parametrize(("flip", "left"), [(False, 21), (True, 22)])
def test_training_step_conditions_on_the_true_size_and_crop(sdxl, tmp_path, flip, left):
    """A 100x60 image at 64 px: scaled to 107x64 to cover the bucket, its centre window starts 21
    px from the left (22 from the mirrored left when flipped)."""
    from ot_gradio.data import build_dataset

    concept = _concept(tmp_path, enable_fixed_flip=flip)
    dataset = build_dataset([concept], "64", 1, bucketing=Bucketing(enabled=False), seed=1)
    batch = dataset.epoch_batches(0)[0]
    assert batch.original_sizes == [(60, 100)] and batch.crop_top_lefts == [(0, left)]
    step = DiffusionStep(sdxl, _config(), CPU, Precision(DataType.FLOAT_32, CPU))
    seen, handle = _capture_time_ids(sdxl)
    try:
        with torch.no_grad():
            step.loss(batch)
    finally:
        handle.remove()
    assert seen[0].tolist() == [[60, 100, 0, left, 64, 64]]


# ------------------------------------------------------------------ sampling


@pytest.mark.parametrize("sampler", list(NoiseScheduler))
def test_sample_each_sampler(sdxl, sampler):
    image = sdxl.sample(PROMPT, "blurry", height=64, width=48, steps=2, cfg_scale=5.0, seed=3, sampler=sampler, device="cpu")
    assert image.size == (48, 64)


def test_sampling_embeddings_match_the_pipeline_prompt_encoding(sdxl):
    pipe = sdxl.pipeline(NoiseScheduler.EULER)
    for negative in ("", "blurry"):
        ours = _images(pipe, **sdxl.prompt_inputs(PROMPT, negative))
        theirs = _images(pipe, prompt=PROMPT, negative_prompt=negative or None)
        np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_samples_honour_the_clip_skip(tiny_sdxl_paths):
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    plain = model.sample(PROMPT, height=64, width=64, steps=2, seed=1)
    model.layer_skips = {"text_encoder_2": 1}
    assert np.asarray(model.sample(PROMPT, height=64, width=64, steps=2, seed=1)).tobytes() != np.asarray(plain).tobytes()


# ------------------------------------------------------------------ saving


def test_save_diffusers_and_single_file_reload(sdxl, tiny_sdxl_paths, tmp_path):
    import json

    folder = sdxl.save_diffusers(tmp_path / "out", DataType.FLOAT_32)
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == "StableDiffusionXLPipeline"
    assert _same_model(sdxl, StableDiffusionXL.load(str(folder), offline=True))
    path = sdxl.save_single_file(tmp_path / "model.safetensors", DataType.FLOAT_32)
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["modelspec.architecture"] == "stable-diffusion-xl-v1-base"
    assert _same_model(sdxl, StableDiffusionXL.load(str(path), offline=True, config_dir=str(tiny_sdxl_paths.diffusers_dir)))


def test_comfyuis_v_pred_markers_are_read_and_written(sdxl, tiny_sdxl_paths, tmp_path):
    """A v-prediction SDXL checkpoint (NoobAI-XL V-pred) carries ComfyUI's empty `v_pred` and
    `ztsnr` tensors: it loads as v-prediction with the zero-terminal-SNR schedule (it trained as
    epsilon before), and saving it, or an epsilon model trained with force_v_prediction, writes them
    back, which ComfyUI's `"v_pred" in state_dict` test reads."""
    from safetensors.torch import load_file, save_file

    from ot_gradio.training.device import Precision as P
    from ot_gradio.training.diffusion import configure_model

    marked = tmp_path / "noob-vpred.safetensors"
    save_file({**load_file(str(tiny_sdxl_paths.single_file)), "v_pred": torch.tensor([]), "ztsnr": torch.tensor([])}, str(marked))
    model = StableDiffusionXL.load(str(marked), offline=True, config_dir=str(tiny_sdxl_paths.diffusers_dir))
    assert model.prediction_type == "v_prediction"
    assert model.noise_scheduler.alphas_cumprod[-1].item() == pytest.approx(0.0, abs=1e-12)  # zero terminal SNR
    assert model.pipeline("EULER").scheduler.config.prediction_type == "v_prediction"
    plain = StableDiffusionXL.load(str(tiny_sdxl_paths.single_file), offline=True, config_dir=str(tiny_sdxl_paths.diffusers_dir))
    assert plain.prediction_type == "epsilon" and plain.noise_scheduler.alphas_cumprod[-1].item() > 1e-4
    with safe_open(str(model.save_single_file(tmp_path / "again.safetensors", DataType.FLOAT_32)), "pt") as f:
        assert {"v_pred", "ztsnr"} <= set(f.keys())
    with safe_open(str(plain.save_single_file(tmp_path / "eps.safetensors", DataType.FLOAT_32)), "pt") as f:
        assert not {"v_pred", "ztsnr"} & set(f.keys())
    configure_model(plain, _config(force_v_prediction=True), CPU, P(DataType.FLOAT_32, CPU))
    with safe_open(str(plain.save_single_file(tmp_path / "forced.safetensors", DataType.FLOAT_32)), "pt") as f:
        keys = set(f.keys())
    assert "v_pred" in keys and "ztsnr" not in keys


def test_edm_models_are_refused_by_name(tiny_sdxl_paths, tmp_path):
    """Playground v2.5 (a file with `edm_mean` / `edm_std`, or a folder with an EDM scheduler)
    would train on the wrong schedule: refused, saying why."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    marked = tmp_path / "playground.safetensors"
    save_file({**load_file(str(tiny_sdxl_paths.single_file)), "edm_mean": torch.zeros(1, 4, 1, 1), "edm_std": torch.ones(1, 4, 1, 1)},
              str(marked))
    with pytest.raises(ModelLoadError, match=r"is an EDM model .*its file holds edm_mean, edm_std"):
        StableDiffusionXL.load(str(marked), offline=True, config_dir=str(tiny_sdxl_paths.diffusers_dir))
    folder = shutil.copytree(tiny_sdxl_paths.diffusers_dir, tmp_path / "playground")
    from diffusers import EDMDPMSolverMultistepScheduler

    EDMDPMSolverMultistepScheduler().save_pretrained(folder / "scheduler")  # Playground v2.5's scheduler
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "scheduler": ["diffusers", "EDMDPMSolverMultistepScheduler"]}))
    with pytest.raises(ModelLoadError, match=r"its scheduler is EDMDPMSolverMultistepScheduler"):
        StableDiffusionXL.load(str(folder), offline=True)


def test_save_diffusers_half(sdxl, tmp_path):
    sdxl.save_diffusers(tmp_path / "half", DataType.FLOAT_16)
    with safe_open(str(tmp_path / "half" / "text_encoder_2" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    assert next(sdxl.text_encoder_2.parameters()).dtype == torch.float32


# ------------------------------------------------------------------ LoRA files


@pytest.fixture(scope="module")
def lora_model(tiny_sdxl_paths):
    """The tiny SDXL with LoRA on every layer of the UNet and both text encoders (non-zero up
    weights), through the LORA method as a run sets it up."""
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    base = _images(model.pipeline(), prompt=PROMPT)
    config = add_random_lora(model, ("unet", "text_encoder", "text_encoder_2"), lora_rank=4, lora_alpha=1.0,
                             text_encoder={"train": True}, text_encoder_2={"train": True})
    return model, config, base, _images(model.pipeline(), prompt=PROMPT)


def _save(lora_model, tmp_path, fmt):
    model, config, *_ = lora_model
    config = config.model_copy(update={"output_model_format": ModelFormat(fmt)})
    return LoraMethod().save(model, config, tmp_path / f"{fmt.lower()}.safetensors", {"ss_steps": "3"})


def _load_in_diffusers(tiny_sdxl_paths, path):
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl_paths.diffusers_dir), local_files_only=True)
    return pipe, lora_load_problems(pipe, path, ("diffusers", "transformers", "peft"), must_log=True)


@pytest.mark.parametrize("fmt", ["KOHYA_LORA", "SAFETENSORS"])
def test_diffusers_loads_our_lora_like_the_trained_model(lora_model, tiny_sdxl_paths, tmp_path, fmt):
    _, _, base, trained = lora_model
    pipe, problems = _load_in_diffusers(tiny_sdxl_paths, _save(lora_model, tmp_path, fmt))
    assert problems == []
    image = _images(pipe, prompt=PROMPT)
    np.testing.assert_allclose(image, trained, atol=1e-5)
    assert np.abs(image - base).max() > 1e-3


def test_kohya_names_are_sd_scripts_sdxl_names(lora_model, tmp_path):
    path = _save(lora_model, tmp_path, "KOHYA_LORA")
    with safe_open(str(path), "pt") as f:
        names = {k.split(".", 1)[0] for k in f.keys()}
        meta = f.metadata()
    assert meta["ss_base_model_version"] == "sdxl_base_v1-0" and meta["ss_v2"] == "False"
    assert {n.split("_")[1] for n in names} == {"unet", "te1", "te2"}
    for name in (
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj",
        "lora_te2_text_model_encoder_layers_2_mlp_fc2",
        "lora_te2_text_projection",
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q",
        "lora_unet_input_blocks_1_0_in_layers_2",
        "lora_unet_middle_block_1_proj_in",
        "lora_unet_output_blocks_2_2_conv",
        "lora_unet_label_emb_0_0",
    ):
        assert name in names, name
    assert not any("down_blocks" in n or "up_blocks" in n or n.startswith("lora_te_") for n in names)


# How ComfyUI (comfy/lora.py: model_lora_keys_unet / model_lora_keys_clip) resolves SDXL kohya
# names: the UNet takes any original-layout weight key with "." -> "_"; each CLIP takes six
# layers per encoder block and bigG also its text projection.
_COMFY_CLIP_LAYERS = {
    "mlp_fc1": "mlp.fc1",
    "mlp_fc2": "mlp.fc2",
    "self_attn_k_proj": "self_attn.k_proj",
    "self_attn_q_proj": "self_attn.q_proj",
    "self_attn_v_proj": "self_attn.v_proj",
    "self_attn_out_proj": "self_attn.out_proj",
}
_COMFY_RULES = [
    # (prefix, part, what the rest of the name may be)
    ("lora_unet_", "unet", "an original UNet weight key without .weight, dots as _"),
    ("lora_te1_text_model_encoder_layers_", "text_encoder", "<block>_<CLIP layer>"),
    ("lora_te2_text_model_encoder_layers_", "text_encoder_2", "<block>_<CLIP layer>"),
    ("lora_te2_text_projection", "text_encoder_2", "exactly"),
]


def _comfy_key_map(model, single_file: Path) -> dict[str, tuple[int, ...]]:
    """kohya layer name -> shape of the weight ComfyUI patches with it."""
    key_map: dict[str, tuple[int, ...]] = {}
    with safe_open(str(single_file), "pt") as f:
        for key in f.keys():
            if key.startswith("model.diffusion_model.") and key.endswith(".weight"):
                name = key.removeprefix("model.diffusion_model.").removesuffix(".weight").replace(".", "_")
                key_map["lora_unet_" + name] = tuple(f.get_slice(key).get_shape())
    for prefix, part in (("lora_te1_", "text_encoder"), ("lora_te2_", "text_encoder_2")):
        encoder = model.parts[part]
        layers = encoder.get_base_model() if hasattr(encoder, "get_base_model") else encoder
        layers = getattr(layers, "text_model", layers).encoder.layers
        for b, layer in enumerate(layers):
            for flat, dotted in _COMFY_CLIP_LAYERS.items():
                module = layer.get_submodule(dotted)
                module = getattr(module, "base_layer", module)
                key_map[f"{prefix}text_model_encoder_layers_{b}_{flat}"] = tuple(module.weight.shape)
    projection = model.text_encoder_2.text_projection
    key_map["lora_te2_text_projection"] = tuple(getattr(projection, "base_layer", projection).weight.shape)
    return key_map


def test_every_kohya_key_maps_onto_a_comfyui_weight(lora_model, sdxl, tmp_path):
    model = lora_model[0]
    key_map = _comfy_key_map(model, sdxl.save_single_file(tmp_path / "base.safetensors", DataType.FLOAT_32))
    with safe_open(str(_save(lora_model, tmp_path, "KOHYA_LORA")), "pt") as f:
        names = {k.split(".", 1)[0] for k in f.keys()}
        for name in names:
            assert any(name.startswith(prefix) for prefix, _, _ in _COMFY_RULES), name
            assert name in key_map, f"ComfyUI has no weight for {name}"
            down = f.get_tensor(f"{name}.lora_down.weight")
            up = f.get_tensor(f"{name}.lora_up.weight")
            target = key_map[name]
            assert (up.shape[0], down.shape[1]) == target[:2], name  # out and in features/channels
            assert tuple(down.shape[2:]) == target[2:], name  # a conv LoRA's down has the kernel
    from ot_gradio.training.lora import lora_layers

    assert len(names) == sum(len(lora_layers(model.parts[p])) for p in ("unet", "text_encoder", "text_encoder_2"))
    counts = {prefix: sum(n.startswith(prefix) for n in names) for prefix, _, _ in _COMFY_RULES}
    assert all(counts.values()), counts


@pytest.mark.parametrize("fmt", ["KOHYA_LORA", "SAFETENSORS"])
def test_continue_from_our_lora_file(lora_model, tiny_sdxl_paths, tmp_path, fmt):
    trained = lora_model[0]
    path = _save(lora_model, tmp_path, fmt)
    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir), offline=True)
    config = _config(lora_model_name=str(path), text_encoder={"train": True}, text_encoder_2={"train": True})
    LoraMethod().setup(model, config, CPU)
    for part in ("unet", "text_encoder", "text_encoder_2"):
        ours, theirs = lora_state_dict(model.parts[part]), lora_state_dict(trained.parts[part])
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours), part


# ------------------------------------------------------------------ inpainting


def test_inpainting_variant_takes_mask_and_masked_image(tiny_dir):
    model = StableDiffusionXLInpainting.load("tiny:sdxl-inpainting", offline=True)
    assert model.unet.config.in_channels == 9 and model.inpainting
    assert type(model.pipeline()).__name__ == "StableDiffusionXLInpaintPipeline"
    batch = _batch([(64, 48)], [(0, 0)])
    batch.pixels = torch.rand(1, 3, 64, 48) * 2 - 1
    batch.mask = torch.zeros(1, 1, 64, 48)
    batch.mask[..., :32, :] = 1.0  # repaint the top half
    batch.latent_mask = torch.nn.functional.interpolate(batch.mask, size=(8, 6))
    cond = model.encode_text(batch.captions)
    seen = []
    handle = model.unet.register_forward_pre_hook(lambda m, args, kwargs: seen.append(args[0]), with_kwargs=True)
    try:
        with torch.no_grad():
            pred = model.predict(batch.latents, torch.tensor([500]), cond, batch)
    finally:
        handle.remove()
    assert pred.shape == batch.latents.shape
    inputs = seen[0]
    assert inputs.shape[1] == 9
    torch.testing.assert_close(inputs[:, 4:5], batch.latent_mask)
    torch.testing.assert_close(inputs[:, 5:], model.encode_conditioning(batch.pixels, batch.mask))
    assert model.sample(PROMPT, height=64, width=64, steps=2).size == (64, 64)


def test_pooled_output_is_taken_at_end_of_text_even_with_added_tokens(tiny_sdxl_paths):
    """Real SDXL's bigG config has the legacy eos_token_id 2, for which transformers pools at the
    highest token id; an embedding's token has a higher id than end-of-text."""
    from ot_gradio.models.sdxl import StableDiffusionXL

    model = StableDiffusionXL.load(str(tiny_sdxl_paths.diffusers_dir))
    encoder, tokenizer = model.text_encoder_2, model.tokenizer_2
    tokenizer.add_tokens(["<tok>"])
    encoder.resize_token_embeddings(len(tokenizer))
    inner = getattr(encoder, "text_model", encoder)
    inner.eos_token_id = 2
    encoder.config.eos_token_id = 2
    ids = tokenizer(["a <tok> b"], padding="max_length", max_length=tokenizer.model_max_length, return_tensors="pt").input_ids
    eos = int((ids[0] == tokenizer.eos_token_id).nonzero()[0])
    assert int(ids[0].argmax()) != eos  # the legacy rule would pick the added token
    with torch.no_grad():
        last = encoder(ids).last_hidden_state
        expected = encoder.text_projection(last[0, eos])
        got = model.encode_text(["a <tok> b"])["text_embeds"][0]
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
