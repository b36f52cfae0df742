"""FINE_TUNE and EMBEDDING for SD 2.x, SD 1.5 and 2.0 inpainting, Würstchen 2, Stable Cascade, PixArt-α and -Σ,
Flux.1 dev, Flux.1 Fill (masked training on a dataset with masks) and Chroma,
each run by the real worker for two steps on the family's tiny model, the output reloaded with
diffusers' own loaders (SD 1.5 and SDXL: test_methods_sd15.py, test_methods_sdxl.py).

Fine-tunes: the reloaded trained parts equal the last backup's `trainable.safetensors` (written
right before the save) bit for bit, and the reloaded model's output differs from the base's.
Embeddings: the file has the keys docs/FORMATS.md names, the vectors moved from their initial
text, and the prompt with the tokens, loaded the way a user of that pipeline would, draws the
run's own last sample within 1/255.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from tests.e2e.runs import run_until_done

pytestmark = pytest.mark.slow

PROMPT = "a photo of <embedding>"


@dataclass(frozen=True)
class Family:
    tiny: str  # the tiny model's builder
    kind: str  # "sd", "wuerstchen", "cascade", "pixart" or "flux" (Flux.1 and Chroma)
    denoiser: str
    inpainting: bool = False
    pipeline: str = ""  # the diffusers pipeline class, where the kind has several
    t5_length: str = ""  # the config option of T5's token window (flux kind)
    masks: bool = False  # trains only with masked_training and a mask per image (Flux.1 Fill)


FAMILIES = {
    "STABLE_DIFFUSION_21": Family("sd2", "sd", "unet"),  # v-prediction
    "STABLE_DIFFUSION_20_BASE": Family("sd2-base", "sd", "unet"),
    "STABLE_DIFFUSION_15_INPAINTING": Family("sd15-inpainting", "sd", "unet", inpainting=True),
    "STABLE_DIFFUSION_20_INPAINTING": Family("sd2-inpainting", "sd", "unet", inpainting=True),
    "WUERSTCHEN_2": Family("wuerstchen2", "wuerstchen", "prior"),
    "STABLE_CASCADE_1": Family("cascade", "cascade", "prior"),
    "PIXART_ALPHA": Family("pixart", "pixart", "transformer", pipeline="PixArtAlphaPipeline"),
    "PIXART_SIGMA": Family("pixart-sigma", "pixart", "transformer", pipeline="PixArtSigmaPipeline"),
    "FLUX_DEV_1": Family("flux", "flux", "transformer", pipeline="FluxPipeline", t5_length="text_encoder_2_sequence_length"),
    "FLUX_FILL_DEV_1": Family("flux-fill", "flux", "transformer", inpainting=True, pipeline="FluxFillPipeline",
                              t5_length="text_encoder_2_sequence_length", masks=True),
    "CHROMA_1": Family("chroma", "flux", "transformer", pipeline="ChromaPipeline", t5_length="text_encoder_sequence_length"),
}
CFG = {"sd": 7.0, "wuerstchen": 2.0, "cascade": 2.0, "pixart": 7.0, "flux": 3.5}
T5_TOKENS = 32  # the flux kind's T5 window, in training, in our samples and in the pipelines' calls


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model of a family, built on first use (model type -> TinyModelPaths)."""
    from ot_gradio.models.tiny.chroma import save_tiny_chroma
    from ot_gradio.models.tiny.flux import save_tiny_flux
    from ot_gradio.models.tiny.flux_fill import save_tiny_flux_fill
    from ot_gradio.models.tiny.pixart import save_tiny_pixart
    from ot_gradio.models.tiny.pixart_sigma import save_tiny_pixart_sigma
    from ot_gradio.models.tiny.sd2 import save_tiny_sd2, save_tiny_sd2_base
    from ot_gradio.models.tiny.sd_inpainting import save_tiny_sd2_inpainting, save_tiny_sd15_inpainting
    from ot_gradio.models.tiny.stable_cascade import save_tiny_cascade
    from ot_gradio.models.tiny.wuerstchen import save_tiny_wuerstchen2

    builders = {"sd2": save_tiny_sd2, "sd2-base": save_tiny_sd2_base, "sd15-inpainting": save_tiny_sd15_inpainting,
                "sd2-inpainting": save_tiny_sd2_inpainting,
                "wuerstchen2": save_tiny_wuerstchen2, "cascade": save_tiny_cascade, "pixart": save_tiny_pixart,
                "pixart-sigma": save_tiny_pixart_sigma, "flux": save_tiny_flux, "flux-fill": save_tiny_flux_fill,
                "chroma": save_tiny_chroma}
    root, built = tmp_path_factory.mktemp("tiny-matrix"), {}

    def get(model_type: str):
        name = FAMILIES[model_type].tiny
        if name not in built:
            built[name] = builders[name](root / name)
        return built[name]

    return get


@pytest.fixture(scope="module")
def few_shapes(shapes, tmp_path_factory):
    """Four square demo shapes: one epoch of batch 2 is two steps."""
    folder = tmp_path_factory.mktemp("few-shapes")
    for image in [p for p in sorted(shapes.glob("*.png")) if Image.open(p).size == (64, 64)][:4]:
        shutil.copy(image, folder / image.name)
        shutil.copy(image.with_suffix(".txt"), folder / image.with_suffix(".txt").name)
    return folder


@pytest.fixture(scope="module")
def data(few_shapes, tmp_path_factory):
    """The dataset of a family: the four shapes, with a mask over each one's left half for the
    families that train only with masks (a family's `masks`)."""
    masked = tmp_path_factory.mktemp("few-masked-shapes")
    for image in few_shapes.iterdir():
        shutil.copy(image, masked / image.name)
        if image.suffix == ".png":
            mask = Image.new("L", (64, 64), 0)
            mask.paste(255, (0, 0, 32, 64))
            mask.save(masked / f"{image.stem}-masklabel.png")
    return lambda model_type: masked if FAMILIES[model_type].masks else few_shapes


def _config(model_type, paths, data, tmp_path, **overrides):
    family = FAMILIES[model_type]
    config = {
        "model_type": model_type, "train_device": "cpu", "train_dtype": "FLOAT_32",
        "workspace_dir": str(tmp_path / "ws"), "cache_dir": str(tmp_path / "cache"),
        "concepts": [{"name": "shapes", "path": str(data)}],
        "resolution": "64", "batch_size": 2, "epochs": 1, "learning_rate_warmup_steps": 0,
        family.denoiser: {"gradient_checkpointing": False},
        "samples": [], "sample_image_format": "PNG", "sample_after": 0, "sample_after_unit": "NEVER",
        "backup_after": 0, "backup_after_unit": "NEVER", "tensorboard": False,
    }
    if family.kind in ("wuerstchen", "cascade"):
        root = paths.diffusers_dir.parent
        effnet = root / "effnet" if family.kind == "wuerstchen" else root / "decoder" / "effnet_encoder.safetensors"
        config.update(base_model_name=str(root / "prior"), decoder={"model_name": str(root / "decoder")},
                      effnet_encoder={"model_name": str(effnet)})
    else:
        config["base_model_name"] = str(paths.diffusers_dir)
    if family.kind == "pixart":
        config["text_encoder_sequence_length"] = 32
    if family.kind == "flux":
        config[family.t5_length] = T5_TOKENS
    if family.masks:
        config["masked_training"] = True
    for key, value in overrides.items():  # part sections merge, so {"unet": {"train": True}} keeps the rest
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    return config


def _assert_equal_weights(module, trained, part):
    weights = {k[len(part) + 1:]: v for k, v in trained.items() if k.startswith(part + ".")}
    state = module.state_dict()
    assert weights and set(weights) <= set(state), f"{part}: {sorted(set(weights) - set(state))[:3]}"
    different = [k for k, v in weights.items() if not torch.equal(state[k].float(), v.float())]
    assert not different, f"{part}: {len(different)} weights differ from the trained ones, e.g. {different[:3]}"


def _last_sample(run, events):
    path = [e for e in events if e["type"] == "sample"][-1]["path"]
    return np.asarray(Image.open(run.samples / path.split("/")[-1]).convert("RGB")).astype(int)


def _pixels(image) -> np.ndarray:
    return np.asarray(image.convert("RGB")).astype(int)


# ---------------------------------------------------------------- loading and drawing with diffusers


def _ddim(pipe):
    from diffusers import DDIMScheduler

    pipe.scheduler = DDIMScheduler.from_config(dict(pipe.scheduler.config), clip_sample=False)  # our samples' DDIM
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _sd_pipeline(family, source, config_dir=None):
    """StableDiffusion(Inpaint)Pipeline from a folder, or from a single file with the tiny folder's configs."""
    import diffusers

    cls = diffusers.StableDiffusionInpaintPipeline if family.inpainting else diffusers.StableDiffusionPipeline
    if config_dir is None:
        return _ddim(cls.from_pretrained(str(source), local_files_only=True, safety_checker=None))
    return _ddim(cls.from_single_file(str(source), config=str(config_dir), local_files_only=True, safety_checker=None))


def _sd_image(family, pipe, prompt, seed=3):
    # text-to-image with an inpainting model: a blank image under a full mask, as our sampler does
    extra = {"image": Image.new("RGB", (64, 64)), "mask_image": Image.new("L", (64, 64), 255), "strength": 1.0} if family.inpainting else {}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        out = pipe(prompt, height=64, width=64, num_inference_steps=2, guidance_scale=CFG["sd"], generator=g, output_type="pil", **extra)
    return _pixels(out.images[0])


def _pixart_pipeline(family, folder, **components):
    import diffusers

    # float32 whatever the folder's dtype: a 16-bit save is compared in float32
    cls = getattr(diffusers, family.pipeline)
    return _ddim(cls.from_pretrained(str(folder), local_files_only=True, torch_dtype=torch.float32, **components))


def _pixart_image(pipe, prompt, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        out = pipe(prompt, num_inference_steps=2, height=64, width=64, guidance_scale=CFG["pixart"], generator=g, output_type="pil",
                   use_resolution_binning=False, clean_caption=False, max_sequence_length=32)
    return _pixels(out.images[0])


def _flux_pipeline(family, folder, **components):
    import diffusers

    pipe = getattr(diffusers, family.pipeline).from_pretrained(str(folder), local_files_only=True, torch_dtype=torch.float32, **components)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _flux_image(family, pipe, prompt, seed=3):
    """As our sampler draws: Flux.1 dev with its distilled guidance (Fill: a blank image under a full
    mask, as our samples without a base image), Chroma with CFG and an empty negative
    prompt. Chroma's text comes from the pipeline's own encode_prompt, its masks made boolean: the
    pipeline passes them as float 0/1, which scaled_dot_product_attention adds instead of masking
    (diffusers issue #12116); training and our samples mask."""
    extra = {"prompt": prompt}
    with torch.no_grad():
        if family.pipeline == "ChromaPipeline":
            embeds, _, mask, negative, _, negative_mask = pipe.encode_prompt(prompt, negative_prompt="", max_sequence_length=T5_TOKENS)
            extra = {"prompt_embeds": embeds, "prompt_attention_mask": mask.bool(), "negative_prompt_embeds": negative,
                     "negative_prompt_attention_mask": negative_mask.bool()}
        if family.inpainting:
            extra.update(image=Image.new("RGB", (64, 64)), mask_image=Image.new("L", (64, 64), 255), strength=1.0)
        g = torch.Generator().manual_seed(seed)
        out = pipe(height=64, width=64, num_inference_steps=2, guidance_scale=CFG["flux"], generator=g, output_type="pil",
                   max_sequence_length=T5_TOKENS, **extra)
    return _pixels(out.images[0])


def _prior_pipeline(kind, folder, **components):
    """The prior pipeline of a prior folder. diffusers 0.42 no longer resolves the deprecated
    WuerstchenPrior named in Würstchen's model_index.json, so that one is put together from its parts."""
    from diffusers import DDPMWuerstchenScheduler, StableCascadePriorPipeline

    if kind == "cascade":
        pipe = StableCascadePriorPipeline.from_pretrained(str(folder), local_files_only=True, **components)
    else:
        from diffusers.pipelines.deprecated.wuerstchen import WuerstchenPrior, WuerstchenPriorPipeline
        from transformers import CLIPTextModel, CLIPTokenizer

        config = json.loads((Path(folder) / "model_index.json").read_text())
        pipe = WuerstchenPriorPipeline(
            tokenizer=CLIPTokenizer.from_pretrained(str(folder), subfolder="tokenizer"),
            text_encoder=CLIPTextModel.from_pretrained(str(folder), subfolder="text_encoder"),
            prior=WuerstchenPrior.from_pretrained(str(folder), subfolder="prior"),
            scheduler=DDPMWuerstchenScheduler.from_pretrained(str(folder), subfolder="scheduler"),
            **{k: config[k] for k in ("latent_mean", "latent_std", "resolution_multiple") if k in config},
        )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _prior_embeddings(pipe, prompt, seed=3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return pipe(prompt, height=64, width=64, num_inference_steps=2, guidance_scale=2.0, generator=g, output_type="pt").image_embeddings


def _cascade_image(kind, prior_pipe, decoder_dir, prompt, seed=3, steps=2):
    """Prior, then decoder and VQGAN with one generator, as a user of the two diffusers pipelines
    draws an image (the Cascade decoder reads the prompt with the prior's text encoder, Würstchen's
    with its own)."""
    from diffusers import DDPMWuerstchenScheduler, StableCascadeDecoderPipeline, StableCascadeUNet
    from diffusers.pipelines.deprecated.wuerstchen import PaellaVQModel, WuerstchenDecoderPipeline, WuerstchenDiffNeXt
    from transformers import CLIPTextModel, CLIPTokenizer

    # put together from its parts: diffusers 0.42 no longer resolves the deprecated classes its model_index.json names
    folder = str(decoder_dir)
    parts = {
        "scheduler": DDPMWuerstchenScheduler.from_pretrained(folder, subfolder="scheduler"),
        "vqgan": PaellaVQModel.from_pretrained(folder, subfolder="vqgan"),
        "latent_dim_scale": json.loads((Path(decoder_dir) / "model_index.json").read_text())["latent_dim_scale"],
    }
    if kind == "cascade":
        decoder = StableCascadeDecoderPipeline(decoder=StableCascadeUNet.from_pretrained(folder, subfolder="decoder"),
                                               tokenizer=prior_pipe.tokenizer, text_encoder=prior_pipe.text_encoder, **parts)
    else:
        decoder = WuerstchenDecoderPipeline(
            decoder=WuerstchenDiffNeXt.from_pretrained(folder, subfolder="decoder"),
            tokenizer=CLIPTokenizer.from_pretrained(folder, subfolder="tokenizer"),
            text_encoder=CLIPTextModel.from_pretrained(folder, subfolder="text_encoder"), **parts,
        )
    decoder.set_progress_bar_config(disable=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        embeddings = prior_pipe(prompt, height=64, width=64, num_inference_steps=steps, guidance_scale=CFG[kind], generator=g,
                                output_type="pt").image_embeddings
        image = decoder(image_embeddings=embeddings, prompt=prompt, num_inference_steps=steps, guidance_scale=0.0, generator=g,
                        output_type="pil").images[0]
    return _pixels(image if image.size == (64, 64) else image.resize((64, 64)))


def _pixart_original_to_diffusers(original: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """PixArt's original transformer keys -> diffusers' (as diffusers' convert_pixart_alpha_to_diffusers.py
    maps them): fused qkv / kv split in order, the fixed `pos_embed` dropped."""
    renames = {
        "x_embedder.proj": "pos_embed.proj", "y_embedder.y_proj.fc1": "caption_projection.linear_1",
        "y_embedder.y_proj.fc2": "caption_projection.linear_2", "t_block.1": "adaln_single.linear",
        "t_embedder.mlp.0": "adaln_single.emb.timestep_embedder.linear_1", "t_embedder.mlp.2": "adaln_single.emb.timestep_embedder.linear_2",
        "csize_embedder.mlp.0": "adaln_single.emb.resolution_embedder.linear_1",
        "csize_embedder.mlp.2": "adaln_single.emb.resolution_embedder.linear_2",
        "ar_embedder.mlp.0": "adaln_single.emb.aspect_ratio_embedder.linear_1",
        "ar_embedder.mlp.2": "adaln_single.emb.aspect_ratio_embedder.linear_2",
        "final_layer.linear": "proj_out", "final_layer.scale_shift_table": "scale_shift_table",
    }
    block = {"attn.proj": ["attn1.to_out.0"], "attn.qkv": ["attn1.to_q", "attn1.to_k", "attn1.to_v"],
             "cross_attn.q_linear": ["attn2.to_q"], "cross_attn.kv_linear": ["attn2.to_k", "attn2.to_v"],
             "cross_attn.proj": ["attn2.to_out.0"], "mlp.fc1": ["ff.net.0.proj"], "mlp.fc2": ["ff.net.2"],
             "scale_shift_table": ["scale_shift_table"]}
    out = {}
    for key, value in original.items():
        if key == "pos_embed":
            continue
        if key.startswith("blocks."):
            _, n, rest = key.split(".", 2)
            module, kind = (rest, "") if rest == "scale_shift_table" else rest.rsplit(".", 1)
            targets = block[module]
            for target, piece in zip(targets, value.chunk(len(targets), dim=0), strict=True):
                out[".".join(p for p in ("transformer_blocks", n, target, kind) if p)] = piece
        else:
            if key in renames:
                out[renames[key]] = value
            else:
                module, kind = key.rsplit(".", 1)
                out[f"{renames[module]}.{kind}"] = value
    return out


# ---------------------------------------------------------------- FINE_TUNE

# (model type, output format, whether the text encoder trains too, output_dtype)
FINE_TUNES = [
    ("STABLE_DIFFUSION_21", "DIFFUSERS", True, "FLOAT_32"), ("STABLE_DIFFUSION_21", "ORIGINAL_SINGLE_FILE", True, "FLOAT_32"),
    ("STABLE_DIFFUSION_20_BASE", "ORIGINAL_SINGLE_FILE", True, "FLOAT_32"),
    ("STABLE_DIFFUSION_15_INPAINTING", "DIFFUSERS", True, "FLOAT_32"),
    ("STABLE_DIFFUSION_15_INPAINTING", "ORIGINAL_SINGLE_FILE", True, "FLOAT_32"),
    ("STABLE_DIFFUSION_20_INPAINTING", "DIFFUSERS", True, "FLOAT_32"),
    ("WUERSTCHEN_2", "DIFFUSERS", True, "FLOAT_32"),  # Würstchen has no single-file format (docs/FORMATS.md)
    ("STABLE_CASCADE_1", "DIFFUSERS", True, "FLOAT_32"), ("STABLE_CASCADE_1", "ORIGINAL_SINGLE_FILE", True, "FLOAT_32"),
    ("PIXART_ALPHA", "DIFFUSERS", True, "FLOAT_32"),  # T5's tied embedding written once (models/common.tied_aliases)
    ("PIXART_ALPHA", "DIFFUSERS", False, "BFLOAT_16"),
    ("PIXART_ALPHA", "ORIGINAL_SINGLE_FILE", False, "FLOAT_32"),  # the transformer alone (docs/FORMATS.md): T5 would not be saved
    ("PIXART_SIGMA", "DIFFUSERS", False, "FLOAT_32"),
    ("FLUX_DEV_1", "DIFFUSERS", False, "FLOAT_32"),
    ("FLUX_DEV_1", "ORIGINAL_TRANSFORMER", False, "BFLOAT_16"),  # BFL's layout, the transformer alone
    ("FLUX_FILL_DEV_1", "ORIGINAL_TRANSFORMER", False, "FLOAT_32"),  # 384 input channels (its DIFFUSERS folder: test_family_flux_fill.py)
    ("CHROMA_1", "DIFFUSERS", False, "FLOAT_32"),
]


@pytest.mark.parametrize(("model_type", "fmt", "text", "dtype"), FINE_TUNES)
def test_finetune_reloads_with_the_trained_weights(model_type, fmt, text, dtype, tiny, data, tmp_path):
    family, paths = FAMILIES[model_type], tiny(model_type)
    single = fmt in ("ORIGINAL_SINGLE_FILE", "ORIGINAL_TRANSFORMER")
    config = _config(model_type, paths, data(model_type), tmp_path, training_method="FINE_TUNE", output_model_format=fmt, output_dtype=dtype,
                     output_model_destination=str(tmp_path / "out" / "model.safetensors"), learning_rate=1e-3,
                     **{family.denoiser: {"train": True}}, text_encoder={"train": text},
                     **({"text_encoder_2": {"train": text}} if model_type in ("FLUX_DEV_1", "FLUX_FILL_DEV_1") else {}))
    run, events = run_until_done(config, tmp_path)
    backups = sorted(p for p in run.backup.iterdir() if (p / "COMPLETE").exists())
    trained = load_file(str(backups[-1] / "trainable.safetensors"))  # written right before the save
    saved = [e["path"] for e in events if e["type"] == "saved"]
    assert saved == [str(tmp_path / "out" / ("model.safetensors" if single else "model"))]
    assert {k.split(".")[0] for k in trained} == ({family.denoiser, "text_encoder"} if text else {family.denoiser})

    if family.kind == "sd":
        pipe = _sd_pipeline(family, saved[0], paths.diffusers_dir if single else None)
        base = _sd_pipeline(family, paths.diffusers_dir)
        assert pipe.scheduler.config.prediction_type == base.scheduler.config.prediction_type
        reloaded = {"unet": pipe.unet, "text_encoder": pipe.text_encoder}
        changed = np.abs(_sd_image(family, pipe, "a red circle") - _sd_image(family, base, "a red circle")).max()
    elif family.kind == "pixart":
        if single:  # no diffusers loader reads PixArt's original layout: converted back, then loaded strictly
            from diffusers import PixArtTransformer2DModel

            transformer = PixArtTransformer2DModel.from_pretrained(str(paths.diffusers_dir), subfolder="transformer")
            transformer.load_state_dict(_pixart_original_to_diffusers(load_file(saved[0])), strict=True)
            pipe = _pixart_pipeline(family, paths.diffusers_dir, transformer=transformer)
        else:
            pipe = _pixart_pipeline(family, saved[0])
        base = _pixart_pipeline(family, paths.diffusers_dir)
        reloaded = {"transformer": pipe.transformer, "text_encoder": pipe.text_encoder}
        changed = np.abs(_pixart_image(pipe, "a red circle") - _pixart_image(base, "a red circle")).max()
    elif family.kind == "flux":
        if single:  # BFL's layout read with our key map (diffusers' from_single_file assumes Flux's full width)
            from diffusers import FluxTransformer2DModel

            from ot_gradio.models.flux_keys import load_bfl_transformer

            transformer = FluxTransformer2DModel.from_pretrained(str(paths.diffusers_dir), subfolder="transformer")
            load_bfl_transformer(saved[0], transformer)
            pipe = _flux_pipeline(family, paths.diffusers_dir, transformer=transformer)
        else:
            pipe = _flux_pipeline(family, saved[0])
        base = _flux_pipeline(family, paths.diffusers_dir)
        reloaded = {"transformer": pipe.transformer}
        changed = np.abs(_flux_image(family, pipe, "a red circle") - _flux_image(family, base, "a red circle")).max()
    else:
        prior_dir = paths.diffusers_dir
        if single:  # the stage C file (diffusers' from_single_file) and the text encoder file beside it
            from diffusers import StableCascadeUNet
            from transformers import CLIPTextModelWithProjection

            prior = StableCascadeUNet.from_single_file(saved[0], config=str(prior_dir), subfolder="prior", local_files_only=True)
            text_encoder = CLIPTextModelWithProjection.from_pretrained(str(prior_dir), subfolder="text_encoder")
            text_encoder.load_state_dict(load_file(str(tmp_path / "out" / "model.text_encoder.safetensors")), strict=True)
            pipe = _prior_pipeline(family.kind, prior_dir, prior=prior, text_encoder=text_encoder)
        else:
            pipe = _prior_pipeline(family.kind, saved[0])
        base = _prior_pipeline(family.kind, prior_dir)
        reloaded = {"prior": pipe.prior, "text_encoder": pipe.text_encoder}
        changed = (_prior_embeddings(pipe, "a red circle") - _prior_embeddings(base, "a red circle")).abs().max().item()
    saved_dtype = {"FLOAT_32": torch.float32, "BFLOAT_16": torch.bfloat16}[dtype]
    for part in {k.split(".")[0] for k in trained}:
        _assert_equal_weights(reloaded[part], {k: v.to(saved_dtype) for k, v in trained.items()}, part)
    assert changed > 0, "the fine-tuned model draws what the base model draws"


# ---------------------------------------------------------------- EMBEDDING

EMBEDDINGS = [
    "STABLE_DIFFUSION_21", "STABLE_DIFFUSION_15_INPAINTING", "STABLE_DIFFUSION_20_INPAINTING", "PIXART_ALPHA",  # SD 2 base: SD 2's text side, so not again
    "WUERSTCHEN_2", "STABLE_CASCADE_1", "PIXART_SIGMA", "FLUX_DEV_1", "FLUX_FILL_DEV_1", "CHROMA_1",
]
# the key of the vectors in the embedding file (docs/FORMATS.md; OneTrainer's "clip_g" for the Cascade families)
EMBEDDING_KEY = {"sd": "emp_params", "pixart": "t5", "wuerstchen": "clip_g", "cascade": "clip_g"}
# the flux kind: a key per text encoder (OneTrainer's names), text encoder -> key
FLUX_EMBEDDING_KEYS = {"FLUX_DEV_1": {"text_encoder": "clip_l", "text_encoder_2": "t5"},
                       "FLUX_FILL_DEV_1": {"text_encoder": "clip_l", "text_encoder_2": "t5"}, "CHROMA_1": {"text_encoder": "t5"}}


def _initial(tokenizer, matrix, text, count):
    """The rows training starts from: the text's tokens, filled up with '*' (training/embeddings.py)."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    star = tokenizer("*", add_special_tokens=False).input_ids[:1]
    return matrix[(list(ids)[:count] + star * count)[:count]].detach()


def _install_by_hand(tokenizer, text_encoder, tokens, vectors):
    """What a user of a pipeline without `load_textual_inversion` does: new tokens, a larger
    embedding matrix, the file's vectors in the new rows."""
    tokenizer.add_tokens(tokens)
    text_encoder.resize_token_embeddings(len(tokenizer))
    ids = tokenizer.convert_tokens_to_ids(tokens)
    with torch.no_grad():
        weight = text_encoder.get_input_embeddings().weight
        weight[ids] = vectors.to(weight.dtype)


@pytest.mark.parametrize("model_type", EMBEDDINGS)
def test_embedding_reloads_and_draws_our_sample(model_type, tiny, data, tmp_path):
    family, paths, images = FAMILIES[model_type], tiny(model_type), data(model_type)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPT + "\n")
    out = tmp_path / "out" / "emb.safetensors"
    config = _config(
        model_type, paths, images, tmp_path, training_method="EMBEDDING", output_model_format="SAFETENSORS",
        output_model_destination=str(out), embedding={"token_count": 2, "initial_embedding_text": "circle"}, learning_rate=0.05,
        concepts=[{"name": "shapes", "path": str(images), "text": {"prompt_source": "concept", "prompt_path": str(prompts)}}],
        samples=[{"prompt": PROMPT, "height": 64, "width": 64, "diffusion_steps": 2, "seed": 3, "cfg_scale": CFG[family.kind]}],
    )
    run, events = run_until_done(config, tmp_path)
    vectors = load_file(str(out))
    ours = _last_sample(run, events)
    if family.kind == "flux":
        _check_flux_embedding(model_type, family, paths, out, vectors, ours)
        return
    key = EMBEDDING_KEY[family.kind]
    assert list(vectors) == [key] and vectors[key].shape[0] == 2

    if family.kind == "sd":  # diffusers' own textual-inversion loader
        pipe = _sd_pipeline(family, paths.diffusers_dir)
        draw = lambda prompt: _sd_image(family, pipe, prompt)  # noqa: E731
        initial = _initial(pipe.tokenizer, pipe.text_encoder.get_input_embeddings().weight, "circle", 2)
        plain = draw("a photo of")
        pipe.load_textual_inversion(str(out), token="<x>")
        prompt = "a photo of <x>"
    elif family.kind == "pixart":  # PixArt's pipelines have no load_textual_inversion: by hand
        pipe = _pixart_pipeline(family, paths.diffusers_dir)
        draw = lambda prompt: _pixart_image(pipe, prompt)  # noqa: E731
        initial = _initial(pipe.tokenizer, pipe.text_encoder.get_input_embeddings().weight, "circle", 2)
        plain = draw("a photo of")
        _install_by_hand(pipe.tokenizer, pipe.text_encoder, ["<x0>", "<x1>"], vectors[key])
        prompt = "a photo of <x0><x1>"
    else:  # nor do the Würstchen / Cascade prior pipelines
        pipe = _prior_pipeline(family.kind, paths.diffusers_dir)
        decoder_dir = paths.diffusers_dir.parent / "decoder"
        draw = lambda prompt: _cascade_image(family.kind, pipe, decoder_dir, prompt)  # noqa: E731
        initial = _initial(pipe.tokenizer, pipe.text_encoder.get_input_embeddings().weight, "circle", 2)
        # the tiny Würstchen's decoded images saturate to the same 0/255 picture for any prompt,
        # so that the embedding changes the output is seen in the prior's image embeddings
        plain = _prior_embeddings(pipe, "a photo of")
        # the run's own token names (file metadata): Würstchen's decoder reads the prompt text with
        # its own tokenizer, which knows no embedding, so the text must be what training sampled with
        with safe_open(str(out), "pt") as f:
            uuid = f.metadata()["ot_gradio.uuid"]
        tokens = [f"<{uuid}_{i}>" for i in range(2)]
        _install_by_hand(pipe.tokenizer, pipe.text_encoder, tokens, vectors[key])
        prompt = "a photo of " + "".join(tokens)
    assert not torch.allclose(vectors[key].float(), initial.float()), "training did not move the vectors"
    theirs = draw(prompt)
    assert np.abs(theirs - ours).max() <= 1, "diffusers with our file draws another image than our sample"
    if family.kind in ("wuerstchen", "cascade"):
        assert (_prior_embeddings(pipe, prompt) - plain).abs().max() > 0
    else:
        assert np.abs(theirs - plain).max() > 0


def _check_flux_embedding(model_type, family, paths, out, vectors, ours):
    """Flux.1 / Chroma: a key per text encoder, each moved; the pipelines have no textual-inversion
    loader, so the run's own tokens go into each tokenizer and text encoder by hand."""
    keys = FLUX_EMBEDDING_KEYS[model_type]
    # Flux.1's file also holds its T5 vectors under ComfyUI's key t5xxl (Chroma's one T5 is the file's only tensor)
    assert sorted(vectors) == sorted({*keys.values(), *(["t5xxl"] if len(keys) > 1 else [])}) and {v.shape[0] for v in vectors.values()} == {2}
    assert len(keys) == 1 or torch.equal(vectors["t5xxl"], vectors["t5"])
    pipe = _flux_pipeline(family, paths.diffusers_dir)
    plain = _flux_image(family, pipe, "a photo of")
    with safe_open(str(out), "pt") as f:
        uuid = f.metadata()["ot_gradio.uuid"]
    tokens = [f"<{uuid}_{i}>" for i in range(2)]
    for part, key in keys.items():
        tokenizer, encoder = getattr(pipe, part.replace("text_encoder", "tokenizer")), getattr(pipe, part)
        initial = _initial(tokenizer, encoder.get_input_embeddings().weight, "circle", 2)
        assert not torch.allclose(vectors[key].float(), initial.float()), f"{key}: training did not move the vectors"
        _install_by_hand(tokenizer, encoder, tokens, vectors[key])
    theirs = _flux_image(family, pipe, "a photo of " + "".join(tokens))
    assert np.abs(theirs - ours).max() <= 1, "diffusers with our file draws another image than our sample"
    assert np.abs(theirs - plain).max() > 0
