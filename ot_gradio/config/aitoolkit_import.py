"""Import of an ai-toolkit training job (ostris/ai-toolkit): the YAML (or JSON) file its example
configs are and its web UI saves, `job: extension` with one `config.process[0]` holding `model`,
`network`, `save`, `datasets`, `train` and `sample`.

Each setting with a counterpart here is carried over as ai-toolkit trains it (its defaults where
the file is silent: sigmoid timesteps for flow models, 1,000 steps, gradient clipping at 1); one
warning lists what was read differently and every other set value, left at our defaults. The
model comes from `model.arch` (or the older `is_flux` / `is_xl` ... flags). ai-toolkit counts
steps; here a run is epochs, counted from the dataset folders' images as kohya's steps are
(kohya_dataset.run_length). Its trigger word becomes each concept's caption prefix and replaces
`[trigger]` in the sample prompts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .enums import ModelType as M
from .families import family_info
from .kohya_dataset import steps_per_epoch
from .validation import ConfigError, LoadResult, validate

PROCESS_TYPES = frozenset({"sd_trainer", "diffusion_trainer", "ui_trainer"})
# model.arch -> our model type (None: no such model type here)
ARCHS: dict[str, M | None] = {
    "sd1": M.STABLE_DIFFUSION_15, "sd": M.STABLE_DIFFUSION_15, "sd2": M.STABLE_DIFFUSION_21, "sdxl": M.STABLE_DIFFUSION_XL_10_BASE,
    "sd3": M.STABLE_DIFFUSION_35, "pixart": M.PIXART_ALPHA, "pixart_sigma": M.PIXART_SIGMA, "flux": M.FLUX_DEV_1,
    "chroma": M.CHROMA_1, "hidream": M.HI_DREAM_FULL, "qwen_image": M.QWEN, "qwen_image_edit": M.QWEN_IMAGE_EDIT,
    "qwen_image_edit_plus": M.QWEN_IMAGE_EDIT, "wan21": M.WAN_2_1, "wan21_i2v": M.WAN_2_1_I2V, "wan22_5b": M.WAN_2_2_TI2V_5B,
    "wan22_14b": M.WAN_2_2_T2V_A14B, "wan22_14b_i2v": M.WAN_2_2_I2V_A14B, "zimage": M.Z_IMAGE, "flux2": M.FLUX_2,
    "flux2_klein_4b": M.FLUX_2, "flux2_klein_9b": M.FLUX_2, "anima": M.ANIMA, "ltx2": M.LTX_2, "ernie_image": M.ERNIE,
    "krea2": M.KREA_2, "ideogram4": M.IDEOGRAM_4, "flex1": M.FLUX_DEV_1,
}
# what ai-toolkit trains besides a LoRA or a fine-tune of the model: no counterpart here
NOT_TRAINED = {"slider": "a slider (a LoRA trained on prompt pairs, no dataset)", "adapter": "an adapter (IP-Adapter, Redux ...)",
               "embedding": "an embedding (use the EMBEDDING method here)", "decorator": "a decorator"}
MAX_EPOCHS = 1_000_000
# the older switches, before `arch`
FLAGS = (("is_flux", "flux"), ("is_xl", "sdxl"), ("is_v3", "sd3"), ("is_v2", "sd2"), ("is_pixart_sigma", "pixart_sigma"),
         ("is_pixart", "pixart"), ("is_lumina2", "lumina2"), ("is_auraflow", "auraflow"))
OPTIMIZERS = {"adamw": "ADAMW", "adamw8bit": "ADAMW_8BIT", "adam": "ADAM", "adam8bit": "ADAM_8BIT", "lion": "LION",
              "lion8bit": "LION_8BIT", "sgd": "SGD", "prodigy": "PRODIGY", "prodigy8bit": "PRODIGY", "adafactor": "ADAFACTOR",
              "dadaptation": "DADAPT_ADAM", "came": "CAME"}
OPTIMIZER_PARAMS = {"weight_decay": "weight_decay", "eps": "eps", "d_coef": "d_coef", "decouple": "decouple",
                    "use_bias_correction": "use_bias_correction", "safeguard_warmup": "safeguard_warmup",
                    "relative_step": "relative_step", "scale_parameter": "scale_parameter", "warmup_init": "warmup_init",
                    "momentum": "momentum", "nesterov": "nesterov"}
SCHEDULERS = {"constant": "CONSTANT", "linear": "LINEAR", "cosine": "COSINE", "cosine_with_restarts": "COSINE_WITH_RESTARTS"}
DTYPES = {"float16": "FLOAT_16", "fp16": "FLOAT_16", "bf16": "BFLOAT_16", "bfloat16": "BFLOAT_16", "float32": "FLOAT_32",
          "fp32": "FLOAT_32", "float": "FLOAT_32"}
# optimum-quanto's types (ai-toolkit's qtype) -> the weight type here that stores as few bits
QTYPES = {"qfloat8": "FLOAT_8", "qfloat8_e4m3fn": "FLOAT_8", "qfloat8_e5m2": "FLOAT_8", "qint8": "INT_8", "uint8": "INT_8",
          "qint4": "NFLOAT_4", "uint4": "NFLOAT_4", "uint3": "NFLOAT_4", "uint2": "NFLOAT_4"}
# flow models: ai-toolkit's timestep_type -> (timestep_distribution, dynamic shift)
TIMESTEPS = {"sigmoid": ("LOGIT_NORMAL", False), "linear": ("UNIFORM", False), "shift": ("UNIFORM", True)}
# how ai-toolkit runs, not what it trains: not listed as left out
PLUMBING = frozenset({
    "type", "device", "sqlite_db_path", "performance_log_every", "logging", "low_vram", "noise_scheduler", "sampler",
    "cache_latents_to_disk", "cache_latents", "cache_text_embeddings", "unload_text_encoder", "push_to_hub", "hf_repo_id",
    "hf_private", "save_format", "sample_start_step", "compile", "num_workers", "xformers", "sdp", "attention_backend",
    "meta", "job", "walk_seed", "format", "training_folder", "name",
})


def is_aitoolkit_config(data: Any) -> bool:
    """ai-toolkit's job: `config.process` is a list whose first item trains (its `type`) or holds a
    model and datasets."""
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        return False
    process = data["config"].get("process")
    if not isinstance(process, list) or not process or not isinstance(process[0], dict):
        return False
    first = process[0]
    return first.get("type") in PROCESS_TYPES or ("model" in first and ("datasets" in first or "train" in first))


class _Reader:
    """One section's values; what is read counts as carried over."""

    def __init__(self, name: str, data: Any):
        self.name, self.data, self.used = name, data if isinstance(data, dict) else {}, set()

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        return default if value is None else value

    def number(self, key: str, default: float | None = None, kind: type = float) -> Any:
        value = self.get(key)
        if value is None or value == "":
            return default
        try:  # YAML 1.1 reads 1e-4 (no dot) as text: ai-toolkit's loader as a number
            return kind(float(value)) if kind is int else kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.name}.{key}: {value!r} is not a number (ai-toolkit config)") from None

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)

    def left(self) -> list[str]:
        return [f"{self.name}.{k}" for k, v in self.data.items()
                if k not in self.used and k not in PLUMBING and v not in (None, "", False, [], {})]


def import_aitoolkit(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None) -> LoadResult:
    """`readable`: the folders whose images may be counted (the page's; None: any)."""
    job = raw["config"]
    process = job["process"][0]
    if len(job["process"]) > 1:
        raise ConfigError("config.process: this ai-toolkit job has several processes; import a job with one training process")
    for key, what in NOT_TRAINED.items():
        if process.get(key):
            raise ConfigError(f"config.process[0].{key}: this ai-toolkit job trains {what}, which has no counterpart here")
    readers = {name: _Reader(name, process.get(name)) for name in ("model", "network", "save", "train", "sample")}
    top = _Reader("process", process)
    for name in (*readers, "datasets", "trigger_word"):
        top.get(name)
    notes: list[str] = []
    out: dict[str, Any] = {}
    model_type = _model(readers["model"], out, notes)
    info = family_info(model_type)
    method = _network(readers["network"], out, notes, model_type)
    trigger = str(top.get("trigger_word") or "").strip()
    _train(readers["train"], out, notes, model_type, method)
    _save(readers["save"], out, job, process)
    concepts, dataset_left = _datasets(process.get("datasets"), out, notes, trigger, info)
    if concepts:
        out["concepts"] = concepts
    _samples(readers["sample"], out, trigger, model_type)
    steps = readers["train"].number("steps", 1000, int)
    per_epoch = steps_per_epoch(concepts, out, readable)
    if per_epoch is None:
        notes.append(f"train.steps {steps}: Epochs stays at this trainer's default, as the images were not counted: set Epochs "
                     f"to {steps} x batch size x accumulation / the images an epoch shows")
    else:
        out["epochs"] = min(MAX_EPOCHS, max(1, -(-steps // per_epoch)))
        notes.append(f"train.steps {steps}: {out['epochs']} epochs of about {per_epoch} steps here (ai-toolkit stops at step "
                     f"{steps}; here the epoch it falls in ends)")

    config = validate(out)
    left = sorted([*top.left(), *(k for r in readers.values() for k in r.left()), *dataset_left])
    origin = f"ai-toolkit config {source}" if source else "This ai-toolkit config"
    used = sum(len(r.used & r.data.keys()) for r in readers.values())
    text = f"{origin}: read as ai-toolkit's job '{job.get('name') or ''}' ({used} settings of its model, network, save, train and sample carried over)"
    if notes:
        text += "; " + "; ".join(dict.fromkeys(notes))
    if left:
        text += "; set there but not carried over (left at this trainer's defaults): " + ", ".join(left)
    return LoadResult(config, [text + "."])


def _model(r: _Reader, out: dict[str, Any], notes: list[str]) -> M:
    arch = str(r.get("arch") or "").strip().lower()
    for key, name in FLAGS:
        if r.flag(key) and not arch:
            arch = name
    name = str(r.get("name_or_path") or "").strip()
    if not arch:
        arch = "sd1"
        notes.append("model: no arch (nor is_flux / is_xl ...), so SD 1.x, as ai-toolkit reads it")
    model_type = ARCHS.get(arch.split(":")[0])
    if model_type is None:
        raise ConfigError(f"model.arch: '{arch}' has no model type here; pick the model type on the Model tab and set its "
                          "options there (the supported ones are listed in the README)")
    if arch == "flex1":
        notes.append("model.arch 'flex1': Flex.1 is trained as Flux.1, whose architecture it has")
    if model_type == M.STABLE_DIFFUSION_35 and not re.search(r"3[.\-_]?5", name):
        model_type = M.STABLE_DIFFUSION_3  # SD 3 medium
    if model_type == M.STABLE_DIFFUSION_21 and "base" in name.lower():
        model_type = M.STABLE_DIFFUSION_21_BASE
    out["model_type"] = model_type.value
    if name:
        out["base_model_name"] = name
    info = family_info(model_type)
    extras = str(r.get("extras_name_or_path") or "").strip()
    if extras and extras != name:  # ai-toolkit: the transformer from name_or_path, the other parts from extras
        if Path(name).suffix.lower() in (".safetensors", ".sft", ".gguf") and info.transformer_file:
            out["base_model_name"] = extras
            out.setdefault(info.denoiser, {})["model_name"] = name
        else:
            notes.append(f"model.extras_name_or_path '{extras}': the other parts come from the base model '{name}' here")
    if r.get("vae_path"):
        out.setdefault("vae", {})["model_name"] = str(r.data["vae_path"])
    if r.flag("quantize"):
        qtype = str(r.get("qtype") or "qfloat8").split("|")[0].strip().lower()
        out.setdefault(info.denoiser, {})["weight_dtype"] = QTYPES.get(qtype, "FLOAT_8")
        if "|" in str(r.data.get("qtype") or ""):
            notes.append(f"model.qtype '{r.data['qtype']}': the accuracy recovery adapter is ai-toolkit's own; here the "
                         f"transformer is {QTYPES.get(qtype, 'FLOAT_8')}")
        elif qtype not in QTYPES:
            notes.append(f"model.qtype '{qtype}': here FLOAT_8")
    if r.flag("quantize_te", r.flag("quantize")):
        qtype = str(r.get("qtype_te") or "qfloat8").split("|")[0].strip().lower()
        for part in info.text_encoders:
            out.setdefault(part, {})["weight_dtype"] = QTYPES.get(qtype, "FLOAT_8")
    if r.flag("layer_offloading", r.flag("auto_memory")):
        share = r.number("layer_offloading_transformer_percent", 1.0)
        out.setdefault(info.denoiser, {})["offload_fraction"] = min(1.0, max(0.0, share))
        te_share = r.number("layer_offloading_text_encoder_percent", 1.0)
        for part in info.text_encoders:
            out.setdefault(part, {})["offload_fraction"] = min(1.0, max(0.0, te_share))
    kwargs = r.get("model_kwargs") or {}
    if model_type in (M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B) and isinstance(kwargs, dict):
        high, low = bool(kwargs.get("train_high_noise", True)), bool(kwargs.get("train_low_noise", True))
        out["trained_expert"] = "LOW_NOISE" if low and not high else "HIGH_NOISE"
        if high and low:
            notes.append("model.model_kwargs trains both Wan 2.2 experts in one run there; here a run trains one: this one the "
                         "high-noise expert (switch Trained expert to LOW_NOISE for a second run)")
    elif kwargs:
        notes.append(f"model.model_kwargs {sorted(kwargs)}: not carried over")
    return model_type


def _network(r: _Reader, out: dict[str, Any], notes: list[str], model_type: M) -> str:
    kind = str(r.get("type") or "").strip().lower()
    if not r.data:
        out["training_method"] = "FINE_TUNE"
        return "FINE_TUNE"
    out["training_method"] = "LORA"
    if kind == "lokr":
        out["peft_type"] = "LOKR"
        out["lokr_dim"] = r.number("linear", None, int) or r.number("rank", 16, int)
        factor = r.number("lokr_factor", -1, int)
        out["lokr_decompose_factor"] = factor
        out["lokr_full_matrix"] = r.flag("lokr_full_rank", True)
    else:
        if kind not in ("", "lora", "locon"):
            notes.append(f"network.type '{kind}': trained as a LoRA here")
        out["peft_type"] = "LORA"
        rank = r.number("linear", None, int) or r.number("rank", None, int)
        if rank:
            out["lora_rank"] = rank
        alpha = r.number("linear_alpha", None) or r.number("alpha", None)
        if alpha:
            out["lora_alpha"] = alpha
        conv = r.get("conv")  # ai-toolkit's convolution rank: UNets' alone (its page sets it for every model)
        if conv and str(conv) != str(rank) and family_info(model_type).denoiser == "unet":
            notes.append(f"network.conv {conv}: convolution layers train at the linear rank here")
        r.get("conv_alpha")
    if r.number("dropout", None):
        out["dropout_probability"] = r.number("dropout")
    kwargs = r.get("network_kwargs") or {}
    if isinstance(kwargs, dict):
        only = [str(v) for v in kwargs.get("only_if_contains") or [] if str(v).strip()]
        ignore = [str(v) for v in kwargs.get("ignore_if_contains") or [] if str(v).strip()]
        if only:
            out.update(layer_filter_preset="custom", layer_filter=",".join(only), layer_filter_regex=False)
        if ignore:
            notes.append(f"network.network_kwargs.ignore_if_contains {ignore}: a layer filter here names the layers trained; "
                         "set the Layer filter so it leaves those out")
    if r.get("pretrained_lora_path"):
        out["lora_model_name"] = str(r.data["pretrained_lora_path"])
    for key in ("transformer_only", "lokr_full_rank", "lokr_factor", "split_multistage_loras"):
        r.get(key)  # ai-toolkit's defaults, or read above
    return "LORA"


def _train(r: _Reader, out: dict[str, Any], notes: list[str], model_type: M, method: str) -> None:
    info = family_info(model_type)
    out["batch_size"] = r.number("batch_size", 1, int)
    accumulation = r.number("gradient_accumulation_steps", None, int) or r.number("gradient_accumulation", 1, int)
    out["gradient_accumulation_steps"] = max(1, accumulation)
    lr = r.number("lr", 1e-6)
    out["learning_rate"] = lr
    unet_lr, te_lr = r.number("unet_lr", lr), r.number("text_encoder_lr", lr)
    train_unet, train_te = r.flag("train_unet", True), r.flag("train_text_encoder", False)
    out.setdefault(info.denoiser, {}).update(train=train_unet, learning_rate=unet_lr)
    for part in info.text_encoders:  # ai-toolkit trains a text encoder for the whole run, when told
        section = {"train": train_te, "stop_training_after": None, "stop_training_after_unit": "NEVER"}
        if train_te:
            section["learning_rate"] = te_lr
        out.setdefault(part, {}).update(section)
    if train_te and method == "LORA" and model_type not in (M.STABLE_DIFFUSION_15, M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_21_BASE,
                                                             M.STABLE_DIFFUSION_XL_10_BASE):
        notes.append("train.train_text_encoder: ai-toolkit trains no text encoder LoRA of this model; here it is trained")
    name = str(r.get("optimizer") or "adamw").strip().lower()
    optimizer: dict[str, Any] = {"optimizer": OPTIMIZERS.get(name, "ADAMW")}
    if name not in OPTIMIZERS:
        notes.append(f"train.optimizer '{name}' has no counterpart here: ADAMW is used (choose one on the Training tab)")
    params = r.get("optimizer_params") or {}
    for key, value in (params.items() if isinstance(params, dict) else ()):
        try:
            if key == "betas" and isinstance(value, (list, tuple)) and len(value) >= 2:
                optimizer.update(beta1=float(value[0]), beta2=float(value[1]))
            elif key in OPTIMIZER_PARAMS:
                optimizer[OPTIMIZER_PARAMS[key]] = value if isinstance(value, bool) else float(value)
            else:
                notes.append(f"train.optimizer_params.{key} is not carried over")
        except (TypeError, ValueError):
            raise ConfigError(f"train.optimizer_params.{key}: {value!r} is not a number (ai-toolkit config)") from None
    if optimizer["optimizer"] == "ADAFACTOR":  # ai-toolkit's Adafactor: a fixed learning rate unless told
        optimizer = {"relative_step": False, "scale_parameter": False, "warmup_init": False, **optimizer}
    out["optimizer"] = optimizer
    scheduler = str(r.get("lr_scheduler") or "constant").strip().lower()
    out["learning_rate_scheduler"] = SCHEDULERS.get(scheduler, "CONSTANT")
    if scheduler not in SCHEDULERS:
        notes.append(f"train.lr_scheduler '{scheduler}' has no counterpart here: CONSTANT is used")
    if r.get("lr_scheduler_params"):
        notes.append("train.lr_scheduler_params: this trainer's own schedule settings are used")
    out["learning_rate_warmup_steps"] = r.number("lr_warmup_steps", 0.0)
    out["train_dtype"] = DTYPES.get(str(r.get("dtype") or "fp32").lower(), "FLOAT_32")
    mode = "ON" if r.flag("gradient_checkpointing", True) else "OFF"
    for part in (info.denoiser, *info.text_encoders):
        out.setdefault(part, {})["gradient_checkpointing"] = mode
    grad = r.number("max_grad_norm", 1.0)
    out["clip_grad_norm"] = grad or None
    ema = r.get("ema_config") or {}
    if isinstance(ema, dict) and ema.get("use_ema"):
        out.update(ema="GPU", ema_decay=float(ema.get("ema_decay", 0.999)))
    if r.number("noise_offset", 0.0):
        out["offset_noise_weight"] = r.number("noise_offset")
    gamma = r.number("min_snr_gamma", None) or r.number("snr_gamma", None)
    if gamma and info.schedule != "flow_matching":
        out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=gamma)
    loss = str(r.get("loss_type") or "mse").lower()
    if loss in ("mae", "l1"):
        out.update(mse_strength=0.0, mae_strength=1.0)
    elif loss not in ("mse", "l2"):
        notes.append(f"train.loss_type '{loss}': trained with the squared error (MSE) here")
    if info.schedule == "flow_matching":
        timesteps = str(r.get("timestep_type") or "sigmoid").lower()
        distribution, shift = TIMESTEPS.get(timesteps, ("LOGIT_NORMAL", False))
        out.update(timestep_distribution=distribution, noising_weight=0.0, noising_bias=0.0, dynamic_timestep_shifting=shift)
        if timesteps not in TIMESTEPS:
            notes.append(f"train.timestep_type '{timesteps}': drawn as its sigmoid (LOGIT_NORMAL) here")
        if r.flag("linear_timesteps"):
            notes.append("train.linear_timesteps: ai-toolkit's weighting of the loss by timestep is not carried over")
    else:
        r.get("timestep_type")
    bias = str(r.get("content_or_style") or "balanced").lower()
    if bias != "balanced":
        notes.append(f"train.content_or_style '{bias}': its timestep bias is not carried over (timesteps drawn as above)")
    for key in ("skip_first_sample", "force_first_sample", "steps"):  # this trainer samples during training only, not before
        r.get(key)
    if r.flag("disable_sampling"):
        out["sample_after"] = 0
    if not r.flag("diff_output_preservation"):  # the page's settings of a preservation that is off
        r.get("diff_output_preservation_multiplier")
        r.get("diff_output_preservation_class")
    if model_type not in (M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B) or r.number("switch_boundary_every", 1, int) == 1:
        r.get("switch_boundary_every")  # which expert trains a step, when both do: one per run here
    if model_type not in (M.FLUX_DEV_1, M.FLUX_2):  # the page's default; only these have a guidance embedding
        r.get("bypass_guidance_embedding")


def _save(r: _Reader, out: dict[str, Any], job: dict[str, Any], process: dict[str, Any]) -> None:
    name = re.sub(r"[^\w.\-]+", "_", str(job.get("name") or "lora")).strip("._") or "lora"
    folder = Path(str(process.get("training_folder") or "output")) / name
    out["output_model_destination"] = str(folder / f"{name}.safetensors")
    out["output_dtype"] = DTYPES.get(str(r.get("dtype") or "float16").lower(), "FLOAT_16")
    every = r.number("save_every", 1000, int)
    out.update(save_every=every, save_every_unit="STEP")
    keep = r.number("max_step_saves_to_keep", 5, int)
    if keep > 0:
        out["save_keep_last"] = keep


def _datasets(items: Any, out: dict[str, Any], notes: list[str], trigger: str, info) -> tuple[list[dict[str, Any]], list[str]]:
    concepts, left, resolutions, frames = [], [], [], []
    for number, item in enumerate(items if isinstance(items, list) else []):
        r = _Reader(f"datasets[{number}]", item)
        folder = str(r.get("folder_path") or r.get("dataset_path") or "").strip()
        if not folder:
            notes.append(f"datasets[{number}] names no folder_path: not carried over")
            continue
        extension = "." + str(r.get("caption_ext") or "txt").lstrip(".").lower()
        if extension not in (".txt", ".caption"):
            notes.append(f"datasets[{number}].caption_ext '{extension}': here captions are read from .txt, else .caption files")
        word = str(r.get("trigger_word") or trigger or "").strip()
        text: dict[str, Any] = {"default_caption": str(r.get("default_caption") or ""),
                                "caption_prefix": word,  # ai-toolkit puts it first when a caption lacks it
                                "enable_tag_shuffling": r.flag("shuffle_tokens"), "keep_tags_count": r.number("keep_tokens", 0, int)}
        if r.number("token_dropout_rate", 0.0):
            text.update(tag_dropout_enable=True, tag_dropout_mode="RANDOM", tag_dropout_probability=r.number("token_dropout_rate"))
        image = {"enable_random_flip": r.flag("flip_x")}
        if r.flag("flip_y"):
            notes.append(f"datasets[{number}].flip_y: here images are flipped horizontally only")
        reg = r.flag("is_reg")
        concept = {"name": ("reg: " if reg else "") + (Path(folder).name or folder), "path": folder,
                   "balancing": float(max(1, r.number("num_repeats", 1, int))), "loss_weight": r.number("network_weight", 1.0) if not reg else 1.0,
                   "text": text, "image": image}
        concepts.append(concept)
        rate = r.number("caption_dropout_rate", 0.05)
        for part in info.text_encoders:
            out.setdefault(part, {})["dropout_probability"] = rate
        size = r.get("resolution")
        resolutions += [int(float(v)) for v in (size if isinstance(size, list) else [size or 512]) if str(v).strip()]
        if r.number("num_frames", 1, int) > 1:
            frames.append(r.number("num_frames", 1, int))
        if reg:
            notes.append(f"datasets[{number}].is_reg: trained as an ordinary concept here (ai-toolkit adds no trigger word to "
                         "them; its caption prefix is blank)")
            text["caption_prefix"] = ""
        for key in ("mask_path", "control_path", "control_path_1", "inpaint_path"):
            if r.get(key):
                notes.append(f"datasets[{number}].{key}: here a mask is `<image>-masklabel.png` and a control image "
                             "`<image>-control.png` beside each image; put them there")
        for key in ("cache_latents_to_disk", "cache_latents", "mask_min_value", "shrink_video_to_frames", "controls",
                    "network_weight", "fps"):
            r.get(key)
        left += r.left()
    if word_in_prompts := trigger:
        notes.append(f"trigger word '{word_in_prompts}': put before every caption (ai-toolkit adds it only where a caption "
                     "lacks it, and replaces [trigger] in captions, which here stays as written)")
    if resolutions:
        sizes = sorted(set(resolutions))
        out["resolution"] = ",".join(str(s - s % 8) for s in sizes)
    if frames and info.frame_step:
        out["frames"] = str(max(frames))
    return concepts, left


def _samples(r: _Reader, out: dict[str, Any], trigger: str, model_type: M) -> None:
    if not r.data:
        return
    width, height = r.number("width", 512, int), r.number("height", 512, int)
    defaults = {"negative_prompt": str(r.get("neg") or "") if r.data.get("neg") is not False else "",
                "diffusion_steps": r.number("sample_steps", 20, int), "cfg_scale": r.number("guidance_scale", 7.0),
                "width": width - width % 8, "height": height - height % 8}
    seed = r.number("seed", 0, int)
    walk = r.flag("walk_seed")
    items = r.get("samples") or [{"prompt": p} for p in r.get("prompts") or []]
    samples = []
    for number, item in enumerate(items if isinstance(items, list) else []):
        item = item if isinstance(item, dict) else {"prompt": str(item)}
        prompt = str(item.get("prompt") or "").replace("[trigger]", trigger).replace("[name]", trigger).strip()
        if not prompt:
            continue
        sample = {**defaults, "prompt": prompt, "seed": int(item.get("seed", seed + number if walk else seed)), "random_seed": False}
        for key, ours in (("width", "width"), ("height", "height"), ("neg", "negative_prompt"), ("sample_steps", "diffusion_steps"),
                          ("guidance_scale", "cfg_scale")):
            if item.get(key) not in (None, ""):
                sample[ours] = item[key] if ours == "negative_prompt" else float(item[key]) if ours == "cfg_scale" else int(float(item[key]))
        if family_info(model_type).frame_step and int(item.get("num_frames", r.number("num_frames", 1, int))) > 1:
            sample["frames"] = int(item.get("num_frames", r.number("num_frames", 1, int)))
        samples.append(sample)
    if samples:
        out["samples"] = samples
    if not out.get("sample_after") == 0:
        out.update(sample_after=r.number("sample_every", 100, int), sample_after_unit="STEP")
    for key in ("fps", "num_frames", "network_multiplier", "guidance_rescale"):
        r.get(key)
