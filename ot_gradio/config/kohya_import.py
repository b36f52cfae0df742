"""Import of a kohya_ss / sd-scripts training config (JSON).

A kohya_ss user's saved config names the model, the dataset folder (`train_data_dir`, whose
`<repeats>_<name>` subfolders are the concepts), the network and the optimizer in kohya's words.
It becomes our config: each setting with a counterpart here is carried over, and one warning
lists what was carried and every other set value, which is left at our default. sd-scripts'
sectioned configs (`"optimizer_arguments": {...}`) are read flat, as sd-scripts reads them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .enums import ModelType as M
from .families import family_info
from .validation import LoadResult, validate

# keys only kohya's configs have: two of them make a config kohya's
SIGNS = frozenset({"pretrained_model_name_or_path", "train_data_dir", "network_dim", "output_dir", "train_batch_size",
                   "LoRA_type", "save_model_as", "max_resolution", "max_train_epochs", "optimizer_type"})
OPTIMIZERS = {
    "adamw": "ADAMW", "adamw8bit": "ADAMW_8BIT", "pagedadamw8bit": "ADAMW_8BIT", "adam": "ADAM", "adam8bit": "ADAM_8BIT",
    "lion": "LION", "lion8bit": "LION_8BIT", "pagedlion8bit": "LION_8BIT", "sgd": "SGD", "sgdnesterov": "SGD",
    "sgdnesterov8bit": "SGD_8BIT", "prodigy": "PRODIGY", "adafactor": "ADAFACTOR", "dadaptation": "DADAPT_ADAM",
    "dadaptadam": "DADAPT_ADAM", "dadaptadagrad": "DADAPT_ADA_GRAD", "dadaptadan": "DADAPT_ADAN", "dadaptlion": "DADAPT_LION",
    "dadaptsgd": "DADAPT_SGD", "came": "CAME",
}
SCHEDULERS = {"constant": "CONSTANT", "constant_with_warmup": "CONSTANT", "linear": "LINEAR", "cosine": "COSINE",
              "cosine_with_restarts": "COSINE_WITH_RESTARTS", "adafactor": "ADAFACTOR"}
# kohya's optimizer_args names -> ours
OPTIMIZER_ARGS = {"weight_decay": "weight_decay", "eps": "eps", "d_coef": "d_coef", "decouple": "decouple",
                  "use_bias_correction": "use_bias_correction", "safeguard_warmup": "safeguard_warmup",
                  "relative_step": "relative_step", "scale_parameter": "scale_parameter", "warmup_init": "warmup_init",
                  "momentum": "momentum", "nesterov": "nesterov"}
ADAPTERS = {"standard": ("LORA", "attn-mlp"), "kohya locon": ("LORA", "full"), "lycoris/locon": ("LORA", "full"),
            "lycoris/loha": ("LOHA", "full"), "lycoris/lokr": ("LOKR", "full")}
PRECISION = {"bf16": "BFLOAT_16", "fp16": "FLOAT_16", "float": "FLOAT_32", "fp32": "FLOAT_32", "no": "FLOAT_32"}
_KOHYA_FOLDER = re.compile(r"^(\d+)_(.*\S.*)$")
_SAMPLE_OPTION = re.compile(r"\s--([nwhdls])\s+(.*?)(?=\s--[nwhdls]\s|$)")


def flat(data: dict[str, Any]) -> dict[str, Any]:
    """sd-scripts' sections (`"training_arguments": {...}`) flattened, as sd-scripts reads them."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key.endswith(("_arguments", "_args")) and key != "optimizer_args":
            out.update(value)
        else:
            out[key] = value
    return out


def is_kohya_config(data: Any) -> bool:
    return (isinstance(data, dict) and "__version" not in data and "config_version" not in data
            and len(SIGNS & flat(data).keys()) >= 2)


def _set(value: Any) -> bool:
    return value not in (None, "", False, 0, [], {}) and not (isinstance(value, str) and value.lower() in ("none", "default"))


def import_kohya(raw: dict[str, Any], source: str | None = None) -> LoadResult:
    data = flat(raw)
    out: dict[str, Any] = {}
    used: set[str] = set()
    notes: list[str] = []

    def take(key: str) -> Any:
        used.add(key)
        return data.get(key)

    model_type = _model_type(data, used)
    info = family_info(model_type)
    out.update(model_type=model_type.value, base_model_name=str(take("pretrained_model_name_or_path") or ""))
    denoiser, encoders = info.denoiser, info.text_encoders
    lora = any(_set(data.get(k)) for k in ("network_dim", "LoRA_type", "network_module"))
    out["training_method"] = "LORA" if lora else "FINE_TUNE"
    if lora:
        kind = str(take("LoRA_type") or "Standard")
        peft, preset = ADAPTERS.get(kind.lower(), ("LORA", "attn-mlp"))
        if kind.lower() not in ADAPTERS:
            notes.append(f"LoRA_type '{kind}' has no counterpart here: it trains as a plain LoRA of the attention and MLP layers")
        out.update(peft_type=peft, layer_filter_preset=preset)
        if _set(data.get("network_dim")):
            out["lora_rank"] = int(take("network_dim"))
        if _set(data.get("network_alpha")):
            out["lora_alpha"] = float(take("network_alpha"))
        if _set(data.get("network_dropout")):
            out["dropout_probability"] = float(take("network_dropout"))
        if "dora_wd=true" in str(data.get("network_args", "")).replace(" ", "").lower():
            used.add("network_args")
            out["lora_decompose"] = True
    _learning_rates(data, take, out, denoiser, encoders, lora)
    _training(data, take, out, model_type)
    _optimizer(data, take, out, notes)
    _output(data, take, out, lora)
    _samples(data, take, out)
    concepts = _concepts(data, take, notes)
    if concepts is not None:
        out["concepts"] = concepts

    config = validate(out)
    left = sorted(k for k, v in data.items() if k not in used and _set(v))
    origin = f"kohya_ss config {source}" if source else "This kohya_ss config"
    text = f"{origin}: read as kohya_ss's ({len(used & data.keys())} settings carried over)"
    if notes:
        text += "; " + "; ".join(notes)
    if left:
        text += "; set there but not carried over (left at this trainer's defaults): " + ", ".join(left)
    return LoadResult(config, [text + "."])


def _model_type(data: dict[str, Any], used: set[str]) -> M:
    used.update({"sdxl", "v2", "v_parameterization", "flux1_checkbox"})
    if data.get("flux1_checkbox"):
        return M.FLUX_DEV_1
    if data.get("sdxl"):
        return M.STABLE_DIFFUSION_XL_10_BASE
    if data.get("v2"):
        return M.STABLE_DIFFUSION_21 if data.get("v_parameterization") else M.STABLE_DIFFUSION_21_BASE
    return M.STABLE_DIFFUSION_15


def _learning_rates(data, take, out, denoiser: str, encoders: tuple[str, ...], lora: bool) -> None:
    if _set(data.get("learning_rate")):
        out["learning_rate"] = float(take("learning_rate"))
    unet, te = take("unet_lr"), take("text_encoder_lr")
    if _set(unet):
        out[denoiser] = {"learning_rate": float(unet)}
        out.setdefault("learning_rate", float(unet))
    train_te = not (take("network_train_unet_only") or take("cache_text_encoder_outputs")
                    or (lora and te is not None and float(te or 0) == 0 and _set(unet)))
    dropout = take("caption_dropout_rate")
    for part in encoders:
        section: dict[str, Any] = {"train": train_te}
        if train_te and _set(te):
            section["learning_rate"] = float(te)
        if _set(dropout):
            section["dropout_probability"] = float(dropout)
        out[part] = section
    if take("network_train_text_encoder_only"):
        out.setdefault(denoiser, {})["train"] = False
    if _set(data.get("clip_skip")) and int(take("clip_skip")) > 1:
        out["text_encoder_layer_skip"] = int(data["clip_skip"]) - 1


def _training(data, take, out, model_type: M) -> None:
    for key, ours, kind in (("train_batch_size", "batch_size", int), ("gradient_accumulation_steps", "gradient_accumulation_steps", int),
                            ("seed", "seed", int), ("max_grad_norm", "clip_grad_norm", float),
                            ("noise_offset", "offset_noise_weight", float)):
        if _set(data.get(key)):
            out[ours] = kind(take(key))
    epochs = take("max_train_epochs") or take("epoch")
    if _set(epochs):
        out["epochs"] = int(epochs)
    size = str(take("max_resolution") or "").replace(" ", "")
    if size:
        w, _, h = size.partition(",")
        out["resolution"] = w if not h or h == w else f"{w}x{h}"
    if data.get("enable_bucket") is not None:
        out["aspect_ratio_bucketing"] = bool(take("enable_bucket"))
    if data.get("cache_latents") is not None:
        out["latent_caching"] = bool(take("cache_latents"))
    if _set(data.get("min_snr_gamma")):
        out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=float(take("min_snr_gamma")))
    if take("zero_terminal_snr"):
        out["rescale_noise_scheduler_to_zero_terminal_snr"] = True
    if str(take("mixed_precision") or "").lower() in PRECISION:
        out["train_dtype"] = PRECISION[str(data["mixed_precision"]).lower()]
    if str(take("save_precision") or "").lower() in PRECISION:
        out["output_dtype"] = PRECISION[str(data["save_precision"]).lower()]
    if data.get("gradient_checkpointing") is not None:
        mode = "ON" if take("gradient_checkpointing") else "OFF"
        info = family_info(model_type)
        for part in (info.denoiser, *info.text_encoders):
            out.setdefault(part, {})["gradient_checkpointing"] = mode
    scheduler = str(take("lr_scheduler") or "").lower()
    if scheduler:
        out["learning_rate_scheduler"] = SCHEDULERS.get(scheduler, "CONSTANT")
    warmup = take("lr_warmup_steps")
    percent = take("lr_warmup")  # kohya_ss's page: a percentage of the steps
    if _set(warmup) and float(warmup) >= 1:
        out["learning_rate_warmup_steps"] = float(warmup)
    elif _set(percent):
        out["learning_rate_warmup_steps"] = min(float(percent), 99.0) / 100
    elif scheduler:
        out["learning_rate_warmup_steps"] = 0.0
    if _set(data.get("lr_scheduler_num_cycles")):
        out["learning_rate_cycles"] = float(take("lr_scheduler_num_cycles"))


def _optimizer(data, take, out, notes: list[str]) -> None:
    name = str(take("optimizer") or take("optimizer_type") or "")
    if not name:
        return
    ours = OPTIMIZERS.get(name.lower().replace("_", "").replace(".", ""))
    if ours is None:
        notes.append(f"optimizer '{name}' has no counterpart here: choose one on the Training tab (ADAMW is used)")
        ours = "ADAMW"
    section: dict[str, Any] = {"optimizer": ours}
    if name.lower().startswith("sgdnesterov"):
        section["nesterov"] = True
    args = take("optimizer_args")
    items = args if isinstance(args, list) else str(args or "").split()
    for item in items:
        key, _, value = str(item).partition("=")
        key, value = key.strip(), value.strip().strip("\"'")
        if key == "betas":
            parts = [p for p in value.strip("()[]").split(",") if p.strip()]
            if len(parts) >= 2:
                section.update(beta1=float(parts[0]), beta2=float(parts[1]))
        elif key in OPTIMIZER_ARGS:
            low = value.lower()
            section[OPTIMIZER_ARGS[key]] = (low == "true") if low in ("true", "false") else float(value)
        elif key:
            notes.append(f"optimizer argument '{key}' is not carried over")
    out["optimizer"] = section


def _output(data, take, out, lora: bool) -> None:
    folder, name = take("output_dir"), take("output_name")
    if folder or name:
        out["output_model_destination"] = str(Path(str(folder or "models")) / f"{name or 'last'}.safetensors")
    out["output_model_format"] = "KOHYA_LORA" if lora else "SAFETENSORS"
    take("save_model_as")  # safetensors, ckpt or pt there: a .safetensors file here
    every = take("save_every_n_epochs")
    if _set(every):
        out.update(save_every=int(every), save_every_unit="EPOCH")


def sample_from_kohya(line: str) -> dict[str, Any]:
    """One kohya sample prompt line with its options (`--n`, `--w`, `--h`, `--d`, `--l`, `--s`)."""
    text = " " + line.strip()
    first = _SAMPLE_OPTION.search(text)
    sample: dict[str, Any] = {"prompt": (text[: first.start()] if first else text).strip()}
    fields = {"n": ("negative_prompt", str), "w": ("width", int), "h": ("height", int), "d": ("seed", int),
              "l": ("cfg_scale", float), "s": ("diffusion_steps", int)}
    for option, value in _SAMPLE_OPTION.findall(text):
        key, kind = fields[option]
        try:
            sample[key] = kind(value.strip())
        except ValueError:
            continue
    return sample


def _samples(data, take, out) -> None:
    prompts = take("sample_prompts")
    lines = prompts if isinstance(prompts, list) else str(prompts or "").splitlines()
    if isinstance(prompts, str) and len(lines) == 1 and Path(prompts).is_file():  # sd-scripts: a file of prompts
        lines = Path(prompts).read_text(encoding="utf-8", errors="replace").splitlines()
    samples = [sample_from_kohya(line) for line in lines if str(line).strip() and not str(line).lstrip().startswith("#")]
    size = str(out.get("resolution", "")).partition("x")
    for sample in samples:  # without --w / --h: the training size (kohya's 512 x 512 is noise for SDXL)
        if size[0].isdigit():
            sample.setdefault("width", int(size[0]))
            sample.setdefault("height", int(size[2] or size[0]))
    if samples:
        out["samples"] = samples
    for key, unit in (("sample_every_n_epochs", "EPOCH"), ("sample_every_n_steps", "STEP")):
        if _set(data.get(key)):
            out.update(sample_after=int(take(key)), sample_after_unit=unit)


def _concepts(data, take, notes: list[str]) -> list[dict[str, Any]] | None:
    """`train_data_dir`'s `<repeats>_<name>` folders (and `reg_data_dir`'s, at `prior_loss_weight`)."""
    text = {"enable_tag_shuffling": bool(take("shuffle_caption"))}
    if data.get("keep_tokens") is not None:
        text["keep_tags_count"] = int(take("keep_tokens") or 0)
    take("caption_extension")  # .txt and .caption are both read
    weight = float(take("prior_loss_weight") or 1.0)
    concepts: list[dict[str, Any]] = []
    found = False
    for key, regularisation in (("train_data_dir", False), ("reg_data_dir", True)):
        root = take(key)
        if not root:
            continue
        found = True
        folder = Path(str(root)).expanduser()
        subfolders = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        named = [(p, _KOHYA_FOLDER.match(p.name)) for p in subfolders]
        named = [(p, m) for p, m in named if m]
        if not named:
            notes.append(f"{key} '{root}' has no `<repeats>_<name>` folder here: it is one concept with Balancing 1")
            named = [(folder, None)]
        for path, match in named:
            concepts.append({"name": ("reg: " if regularisation else "") + (match.group(2) if match else folder.name),
                             "path": str(path), "balancing": float(match.group(1)) if match else 1.0,
                             "loss_weight": weight if regularisation else 1.0, "text": dict(text)})
    return concepts if found else None
