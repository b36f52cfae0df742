"""Import of a diffusion-pipe config (tdrussell/diffusion-pipe): its main TOML, with `[model]`
(`type` and the files it loads), `[adapter]` (none: a full fine-tune), `[optimizer]`, the run's
top-level settings, and `dataset = '...'`, its dataset TOML (config/dpipe_data.py).

Each setting with a counterpart here is carried over as diffusion-pipe trains it, with its defaults
where the file is silent: alpha = rank (it refuses another alpha), every linear layer of the
transformer blocks, logit-normal timesteps, clipping at 1, no warmup, a constant rate, each
optimizer's library defaults (`adamw_optimi`: betas 0.9 / 0.99, eps 1e-6). Its runs are epochs, as
here. Where it loads the model from its original repo's folder (Wan's `ckpt_path`, HunyuanVideo's),
the base model is the family's diffusers repo, and a single transformer or text encoder file it
names is read in place of that part. One warning says what is read differently and lists every
other set value, left at this trainer's defaults.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .. import jsontext
from .dpipe_data import DpSection as Section
from .dpipe_data import config_roots, dataset_settings, read_dataset, resolve
from .dpipe_optimizer import optimizer_settings
from .enums import ModelType as M
from .families import family_info
from .json_file import may_read
from .lr_schedules import warmup_option
from .musubi_model import FLUX2_VERSIONS, QWEN_VERSIONS
from .validation import ConfigError, LoadResult, import_result, validate

TYPES: dict[str, M] = {
    "sdxl": M.STABLE_DIFFUSION_XL_10_BASE, "flux": M.FLUX_DEV_1, "hunyuan-video": M.HUNYUAN_VIDEO, "chroma": M.CHROMA_1,
    "hidream": M.HI_DREAM_FULL, "sd3": M.STABLE_DIFFUSION_35, "anima": M.ANIMA, "cosmos_predict2": M.ANIMA, "qwen_image": M.QWEN,
    "z_image": M.Z_IMAGE, "flux2": M.FLUX_2, "ernie_image": M.ERNIE, "ideogram4": M.IDEOGRAM_4, "krea2": M.KREA_2, "ltx2": M.LTX_2,
    "wan": M.WAN_2_1,  # the variant from its folder (_wan)
}
NOT_HERE = {"ltx-video": "LTX-Video 0.9", "cosmos": "Cosmos 1.0", "lumina_2": "Lumina Image 2.0", "omnigen2": "OmniGen2",
            "hunyuan_image": "HunyuanImage 2.1", "auraflow": "AuraFlow", "hunyuan_video_15": "HunyuanVideo 1.5",
            "minimax_h3": "MiniMax H3"}
# Wan's official folders (config.json's model_type and dim) -> our type and its diffusers repo
WAN_REPOS = {M.WAN_2_1: "Wan-AI/Wan2.1-T2V-14B-Diffusers", M.WAN_2_1_I2V: "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
             M.WAN_2_2_TI2V_5B: "Wan-AI/Wan2.2-TI2V-5B-Diffusers", M.WAN_2_2_T2V_A14B: "Wan-AI/Wan2.2-T2V-A14B-Diffusers",
             M.WAN_2_2_I2V_A14B: "Wan-AI/Wan2.2-I2V-A14B-Diffusers"}
WAN_BOUNDARY = {M.WAN_2_2_T2V_A14B: 0.875, M.WAN_2_2_I2V_A14B: 0.9}
# the families whose VAE is read from a file of its own here (models/vae_override.py)
VAE_FILES = (M.FLUX_DEV_1, M.CHROMA_1, M.FLUX_2, M.WAN_2_1, M.WAN_2_1_I2V, M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B, M.QWEN, M.QWEN_IMAGE_EDIT,
             M.ANIMA, M.KREA_2)
DTYPES = {"bfloat16": "BFLOAT_16", "float16": "FLOAT_16", "float32": "FLOAT_32"}
FLOAT8 = ("float8", "float8_e4m3fn", "float8_e5m2")
# the video frame rate diffusion-pipe resamples each family's clips to (Wan's 16, the 5B's 24)
FRAME_RATES = {M.WAN_2_1: 16.0, M.WAN_2_1_I2V: 16.0, M.WAN_2_2_T2V_A14B: 16.0, M.WAN_2_2_I2V_A14B: 16.0}
# where our image-size shift (Dynamic timestep shifting) is diffusion-pipe's flux_shift: Flux's constants, one image's tokens
SIZE_SHIFTED = (M.FLUX_DEV_1, M.CHROMA_1, M.Z_IMAGE)
# the VAE's downscale, for diffusion-pipe's flux_shift of the others (latent tokens of 2 x 2)
VAE_SCALE = {M.WAN_2_2_TI2V_5B: 16, M.LTX_2: 32}
# the layers diffusion-pipe's LoRA trains, where our presets name fewer (every linear layer of its target classes)
TARGETS = {M.Z_IMAGE: "layers.,noise_refiner,context_refiner", M.KREA_2: "transformer_blocks,text_fusion,txt_in",
           M.STABLE_DIFFUSION_XL_10_BASE: "attentions,time_emb_proj"}
# how diffusion-pipe runs, not what it trains: not listed as left out
PLUMBING = {
    "top": {"output_dir", "dataset", "pipeline_stages", "partition_method", "partition_split", "caching_batch_size", "map_num_proc",
            "steps_per_print", "logging_steps", "x_axis_examples", "compile", "eval_before_first_step", "eval_micro_batch_size_per_gpu",
            "eval_image_micro_batch_size_per_gpu", "eval_gradient_accumulation_steps",
            "reentrant_activation_checkpointing", "disable_block_swap_for_eval", "regenerate_cache", "model", "adapter", "optimizer",
            "monitoring"},
    "model": {"type", "cache_text_embeddings"},
    "adapter": {"type"},
    "optimizer": {"type"},
}
# transformer blocks diffusion-pipe's `blocks_to_swap` counts (the published models')
BLOCKS = {M.WAN_2_1: 40, M.WAN_2_1_I2V: 40, M.WAN_2_2_T2V_A14B: 40, M.WAN_2_2_I2V_A14B: 40, M.WAN_2_2_TI2V_5B: 30, M.QWEN: 60,
          M.QWEN_IMAGE_EDIT: 60, M.Z_IMAGE: 30, M.HUNYUAN_VIDEO: 60, M.FLUX_DEV_1: 57, M.CHROMA_1: 57}
FILE_SUFFIXES = (".safetensors", ".sft", ".gguf")


def is_dpipe_config(data: Any) -> bool:
    """diffusion-pipe's main TOML: a `[model]` table with its `type`, beside `dataset` or `output_dir`."""
    return (isinstance(data, dict) and isinstance(data.get("model"), dict) and isinstance(data["model"].get("type"), str)
            and ("dataset" in data or "output_dir" in data))


def import_dpipe(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None,
                 base_dir: str | Path | None = None) -> LoadResult:
    """`base_dir`: the config's folder (its dataset TOML is looked up from there); `readable`: the
    folders the import may read (the page's; None: any)."""
    top = Section("", raw, "top")
    top.plumbing = PLUMBING["top"]
    sections = {key: Section(key, raw.get(key), key) for key in ("model", "adapter", "optimizer")}
    for key, section in sections.items():
        section.plumbing = PLUMBING[key]
    notes: list[str] = []
    out: dict[str, Any] = {}
    roots = config_roots(base_dir)
    dataset = str(raw.get("dataset") or "").strip()
    data, data_roots = read_dataset(dataset, roots, readable, notes) if dataset else (None, roots)
    controls = bool(data) and any(isinstance(d, dict) and d.get("control_path") for d in data.get("directory") or [])
    model_type = _model(sections["model"], out, notes, readable, controls, data_roots)
    info = family_info(model_type)
    _adapter(sections["adapter"], out, notes, model_type, data_roots, readable)
    optimizer_settings(sections["optimizer"], out, notes)
    _run(top, out, notes, model_type, source)
    concepts, dataset_left = ([], [])
    if data is not None:
        concepts, dataset_left = dataset_settings(data, data_roots, out, notes, info, readable)
    elif not dataset:
        notes.append("dataset: none named; add your folders as concepts")
    concepts += _eval_datasets(top, out, notes, info, data_roots, readable)
    if concepts:
        out["concepts"] = concepts
    if out.pop("_size_shift", False):
        _size_shift(out, notes, model_type)
    out.pop("_model_dtype", None)
    config = validate(out)
    left = sorted([*top.left(), *(k for s in sections.values() for k in s.left()), *dataset_left])
    origin = f"diffusion-pipe config {source}" if source else "This diffusion-pipe config"
    used = len(top.used & raw.keys()) + sum(len(s.used & s.data.keys()) for s in sections.values())
    text = f"{origin}: read as diffusion-pipe trains it ({used} settings carried over)"
    return import_result(config, text, notes, left)


def _eval_datasets(r: Section, out: dict[str, Any], notes: list[str], info, roots: list[Path],
                   readable: list[Path] | None) -> list[dict[str, Any]]:
    """`eval_datasets` (dataset TOMLs, or {name, config}) as VALIDATION concepts, their loss every
    `eval_every_n_epochs` / `_steps` / `_examples`, as diffusion-pipe evaluates; without them its
    eval settings do nothing there, nor here."""
    items = r.get("eval_datasets") or []
    every = {unit: r.get(f"eval_every_n_{unit}") for unit in ("epochs", "steps", "examples")}
    concepts: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else [items]:
        name = str(item.get("config") if isinstance(item, dict) else item or "").strip()
        data, data_roots = read_dataset(name, roots, readable, notes) if name else (None, roots)
        if data is None:
            continue
        found, _ = dataset_settings(data, data_roots, {"model_type": out["model_type"]}, [], info, readable)
        label = str(item.get("name") or "eval") if isinstance(item, dict) else "eval"
        for concept in found:  # each held-out image once an evaluation
            concept.update(type="VALIDATION", balancing=1.0, name=f"{label}: {concept['name']}")
        concepts += found
    if not concepts:
        return concepts
    out["validation"] = True
    if every["epochs"]:
        out.update(validate_after=int(every["epochs"]), validate_after_unit="EPOCH")
    elif every["steps"] or every["examples"]:
        batch = out.get("batch_size", 1) * out.get("gradient_accumulation_steps", 1)
        steps = int(every["steps"] or max(1, int(every["examples"]) // batch))
        out.update(validate_after=steps, validate_after_unit="STEP")
    else:
        notes.append("eval_datasets: diffusion-pipe evaluates them before the first step only, as no eval_every_n_* is set; here "
                     "every epoch (Validate after)")
    return concepts


def _file(value: Any, roots: list[Path] | None = None, readable: list[Path] | None = None) -> str:
    """A path of the config, relative ones as diffusion-pipe opens them (from its checkout's root: `roots`)."""
    text = str(value or "").strip()
    return resolve(text, roots, readable) if roots and text else text


def _model(r: Section, out: dict[str, Any], notes: list[str], readable: list[Path] | None, controls: bool, roots: list[Path]) -> M:
    kind = str(r.get("type") or "").strip()
    if kind in NOT_HERE:
        raise ConfigError(f"model.type: this diffusion-pipe config trains {NOT_HERE[kind]}, which has no model type here; nothing "
                          "was imported")
    if kind not in TYPES:
        raise ConfigError(f"model.type: '{kind}' is no diffusion-pipe model type this trainer knows ({', '.join(sorted(TYPES))})")
    model_type = TYPES[kind]
    if kind in ("flux", "flux2") and controls:
        what = "Flux Kontext" if kind == "flux" else "Flux.2 on reference images"
        raise ConfigError(f"model.type: this diffusion-pipe config trains {what} (its dataset has control_path), which has no "
                          "model type here; Qwen-Image-Edit is the image-editing model type here")
    if kind == "cosmos_predict2" and (r.get("t5_path") or not Path(_file(r.get("llm_path"))).suffix):
        raise ConfigError("model.type: this diffusion-pipe config trains Cosmos-Predict2 (with T5), which has no model type here; "
                          "Anima (its Qwen3 file as llm_path) is")
    for key in ("ckpt_path", "diffusers_path", "checkpoint_path", "transformer_path", "diffusion_model", "single_file_path", "vae_path",
                "vae", "text_encoder_path", "llm_path", "text_encoder", "clip_path", "llama3_path"):
        if isinstance(r.data.get(key), str) and r.data[key].strip():
            r.data[key] = _file(r.data[key], roots, readable)
    if model_type == M.WAN_2_1:
        model_type, hub = _wan(r, notes, readable)
    elif model_type == M.QWEN:
        model_type, hub = _qwen(r, controls)
    elif model_type == M.STABLE_DIFFUSION_35:
        name = _file(r.get("diffusers_path"))
        model_type = M.STABLE_DIFFUSION_35 if re.search(r"3[.\-_]?5", name) or not name else M.STABLE_DIFFUSION_3
        hub = family_info(model_type).hub_repo
    elif model_type == M.FLUX_2:
        hub = _flux2(_file(r.get("diffusion_model")))
    else:
        hub = family_info(model_type).hub_repo
    info = family_info(model_type)
    out.update(model_type=model_type.value, base_model_name=hub)
    transformer = _file(r.get("transformer_path") or r.get("diffusion_model") or r.get("single_file_path"))
    if model_type == M.STABLE_DIFFUSION_XL_10_BASE:
        out["base_model_name"] = _file(r.get("checkpoint_path")) or hub
        for part, key in (("unet", "unet_lr"), ("text_encoder", "text_encoder_1_lr"), ("text_encoder_2", "text_encoder_2_lr")):
            if r.get(key) is not None:  # each part's rate (else the optimizer's)
                out.setdefault(part, {})["learning_rate"] = float(r.number(key))
    elif _file(r.get("diffusers_path")) and model_type not in (M.CHROMA_1,):  # Chroma's diffusers_path is Flux's, for its VAE and T5
        out["base_model_name"] = _file(r.get("diffusers_path"))
    if transformer and Path(transformer).suffix.lower() in FILE_SUFFIXES and info.transformer_file:
        out.setdefault(info.denoiser, {})["model_name"] = transformer
    elif transformer:
        why = "a transformer file is read as .safetensors or .gguf" if info.transformer_file else f"{info.name} reads no transformer file"
        notes.append(f"model: the transformer {Path(transformer).name} is not read here ({why}); the base model's "
                     f"({out['base_model_name']}) is used")
    _part_files(r, out, notes, model_type, roots, readable)
    _precision(r, out, notes, model_type)
    _timesteps(r, out, notes, model_type)
    for key in ("ckpt_path", "diffusers_path", "checkpoint_path"):
        r.get(key)  # read above as the base model (or said)
    return model_type


def _part_files(r: Section, out: dict[str, Any], notes: list[str], model_type: M, roots: list[Path],
                readable: list[Path] | None) -> None:
    """The VAE's and the text encoders' own files, where this trainer reads them."""
    info = family_info(model_type)
    vae = _file(r.get("vae_path") or r.get("vae"))
    if vae and model_type in VAE_FILES and Path(vae).suffix.lower() in (".safetensors", ".sft"):
        out.setdefault("vae", {})["model_name"] = vae
    elif vae:
        notes.append(f"model: the VAE {Path(vae).name} is not read here; the base model's is used")
    encoders = [_file(r.get(key)) for key in ("text_encoder_path", "llm_path", "text_encoder") if _file(r.data.get(key))]
    listed = r.get("text_encoders")
    for item in listed if isinstance(listed, list) else []:
        if isinstance(item, dict):
            paths = item.get("paths") if isinstance(item.get("paths"), list) else [item.get("path")]
            encoders += [_file(p, roots, readable) for p in paths if _file(p)]
    parts = list(info.text_encoders)
    if model_type == M.HUNYUAN_VIDEO and _file(r.data.get("clip_path")):
        encoders = encoders[:1] + [_file(r.get("clip_path"))]
    for part, path in zip(parts, encoders, strict=False):
        # its file, or its folder in transformers' layout (llm_path's llava-llama-3 folder; a name without a suffix)
        if info.text_encoder_files and (Path(path).suffix.lower() in FILE_SUFFIXES or not Path(path).suffix):
            out.setdefault(part, {})["model_name"] = path
        else:
            notes.append(f"model: the text encoder {Path(path).name or path} is not read here (this model type reads no text "
                         "encoder file, or not this kind); the base model's is used")
    if len(encoders) > len(parts):
        notes.append(f"model: {len(encoders)} text encoder files for {len(parts)} text encoders; the first are read")
    if model_type == M.HI_DREAM_FULL and _file(r.get("llama3_path")):
        out.setdefault("text_encoder_4", {})["model_name"] = _file(r.data["llama3_path"])
    if r.get("merge_adapters") or r.get("fuse_adapters"):
        notes.append("model.merge_adapters / fuse_adapters: diffusion-pipe merges those LoRAs into the base model before training "
                     "(e.g. a Turbo model's training adapter); here they are not: merge them with Tools → Convert first")
        r.used -= {"merge_adapters", "fuse_adapters"}


def _wan(r: Section, notes: list[str], readable: list[Path] | None) -> tuple[M, str]:
    """Wan's variant as diffusion-pipe tells it, from `ckpt_path`'s config.json (`model_type`, `dim`);
    Wan 2.2's 14B experts (`low_noise_model/`) from 2.1's by the folder; without a config.json, by
    the folder's and the transformer file's own names."""
    folder = Path(_file(r.get("ckpt_path")) or ".").expanduser()
    names = " ".join([folder.name, Path(_file(r.data.get("transformer_path"))).name]).lower()
    if "skyreels" in names:
        raise ConfigError("model.ckpt_path: SkyReels-V2's weights are not Wan's; choose WAN_2_1 (or WAN_2_1_I2V) on the Model tab "
                          "with SkyReels-V2's diffusers repo as the base model")
    config: dict[str, Any] = {}
    for candidate in (folder / "config.json", folder / "low_noise_model" / "config.json"):
        if may_read(candidate, readable) and candidate.is_file():
            try:
                config = jsontext.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                config = {}
            break
    kind, dim = str(config.get("model_type") or ""), config.get("dim")
    if not config:  # diffusion-pipe's config.json values, as the names say them
        kind = ("flf2v" if "flf2v" in names else "ti2v" if "ti2v" in names or "5b" in names else "i2v" if "i2v" in names else "t2v")
        dim = 1536 if "1.3b" in names else 3072 if kind == "ti2v" else 5120
    experts = any(may_read(folder / name, readable) and (folder / name).is_dir() for name in ("low_noise_model", "high_noise_model"))
    two = experts or bool(re.search(r"wan2[.\-_]?2|a14b|noise", names))
    if kind == "flf2v":
        raise ConfigError("model.ckpt_path: Wan 2.1 FLF2V (first and last frame) has no model type here; nothing was imported")
    if kind == "ti2v" or dim == 3072:
        model_type = M.WAN_2_2_TI2V_5B
    elif kind == "i2v":
        if dim == 1536:
            raise ConfigError("model.ckpt_path: Wan's 1.3B image-to-video (Fun-InP) has no model type here; nothing was imported")
        model_type = M.WAN_2_2_I2V_A14B if two else M.WAN_2_1_I2V
    else:
        model_type = M.WAN_2_2_T2V_A14B if two and dim != 1536 else M.WAN_2_1
    hub = WAN_REPOS[model_type]
    if model_type == M.WAN_2_1 and dim == 1536:
        hub = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    if model_type == M.WAN_2_1_I2V and "720" in names:
        hub = "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers"
    if not config:
        notes.append(f"model.ckpt_path: its config.json was not read; {hub} by the folder's name")
    return model_type, hub


def _qwen(r: Section, controls: bool) -> tuple[M, str]:
    """Qwen-Image, or Qwen-Image-Edit where the dataset has control images or a path says edit (2509 / 2511 by name)."""
    names = " ".join(_file(r.data.get(k)) for k in ("diffusers_path", "transformer_path")).lower()
    if not controls and "edit" not in names:
        return QWEN_VERSIONS["original"]
    version = "edit-2511" if "2511" in names else "edit-2509" if "2509" in names else "edit"
    return QWEN_VERSIONS[version]


def _flux2(name: str) -> str:
    """Flux.2's repo by the transformer file's name (diffusion-pipe tells dev and Klein 4B / 9B by its shapes)."""
    low = Path(name).name.lower()
    if "klein" in low:
        size = "9b" if "9b" in low else "4b"
        return FLUX2_VERSIONS[f"klein-base-{size}" if "base" in low else f"klein-{size}"]
    return FLUX2_VERSIONS["dev"]


def _precision(r: Section, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """`dtype` (the weights' and the autocast's), `transformer_dtype` / `diffusion_model_dtype`
    float8 for the transformer, and the text encoders' 8 or 4 bits."""
    info = family_info(model_type)
    dtype = str(r.get("dtype") or "bfloat16").lower()
    out["train_dtype"] = DTYPES.get(dtype, "BFLOAT_16")
    out["_model_dtype"] = dtype
    weights = DTYPES.get(dtype, "BFLOAT_16")
    denoiser = str(r.get("transformer_dtype") or r.get("diffusion_model_dtype") or dtype).lower()
    if denoiser == "nf4":
        notes.append("model.transformer_dtype 'nf4': stored in 4 bits here (NFLOAT_4)")
    out.setdefault(info.denoiser, {})["weight_dtype"] = ("FLOAT_8" if denoiser in FLOAT8 else "NFLOAT_4" if denoiser == "nf4"
                                                         else DTYPES.get(denoiser, weights))
    eight = r.flag("text_encoder_fp8")
    four = r.flag("text_encoder_nf4") or r.flag("llama3_4bit")
    for part in info.text_encoders:
        out.setdefault(part, {})["weight_dtype"] = "FLOAT_8" if eight else weights
    if four:
        part = "text_encoder_4" if model_type == M.HI_DREAM_FULL else info.text_encoders[0]
        out.setdefault(part, {})["weight_dtype"] = "NFLOAT_4"
    out.setdefault("vae", {})["weight_dtype"] = "FLOAT_32"


def _timesteps(r: Section, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """`timestep_sample_method` (logit_normal, its default: a normal of std `sigmoid_scale` through a
    sigmoid; uniform), `shift` (wins over `flux_shift`, the image-size shift), Wan's `min_t` /
    `max_t` (an A14B expert's range picks the expert), Flux's and HunyuanVideo's `guidance` (1)."""
    info = family_info(model_type)
    method = str(r.get("timestep_sample_method") or "logit_normal").lower()
    scale = float(r.number("sigmoid_scale", 1.0))
    if info.schedule != "flow_matching":  # SDXL: uniform timesteps, its noise schedule
        for key in ("v_pred", "min_snr_gamma", "debiased_estimation_loss"):
            r.used.discard(key)
        if r.number("min_snr_gamma", None):
            out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=r.number("min_snr_gamma"))
        elif r.flag("debiased_estimation_loss"):
            out["loss_weight_fn"] = "DEBIASED_ESTIMATION"
        return
    if method == "uniform":
        out["timestep_distribution"] = "UNIFORM"
    else:
        if method != "logit_normal":
            raise ConfigError(f"model.timestep_sample_method: '{method}' is not one diffusion-pipe reads (logit_normal, uniform)")
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=scale - 1.0, noising_bias=0.0)
    shift, size_shift = r.number("shift", 0.0), r.flag("flux_shift")  # (shift = 0: unset there)
    out.update(timestep_shift=float(shift) if shift else 1.0, dynamic_timestep_shifting=bool(not shift and size_shift
                                                                                             and model_type in SIZE_SHIFTED))
    if size_shift and not shift and model_type not in (*SIZE_SHIFTED, M.HUNYUAN_VIDEO):  # (HunyuanVideo's reads no flux_shift)
        out["_size_shift"] = True  # a fixed shift for the dataset's size: _size_shift
    _time_range(r, out, notes, model_type)
    if model_type in (M.FLUX_DEV_1, M.HUNYUAN_VIDEO):  # the guidance input diffusion-pipe feeds them (x1000 as they read it)
        out.setdefault("transformer", {})["guidance_scale"] = float(r.number("guidance", 1.0))
    else:
        r.get("guidance")
    if r.flag("bypass_guidance_embedding"):
        notes.append("model.bypass_guidance_embedding: Flux's guidance input is trained with the value above here")


def _time_range(r: Section, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """Wan's `min_t` / `max_t` (diffusion-pipe reads them for Wan alone): an A14B expert from them
    and its file's name; for the others the range drawn from."""
    low, high = float(r.number("min_t", 0.0)), float(r.number("max_t", 1.0))
    if model_type in WAN_BOUNDARY:
        boundary = WAN_BOUNDARY[model_type]
        name = Path(_file(r.data.get("transformer_path"))).name.lower()
        if low >= boundary or high <= boundary:
            expert = "HIGH_NOISE" if low >= boundary else "LOW_NOISE"
        elif "high_noise" in name or "low_noise" in name:
            expert = "HIGH_NOISE" if "high_noise" in name else "LOW_NOISE"
        else:
            expert = "HIGH_NOISE" if high - boundary >= boundary - low else "LOW_NOISE"
        out["trained_expert"] = expert
        own = (boundary, 1.0) if expert == "HIGH_NOISE" else (0.0, boundary)
        if (low, high) != own:
            notes.append(f"model.min_t / max_t {low:g}-{high:g}: diffusion-pipe trains the model it is given over that range; here "
                         f"a run trains one expert over its own range: the {expert.split('_')[0].lower()}-noise one, "
                         f"{own[0]:g}-{own[1]:g} (Trained expert)")
    elif model_type in WAN_REPOS:
        if (low, high) != (0.0, 1.0):
            out.update(min_noising_strength=low, max_noising_strength=high)
            notes.append(f"model.min_t / max_t {low:g}-{high:g}: diffusion-pipe keeps the part of its shifted distribution in that "
                         "range; here the drawn timesteps are scaled into it before the shift")


def _size_shift(out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """diffusion-pipe's `flux_shift` for a model whose own image-size shift differs from it: Flux's
    line (0.5 at 256 tokens to 1.15 at 4096) over one frame's latent tokens (2 x 2 each), as a
    fixed Timestep shift for the dataset's first resolution."""
    side = int(str(out.get("resolution") or "512").split(",")[0].split("x")[0])
    tokens = (side / VAE_SCALE.get(model_type, 8) / 2) ** 2
    out["timestep_shift"] = shift = round(math.exp(0.5 + (tokens - 256) * (1.15 - 0.5) / (4096 - 256)), 3)
    notes.append(f"model.flux_shift: diffusion-pipe shifts each image's timesteps by its size with Flux's constants; here a fixed "
                 f"Timestep shift of {shift:g}, its value at {side} px")


def _adapter(r: Section, out: dict[str, Any], notes: list[str], model_type: M, roots: list[Path],
             readable: list[Path] | None) -> None:
    info = family_info(model_type)
    sdxl = model_type == M.STABLE_DIFFUSION_XL_10_BASE
    for part in info.text_encoders:  # diffusion-pipe trains the transformer alone (SDXL's LoRA: below)
        out.setdefault(part, {})["train"] = False
    if not r.data:
        out["training_method"] = "FINE_TUNE"
        return
    # the file as diffusion-pipe writes it: ComfyUI's names (kohya's for SDXL), diffusers' where ComfyUI has no such model
    comfy = not any(layout == "kohya" for layout, *_ in info.lora_unread)
    out["output_model_format"] = "KOHYA_LORA" if sdxl else "COMFY_LORA" if comfy else "DIFFUSERS_LORA"
    kind = str(r.get("type") or "lora").strip().lower()
    if kind not in ("lora", "lokr"):
        raise ConfigError(f"adapter.type: '{kind}' is not an adapter diffusion-pipe trains (lora, lokr)")
    rank = r.number("rank", None, int)
    if rank is None or rank < 1:
        raise ConfigError("adapter.rank: a LoRA needs a rank of 1 or more (diffusion-pipe config)")
    out["training_method"] = "LORA"
    out["lora_alpha"] = float(rank)  # diffusion-pipe: alpha = rank, always (LoKr's too)
    if kind == "lokr":
        out.update(peft_type="LOKR", lokr_dim=rank, lokr_decompose_factor=r.number("decompose_factor", -1, int))
        r.get("dropout")  # LoKr reads no LoRA dropout there
    else:
        out.update(peft_type="LORA", lora_rank=rank)
        if r.number("dropout", 0.0):
            out["dropout_probability"] = r.number("dropout")
    if r.get("alpha") is not None:
        notes.append("adapter.alpha: diffusion-pipe refuses it (alpha is the rank there); here alpha = rank")
    # the adapter's dtype: the model's unless told
    dtype = str(r.get("dtype") or out.get("_model_dtype") or "").lower()
    if dtype in DTYPES:
        out["lora_weight_dtype"] = DTYPES[dtype]
    # every linear layer of the blocks diffusion-pipe targets
    out["layer_filter_preset"] = "attn-mlp" if info.denoiser == "unet" else "blocks"
    if model_type in TARGETS:
        out.update(layer_filter_preset="custom", layer_filter=TARGETS[model_type], layer_filter_regex=False)
    if model_type == M.ANIMA:
        notes.append("adapter: diffusion-pipe's LoRA of Anima also trains its LLM adapter, which stays as it is here")
    if sdxl:  # diffusion-pipe's LoRA of SDXL trains both text encoders too
        for part in ("unet", "text_encoder", "text_encoder_2"):
            out.setdefault(part, {}).update(train=True, stop_training_after=None, stop_training_after_unit="NEVER")
    existing = _file(r.get("init_from_existing"), roots, readable)
    if existing and Path(existing).suffix.lower() == ".safetensors":
        out["lora_model_name"] = existing
    elif existing:
        notes.append(f"adapter.init_from_existing {existing}: give its .safetensors file as Base LoRA (diffusion-pipe reads the one "
                     "in that folder)")
    if r.get("exclude_modules"):
        notes.append("adapter.exclude_modules: a layer filter here names the layers trained; set the Layer filter so it leaves "
                     "those out")


def _run(r: Section, out: dict[str, Any], notes: list[str], model_type: M, source: str | None) -> None:
    info = family_info(model_type)
    epochs = r.number("epochs", None, int)
    if epochs is None or epochs < 1:
        raise ConfigError("epochs: diffusion-pipe needs a number of epochs (1 or more); this config has none")
    out["epochs"] = epochs
    if r.get("max_steps") is not None:
        r.used.discard("max_steps")  # listed: this trainer stops after its epochs
    batch = r.get("micro_batch_size_per_gpu", 1)
    if isinstance(batch, list):  # [[resolution, batch size], ...]: the smallest resolution's
        pairs = sorted((p for p in batch if isinstance(p, list) and len(p) == 2), key=lambda p: p[0])
        notes.append(f"micro_batch_size_per_gpu {batch}: one batch size here, {pairs[0][1] if pairs else 1}")
        batch = pairs[0][1] if pairs else 1
    out["batch_size"] = int(batch)
    if out["batch_size"] < 1:
        raise ConfigError(f"micro_batch_size_per_gpu: {batch} is not a batch size (diffusion-pipe config)")
    if r.get("image_micro_batch_size_per_gpu") not in (None, batch):
        r.used.discard("image_micro_batch_size_per_gpu")
    out["gradient_accumulation_steps"] = max(1, r.number("gradient_accumulation_steps", 1, int))
    out["clip_grad_norm"] = r.number("gradient_clipping", 1.0) or None
    if out.pop("_release", False):  # diffusion-pipe's gradient_release: no clipping, a step every batch
        out["clip_grad_norm"] = None
        if out["gradient_accumulation_steps"] > 1:
            notes.append(f"gradient_accumulation_steps {out['gradient_accumulation_steps']}: with gradient_release diffusion-pipe "
                         "steps every batch (its betas adjusted); here too, without accumulation")
            out["gradient_accumulation_steps"] = 1
    out["learning_rate_warmup_steps"] = warmup_option(r.number("warmup_steps", 0))
    scheduler = str(r.get("lr_scheduler") or "constant").lower()
    if scheduler not in ("constant", "linear", "cosine"):
        raise ConfigError(f"lr_scheduler: '{scheduler}' is not one diffusion-pipe reads (constant, linear, cosine)")
    out["learning_rate_scheduler"] = scheduler.upper()
    if r.flag("force_constant_lr"):
        out["learning_rate_scheduler"] = "CONSTANT"
    stem = re.sub(r"[^\w.\-]+", "_", Path(source).stem if source else "lora").strip("._") or "lora"
    out["output_model_destination"] = str(Path(str(r.data.get("output_dir") or "output")) / f"{stem}.safetensors")
    saved = r.get("save_dtype")  # else the adapter's own dtype, as diffusion-pipe saves it
    if saved in DTYPES or (saved is None and out.get("training_method") == "LORA"):
        out["output_dtype"] = DTYPES[saved] if saved in DTYPES else out.get("lora_weight_dtype", "FLOAT_32")
    elif saved is not None:
        r.used.discard("save_dtype")
    if r.get("save_every_n_epochs"):
        out.update(save_every=r.number("save_every_n_epochs", 1, int), save_every_unit="EPOCH")
    elif r.get("save_every_n_steps"):
        out.update(save_every=r.number("save_every_n_steps", 1, int), save_every_unit="STEP")
    if r.get("checkpoint_every_n_minutes"):
        out.update(backup_after=r.number("checkpoint_every_n_minutes", 1, int), backup_after_unit="MINUTE")
    elif r.get("checkpoint_every_n_epochs"):
        out.update(backup_after=r.number("checkpoint_every_n_epochs", 1, int), backup_after_unit="EPOCH")
    checkpointing = r.get("activation_checkpointing", False)
    mode = "ON" if checkpointing else "OFF"
    for part in (info.denoiser, *info.text_encoders):
        out.setdefault(part, {})["gradient_checkpointing"] = mode
    if checkpointing == "unsloth":
        out.setdefault(info.denoiser, {})["activation_offloading"] = True
    swap = r.number("blocks_to_swap", 0, int)
    if swap:
        total = BLOCKS.get(model_type)
        if total:
            out.setdefault(info.denoiser, {})["offload_fraction"] = min(1.0, round(swap / total, 2))
            notes.append(f"blocks_to_swap {swap}: the transformer's Offload fraction is {out[info.denoiser]['offload_fraction']} "
                         f"here ({swap} of its {total} blocks kept in CPU memory)")
        else:
            notes.append(f"blocks_to_swap {swap}: set the transformer's Offload fraction (the share of its blocks kept in CPU memory)")
    out["caption_dropout_probability"] = r.number("uncond_fraction", 0.0)  # every text encoder's caption at once
    if info.frame_step:  # the frame rate diffusion-pipe resamples the clips to
        out["frame_rate"] = FRAME_RATES.get(model_type, 24.0)
    if r.get("huber_delta") is not None:
        out.update(mse_strength=0.0, huber_strength=1.0, huber_delta=r.number("huber_delta"))
    if r.get("smooth_l1_beta") is not None:
        r.used.discard("smooth_l1_beta")
    clip = str(r.get("video_clip_mode") or "single_beginning")
    if info.frame_step:  # diffusion-pipe's clip from the start (its default), or windows across the clip
        out["random_clip_window"] = clip == "multiple_overlapping"
        if clip == "multiple_overlapping":
            notes.append("video_clip_mode 'multiple_overlapping' (overlapping windows of each clip, which diffusion-pipe's current "
                         "code no longer accepts): here one window at a random start each time a clip is shown (Random clip window)")
        elif clip != "single_beginning":
            notes.append(f"video_clip_mode '{clip}': here a clip's frames are taken from its start (Clip start moves it)")
