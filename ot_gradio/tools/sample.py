"""The sampling tool: load a base model once (plus a LoRA file, an embedding file, or the last
backup of a run) and draw images from prompts, the way the trainer draws its samples.

Everything heavy is reused: the family's `load` and `sample` (models/), the LoRA reader and
adapters (training/lora_format.py, lora.py), the embedding installer (training/embeddings.py),
and for a run the training method's own `setup` + `load_trainable_state`, exactly as resume does
it, so the images show what the backup holds. Runs as the "sample" job (tools/jobs.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ot_gradio.config.hub_files import is_web_address
from ot_gradio.tools.jobs import Job, JobError

SIZE_RANGE = (16, 4096)
STEPS_RANGE = (1, 1000)
CFG_RANGE = (0.0, 50.0)


# ---------------------------------------------------------------- parameters


def _number(entry: dict[str, Any], key: str, default: Any, kind: type, bounds: tuple, where: str) -> Any:
    value = entry.get(key)
    if value is None or value == "":
        value = default
    try:
        value = kind(value)
    except (TypeError, ValueError):
        raise JobError(f"{where}.{key}: '{value}' is not a number") from None
    if not bounds[0] <= value <= bounds[1]:
        raise JobError(f"{where}.{key}: {value} is outside {bounds[0]}..{bounds[1]}")
    return value


def prompt_entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompts with every setting filled in and checked, before any model is loaded."""
    from ot_gradio.config.enums import NoiseScheduler

    raw = params.get("prompts") or []
    if isinstance(raw, (str, dict)):
        raw = [raw]
    entries = []
    for i, entry in enumerate(raw):
        entry = {"prompt": entry} if isinstance(entry, str) else dict(entry or {})
        where = f"prompts[{i}]"
        sampler = str(entry.get("sampler") or "DDIM").upper()
        if sampler not in NoiseScheduler.__members__:
            raise JobError(f"{where}.sampler: unknown sampler '{sampler}'; use one of {', '.join(NoiseScheduler.__members__)}")
        seed = entry.get("seed")
        seed = -1 if seed is None or seed == "" else _number(entry, "seed", -1, int, (-1, 2**63 - 1), where)
        entries.append({
            "prompt": str(entry.get("prompt") or ""),
            "negative_prompt": str(entry.get("negative_prompt") or ""),
            "width": _number(entry, "width", 512, int, SIZE_RANGE, where),
            "height": _number(entry, "height", 512, int, SIZE_RANGE, where),
            "steps": _number(entry, "steps", 20, int, STEPS_RANGE, where),
            "cfg_scale": _number(entry, "cfg_scale", 7.0, float, CFG_RANGE, where),
            "seed": seed,
            "sampler": sampler,
            **_inpainting_files(entry, where),
            **_control_file(entry, where),
        })
    if not entries:
        raise JobError("prompts: give at least one prompt")
    return entries


def _inpainting_files(entry: dict[str, Any], where: str) -> dict[str, str]:
    """An inpainting model's base image and mask (white = repaint), both or neither, checked to
    be files before any model is loaded."""
    files = {key: str(entry.get(key) or "").strip() for key in ("base_image_path", "mask_image_path")}
    if not any(files.values()):
        return {}
    for key, value in files.items():
        if not value:
            raise JobError(f"{where}.{key}: empty; an inpainting sample needs both base_image_path and mask_image_path")
        if not Path(value).expanduser().is_file():
            raise JobError(f"{where}.{key}: file '{value[:300]}' does not exist")
    return files


def _control_file(entry: dict[str, Any], where: str) -> dict[str, str]:
    """An image-editing model's control image (the image the sample edits; image-to-video: the one it starts from), checked to be a file."""
    value = str(entry.get("control_image") or "").strip()
    if value and not Path(value).expanduser().is_file():
        raise JobError(f"{where}.control_image: file '{value[:300]}' does not exist")
    return {"control_image": value} if value else {}


def resolve_run(run: str, workspace: str | None) -> Path:
    """A run folder, or a run id under `<workspace>/runs/`."""
    path = Path(run).expanduser()
    if not path.is_dir() and workspace and "/" not in run and "\\" not in run:
        path = Path(workspace).expanduser() / "runs" / run
    if not path.is_dir():
        raise JobError(f"run: '{run}' is neither a run folder nor a run id in {Path(workspace or '.') / 'runs'}")
    return path


def last_backup(run_dir: Path) -> Path:
    from ot_gradio.training.backup import complete_backups

    found = complete_backups(run_dir / "backup")
    if not found:
        raise JobError(f"run: {run_dir} has no complete backup yet (backup/ holds none with a COMPLETE marker); "
                       "use 'Backup now' while it trains, or sample its saved model as the base model")
    return found[-1]


# ---------------------------------------------------------------- the model


def _dtypes(family: Any, model_type: str, dtype: str | None, device: Any) -> dict:
    from ot_gradio.config.enums import DataType
    from ot_gradio.config.families import family_info
    from ot_gradio.training.device import weight_dtype

    name = str(dtype or "FLOAT_32").upper()
    if name not in ("FLOAT_32", "FLOAT_16", "BFLOAT_16"):
        raise JobError(f"dtype: '{dtype}' is not supported; use FLOAT_32, FLOAT_16 or BFLOAT_16")
    return {part: weight_dtype(DataType(name), device) for part in family_info(model_type).parts}


def load_base(model_type: str, base_model: str, device: Any, dtype: str | None, extra: dict | None = None, move: bool = True) -> Any:
    """The family's own loader; load problems become a JobError naming what to fetch or fix.
    `move`: on `device` (else in RAM still, for the caller to quantize parts before moving it)."""
    from ot_gradio.models.common import ModelLoadError, base_model_source
    from ot_gradio.models.registry import UnsupportedModelTypeError, get_family

    try:
        family = get_family(model_type)
    except UnsupportedModelTypeError as err:
        raise JobError(f"model_type: {err}") from None
    if not str(base_model or "").strip():
        raise JobError("base_model: give a Hugging Face id, a local diffusers folder or a .safetensors/.ckpt file")
    extra = dict(extra or {})
    kwargs = {"dtypes": _dtypes(family, model_type, dtype, device), "offline": bool(extra.get("offline")),
              "cache_dir": extra.get("cache_dir") or None, "token": extra.get("token") or None}
    for key in ("part_models", "config_dir"):  # parts from models of their own; a single file's component configs
        if extra.get(key):  # every family's load takes both (models/base.ModelFamily; tests/models/test_model_registry.py)
            kwargs[key] = extra[key]
    try:
        source = base_model_source(str(base_model).strip(), cache_dir=kwargs["cache_dir"], offline=kwargs["offline"],
                                   token=kwargs["token"], model_type=model_type)
        model = family.load(source, **kwargs)
    except ModelLoadError as err:
        raise JobError(f"base_model: {err}") from None
    return model.to(device) if move else model


def apply_lora(model: Any, path: str, weight: float) -> tuple[int, int]:
    """Put a kohya or diffusers/PEFT LoRA file on the model at `weight` x its strength (the
    delta scaled, as A1111's `<lora:name:weight>`; for DoRA only its low-rank part); returns the
    layers matched and skipped. Adapters go only where the file has weights, with the file's own
    rank, alpha and adapter kind."""
    from torch import nn

    from ot_gradio.models.original_lora_names import original_lora_names
    from ot_gradio.training.lora import add_lora, load_lora_state_dict, public_name
    from ot_gradio.training.lora_format import load_lora_file
    from ot_gradio.training.lora_layer_entries import describe, group_layers, lokr_layer_key, scale_layer
    from ot_gradio.training.lora_method import kohya_module_names, lora_kind, trainable_parts
    from ot_gradio.training.lora_variants import LOKR, OFT_2, AdapterSpec
    from ot_gradio.training.oft import spec_fields

    file = Path(path).expanduser()
    if not file.is_file():
        raise JobError(f"lora: '{path}' does not exist; give a LoRA .safetensors file")
    try:
        loaded = load_lora_file(file, module_names=kohya_module_names(model), denoiser=model.denoiser,  # as Base LoRA reads them
                                read_names=original_lora_names(model), base_model_version=model.lora_base_model_version)
        kind, dora = describe(loaded.parts)
    except ValueError as err:
        raise JobError(f"lora: {file} cannot be read as a LoRA ({err})") from None
    if kind == OFT_2 and weight != 1:
        raise JobError(f"lora_weight: {file.name} is an OFT v2 file, which rotates the weights and has no strength; set the weight to 1")
    matched = skipped = 0
    for part, sd in loaded.parts.items():
        layers = group_layers(sd)
        if part not in trainable_parts(model):
            skipped += len(layers)
            continue
        module, lkind = getattr(model, part), lora_kind(model, part)
        names = {}
        for name, child in module.named_modules():
            if name and isinstance(child, (nn.Linear, nn.Conv2d)):
                for alias in (name, public_name(module, lkind, name)):
                    names[alias] = name
                    names[alias.replace(".", "_")] = name
        found = {}
        for path_, tensors in layers.items():
            target = names.get(path_) or names.get("text_model." + path_) or names.get(path_.replace(".", "_"))
            if target is None:
                skipped += 1
            else:
                found[target] = scale_layer(tensors, float(weight)) if weight != 1 else tensors
        if not found:
            continue
        lokr = kind == LOKR
        spec = AdapterSpec(peft_type=kind, decompose=dora is not None and not lokr, output_axis=dora == "output",
                           decompose_both=lokr and any("lokr_w1_a" in t for t in found.values()),
                           use_tucker=lokr and any("lokr_t2" in t for t in found.values()),
                           lokr_decompose=lokr and dora is not None, lokr_dora_output=dora == "output",
                           lokr_full_matrix=lokr and all("lokr_w2" in t for t in found.values()),
                           # a whole w2 beside products (LyCORIS's large-rank layers): built whole, as the file holds it
                           lokr_whole_w2=frozenset(lokr_layer_key(n) for n, t in found.items() if lokr and "lokr_w2" in t),
                           **(spec_fields(found.values()) if kind == OFT_2 else {}))
        # one anchored alternation: exactly these layers, compiled once however many there are
        regex = "^(?:" + "|".join(re.escape(public_name(module, lkind, n)) for n in found) + ")$"
        try:
            add_lora(module, kind=lkind, rank=loaded.rank, alpha=loaded.alpha, dropout=0.0, layer_preset="custom",
                     layer_filter=regex, layer_filter_regex=True, spec=spec)
            load_lora_state_dict(module, {f"{n}.{k}": v for n, t in found.items() for k, v in t.items()}, kind=lkind)
        except ValueError as err:
            raise JobError(f"lora: {file} does not fit this {part.replace('_', ' ')} ({err}); was it made for another model type?") from None
        module.to(next(p.device for p in module.parameters()))
        matched += len(found)
    if not matched:
        raise JobError(f"lora: {file} matches no layer of this {model.model_type.value} model "
                       f"(parts in the file: {', '.join(loaded.parts)}); it was made for another model type")
    return matched, skipped


def _downloaded(value: str, kind: str, params: dict[str, Any], offline: bool, token: str | None, model_type: str | None) -> str:
    """`value` itself, or for a web address the file it downloads to (once; `kind` "lora" or "embedding")."""
    if not value or not is_web_address(value):
        return value
    from ot_gradio.models.common import ModelLoadError, part_file

    try:
        return str(part_file(value, kind, cache_dir=params.get("cache_dir") or None, offline=offline, token=token,
                             model_type=model_type, kind=kind))
    except ModelLoadError as err:
        raise JobError(str(err)) from None


def install_embedding(model: Any, path: str, token: str, device: Any) -> Any:
    """An A1111/OneTrainer/diffusers embedding file, triggered by `token` (default: the
    placeholder it was trained with, else its file name, as A1111 does)."""
    from ot_gradio.config.parts import EmbeddingConfig
    from ot_gradio.training.embeddings import Embeddings

    file = Path(path).expanduser()
    if not file.is_file():
        raise JobError(f"embedding: '{path}' does not exist; give an embedding .safetensors or .pt file")
    token = (token or "").strip() or _embedding_placeholder(file) or file.stem
    try:
        embeddings = Embeddings(model, device)
        embeddings.add(EmbeddingConfig(model_name=str(file), placeholder=token, train=False),
                       field="embedding", train=False, train_parts=frozenset())
    except ValueError as err:
        raise JobError(str(err).replace("embedding.model_name", "embedding")) from None
    return embeddings


def _embedding_placeholder(file: Path) -> str:
    if file.suffix.lower() != ".safetensors":
        return ""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return (f.metadata() or {}).get("ot_gradio.placeholder", "")


def load_run(run_dir: Path, device: Any, dtype: str | None, job: Job, token: str | None = None) -> tuple[Any, Any, dict]:
    """The run's base model with its last backup's trained state, set up as resume does it."""
    from ot_gradio.config.families import family_info
    from ot_gradio.config.io import ConfigError, load_config
    from ot_gradio.training.backup import read_backup
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import configure_model
    from ot_gradio.training.methods import get_method

    found = last_backup(run_dir)
    job.log(f"run {run_dir.name}: last backup {found.name}")
    backup = read_backup(found)
    try:
        cfg = load_config(backup.config).config
    except ConfigError as err:
        raise JobError(f"run: the config of backup {found} cannot be read ({err})") from None
    # as the trainer loads it: parts that come from models of their own, the run's cache and offline setting
    parts = {part: getattr(cfg, part).model_name for part in family_info(cfg.model_type).parts}
    if device.type != "cuda":  # a run trained with XFORMERS/FLASH/FLEX attention still samples elsewhere
        cfg = cfg.model_copy(update={"attention_mechanism": "SDP"})
    model = load_base(cfg.model_type.value, cfg.base_model_name, device, dtype,
                      {"offline": cfg.offline_mode, "cache_dir": cfg.huggingface_cache_dir, "part_models": parts, "token": token},
                      move=False)
    try:
        configure_model(model, cfg, device, Precision("FLOAT_32", device))  # quantized parts converted in RAM, as in training
        model.to(device)
        method = get_method(cfg.training_method)
        groups = method.setup(model, cfg, device)
        method.load_trainable_state(model, backup.trainable)
        if backup.state.get("ema"):  # what the run saves and samples: the average
            from ot_gradio.training.ema import EMA

            params = [p for g in groups for p in g.params]
            ema = EMA(params, cfg.ema_decay)
            ema.load_state_dict(backup.state["ema"])
            ema.copy_to(params)
    except ValueError as err:
        raise JobError(f"run: backup {found} cannot be applied to {cfg.base_model_name} ({err})") from None
    info = {"run": str(run_dir), "backup": str(found), "base_model": cfg.base_model_name,
            "model_type": cfg.model_type.value, "training_method": cfg.training_method.value,
            "global_step": backup.counters.global_step}
    return model, method, info


# ---------------------------------------------------------------- output


def default_output_dir(workspace: str | None) -> Path:
    root = Path(workspace or "workspace").expanduser() / "tool-samples"
    out = root / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while out.exists():
        n += 1
        out = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    return out


def save_png(image: Any, path: Path, info: dict[str, Any]) -> Path:
    """A PNG carrying the prompt and settings as text chunks: `parameters` in A1111's layout
    (which A1111's PNG Info and many viewers read) and each field on its own."""
    from PIL.PngImagePlugin import PngInfo

    from ot_gradio.fsutil import atomic_write

    meta = PngInfo()
    a1111 = info["prompt"] + (f"\nNegative prompt: {info['negative_prompt']}" if info["negative_prompt"] else "")
    a1111 += (f"\nSteps: {info['steps']}, Sampler: {info['sampler']}, CFG scale: {info['cfg_scale']}, Seed: {info['seed']}, "
              f"Size: {info['width']}x{info['height']}, Model: {info.get('model', '')}")
    meta.add_text("parameters", a1111)
    for key, value in info.items():
        meta.add_text(key, value if isinstance(value, str) else json.dumps(value))
    return atomic_write(path, lambda tmp: image.save(tmp, format="PNG", pnginfo=meta))


def _file_name(index: int, entry: dict[str, Any]) -> str:
    words = re.sub(r"[^\w]+", "-", entry["prompt"]).strip("-")[:40] or "empty"
    return f"{index:03d}-{words}-seed{entry['seed']}.png"


# ---------------------------------------------------------------- the job


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """Load once, then one image per prompt; Cancel between images keeps the finished ones."""
    import random

    import torch

    from ot_gradio.training.device import resolve_device

    entries = prompt_entries(params)
    workspace = params.get("workspace")
    lora, embedding, run = (str(params.get(k) or "").strip() for k in ("lora", "embedding", "run"))
    if run and lora:
        raise JobError("lora: a run already brings its trained weights; give either a run or a LoRA file")
    device, warning = resolve_device(params.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
    if warning:
        job.log(warning.replace("train_device", "device"))
    total = len(entries)
    job.progress(0, total, "loading the model")
    method, embeddings, info = None, None, {}
    from ot_gradio.models.civitai_download import use_token
    from ot_gradio.secrets import read_secrets

    stored = read_secrets(workspace) if workspace else {}
    token = stored.get("huggingface_token")  # the page's, for a gated base model
    use_token(stored.get("civitai_token"))  # and for a base model on Civitai
    offline = bool(params.get("offline", os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")))
    from ot_gradio.models.download_watch import watch_downloads

    # a base model not yet in the hub cache downloads here: the job's progress says how much has arrived
    with watch_downloads(lambda message, detail: job.progress(0, total, message), run or str(params.get("base_model") or ""),
                         params.get("cache_dir"), offline):
        if run:
            model, method, info = load_run(resolve_run(run, workspace), device, params.get("dtype"), job, token)
            model_name = f"{info['base_model']} + {Path(info['backup']).name}"
        else:
            model_type = str(params.get("model_type") or "STABLE_DIFFUSION_15")
            base = str(params.get("base_model") or "")
            model = load_base(model_type, base, device, params.get("dtype"), {
                "config_dir": str(params.get("config_dir") or "").strip(), "cache_dir": params.get("cache_dir"), "token": token,
                "offline": offline})
            model_name = base
            # a LoRA's or embedding's Hugging Face file or Civitai address: its file, downloaded once
            lora = _downloaded(lora, "lora", params, offline, token, model_type)
        embedding = _downloaded(embedding, "embedding", params, offline, token, model.model_type.value)
    if lora:
        weight = params.get("lora_weight")
        try:
            weight = 1.0 if weight is None or weight == "" else float(weight)
        except (TypeError, ValueError):
            raise JobError(f"lora_weight: '{weight}' is not a number") from None
        layers, skipped = apply_lora(model, lora, weight)
        job.log(f"LoRA {Path(lora).name} on {layers} layers at weight {weight}"
                + (f"; {skipped} of its layers match nothing in this model and are left out" if skipped else ""))
        model_name += f" + {Path(lora).name}:{weight}"
    if embedding:
        embeddings = install_embedding(model, embedding, str(params.get("embedding_token") or ""), device)
        job.log(f"embedding {Path(embedding).name} triggered by '{embeddings.items[0].placeholder}'")
        model_name += f" + {Path(embedding).name}"

    def text(value: str) -> str:
        for hook in (getattr(method, "transform_text", None), embeddings.expand if embeddings else None):
            value = hook(value) if hook is not None and value else value
        return value

    out_dir = Path(str(params.get("output_dir") or "").strip() or default_output_dir(workspace)).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    cancelled = False
    for i, entry in enumerate(entries):
        if job.cancelled():
            cancelled = True
            job.log(f"cancelled after {len(images)} of {total} images")
            break
        entry = dict(entry, seed=entry["seed"] if entry["seed"] >= 0 else random.randint(0, 2**31 - 1))
        job.progress(i, total, f"image {i + 1}/{total}: {entry['prompt'][:60]}")
        try:
            image = model.sample(prompt=text(entry["prompt"]), negative_prompt=text(entry["negative_prompt"]),
                                 height=entry["height"], width=entry["width"], steps=entry["steps"],
                                 cfg_scale=entry["cfg_scale"], seed=entry["seed"], sampler=entry["sampler"], device=device,
                                 **({"image": entry["base_image_path"], "mask": entry["mask_image_path"]}
                                    if "base_image_path" in entry else {}),
                                 **({"control_image": entry["control_image"]} if "control_image" in entry else {}))
        except torch.OutOfMemoryError:
            raise JobError(f"prompts[{i}]: out of memory at {entry['width']}x{entry['height']}; "
                           "use a smaller size, FLOAT_16 or the CPU") from None
        except ValueError as err:  # e.g. a sampler or size this family cannot do
            raise JobError(f"prompts[{i}]: {err}") from None
        if isinstance(image, list):  # a video family's clip: an .mp4 (settings in the job's result, not the file)
            from ot_gradio.data.video import write_video
            from ot_gradio.fsutil import atomic_write

            path = atomic_write((out_dir / _file_name(i, entry)).with_suffix(".mp4"), lambda tmp, frames=image: write_video(frames, tmp))
        else:
            path = save_png(image, out_dir / _file_name(i, entry), {**entry, "model": model_name})
        images.append({**entry, "path": str(path)})
        job.progress(i + 1, total, f"image {i + 1}/{total} saved")
    return {"images": images, "paths": [im["path"] for im in images], "output_dir": str(out_dir),
            "model": model_name, "cancelled": cancelled, **({"run_info": info} if info else {}),
            "message": f"{len(images)} of {total} image(s) in {out_dir}"}
