"""Import of an ai-toolkit training job (ostris/ai-toolkit): the YAML (or JSON) file its example
configs are and its web page saves, `job: extension` with one `config.process[0]` holding `model`,
`network`, `save`, `datasets`, `train` and `sample`.

Each setting with a counterpart here is carried over as ai-toolkit trains it, with its defaults
where the file is silent (rank 4 and alpha 1, lr 1e-6, 1,000 steps, sigmoid timesteps for flow
models, clipping at 1 but for Adafactor, eps 1e-6 for Adam, an EMA updated every step); one
warning says what is read differently and lists every other set value, left at our defaults. The
model comes from `model.arch` (or the older `is_flux` / `is_xl` ... switches). ai-toolkit counts
steps; here a run is epochs, counted from the datasets' images as kohya's steps are
(kohya_dataset.steps_as_epochs). `[name]` is the job's name, as ai-toolkit replaces it; its
trigger word becomes each concept's Trigger word (in place of `[trigger]` in its captions, else
before them, as there) and replaces `[trigger]` in the sample prompts
(config/aitoolkit_data.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .aitoolkit_data import DTYPES, Section, datasets, samples, save
from .enums import ModelType as M
from .families import family_info
from .kohya_dataset import steps_as_epochs
from .lr_schedules import warmup_option
from .validation import ConfigError, LoadResult, import_result, validate

PROCESS_TYPES = frozenset({"sd_trainer", "diffusion_trainer", "ui_trainer"})
# model.arch -> our model type (an arch not here has no model type here)
ARCHS: dict[str, M] = {
    "sd1": M.STABLE_DIFFUSION_15, "sd15": M.STABLE_DIFFUSION_15, "sd": M.STABLE_DIFFUSION_15, "sd2": M.STABLE_DIFFUSION_21,
    "sdxl": M.STABLE_DIFFUSION_XL_10_BASE, "sd3": M.STABLE_DIFFUSION_35, "pixart": M.PIXART_ALPHA, "pixart_sigma": M.PIXART_SIGMA,
    "flux": M.FLUX_DEV_1, "flex1": M.FLUX_DEV_1, "chroma": M.CHROMA_1, "hidream": M.HI_DREAM_FULL, "qwen_image": M.QWEN,
    "qwen_image_edit": M.QWEN_IMAGE_EDIT, "qwen_image_edit_plus": M.QWEN_IMAGE_EDIT, "wan21": M.WAN_2_1, "wan21_i2v": M.WAN_2_1_I2V,
    "wan22_5b": M.WAN_2_2_TI2V_5B, "wan22_14b": M.WAN_2_2_T2V_A14B, "wan22_14b_i2v": M.WAN_2_2_I2V_A14B, "zimage": M.Z_IMAGE,
    "flux2": M.FLUX_2, "flux2_klein_4b": M.FLUX_2, "flux2_klein_9b": M.FLUX_2, "anima": M.ANIMA, "ltx2": M.LTX_2,
    "ernie_image": M.ERNIE, "krea2": M.KREA_2, "ideogram4": M.IDEOGRAM_4,
}
# the older switches, before `arch`
FLAGS = (("is_flux", "flux"), ("is_xl", "sdxl"), ("is_v3", "sd3"), ("is_v2", "sd2"), ("is_pixart_sigma", "pixart_sigma"),
         ("is_pixart", "pixart"), ("is_lumina2", "lumina2"), ("is_auraflow", "auraflow"))
# what ai-toolkit trains besides a LoRA or a fine-tune of the model: no counterpart here
NOT_TRAINED = {"slider": "a slider (a LoRA trained on prompt pairs, no dataset)", "adapter": "an adapter (IP-Adapter, Redux ...)",
               "embedding": "an embedding (use the EMBEDDING method here)", "decorator": "a decorator"}
# ai-toolkit's optimizer -> ours, and whether it passes eps=1e-6 (its Adam family, Prodigy, D-Adaptation)
OPTIMIZERS = {"adamw": ("ADAMW", True), "adamw8bit": ("ADAMW_8BIT", True), "adam": ("ADAM", True), "adam8bit": ("ADAM_8BIT", True),
              "lion": ("LION", False), "lion8bit": ("LION_8BIT", False), "sgd": ("SGD", False), "prodigy": ("PRODIGY", True),
              "prodigy8bit": ("PRODIGY", True), "adafactor": ("ADAFACTOR", False), "dadaptation": ("DADAPT_ADAM", True),
              "dadaptation_adam": ("DADAPT_ADAM", True), "dadaptation_lion": ("DADAPT_LION", True)}
ADAPTIVE = ("PRODIGY", "DADAPT_ADAM", "DADAPT_LION")  # ai-toolkit runs them at lr 1 when given one under 0.1
OPTIMIZER_PARAMS = {"weight_decay": "weight_decay", "eps": "eps", "d_coef": "d_coef", "decouple": "decouple",
                    "use_bias_correction": "use_bias_correction", "safeguard_warmup": "safeguard_warmup",
                    "relative_step": "relative_step", "scale_parameter": "scale_parameter", "warmup_init": "warmup_init",
                    "momentum": "momentum", "nesterov": "nesterov"}
# optimum-quanto's types (ai-toolkit's qtype) -> the weight type here that stores as few bits
QTYPES = {"qfloat8": "FLOAT_8", "qfloat8_e4m3fn": "FLOAT_8", "qfloat8_e5m2": "FLOAT_8", "qint8": "INT_8", "uint8": "INT_8",
          "qint4": "NFLOAT_4", "uint4": "NFLOAT_4", "uint3": "NFLOAT_4", "uint2": "NFLOAT_4"}
UNQUANTIZED = (M.STABLE_DIFFUSION_15, M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_21_BASE, M.STABLE_DIFFUSION_XL_10_BASE,
               M.PIXART_ALPHA, M.PIXART_SIGMA)  # ai-toolkit quantizes none of their parts
T5_PART = {M.FLUX_DEV_1: "text_encoder_2", M.CHROMA_1: "text_encoder", M.STABLE_DIFFUSION_3: "text_encoder_3",
           M.STABLE_DIFFUSION_35: "text_encoder_3"}  # the one text encoder ai-toolkit quantizes there, in `qtype`
MAX_EPOCHS = 1_000_000


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


def import_aitoolkit(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None) -> LoadResult:
    """`readable`: the folders whose images may be counted (the page's; None: any)."""
    job = raw["config"]
    name = str(job.get("name") or "lora")
    if len(job["process"]) > 1:
        raise ConfigError("config.process: this ai-toolkit job has several processes; import a job with one training process")
    # ai-toolkit replaces [name] everywhere with the job's name
    process = json.loads(json.dumps(job["process"][0]).replace("[name]", json.dumps(name)[1:-1]))
    for key, what in NOT_TRAINED.items():
        if process.get(key):
            raise ConfigError(f"config.process[0].{key}: this ai-toolkit job trains {what}, which has no counterpart here")
    sections = {key: Section(key, process.get(key)) for key in ("model", "network", "save", "train", "sample")}
    top = Section("process", process)
    for key in (*sections, "datasets"):
        top.get(key)
    notes: list[str] = []
    if "${" in json.dumps(process):
        notes.append("${...}: ai-toolkit puts environment variables there; here the text stays as written")
    out: dict[str, Any] = {}
    model_type = _model(sections["model"], out, notes)
    info = family_info(model_type)
    method = _network(sections["network"], out, notes, model_type)
    trigger = str(top.get("trigger_word") or "").strip()
    scale = _train(sections["train"], out, notes, model_type, method)
    save(sections["save"], out, name, str(top.get("training_folder") or "output"))
    if scale > 1:  # ai-toolkit's steps there were batches: here optimizer steps
        out["save_every"] = max(1, out["save_every"] // scale)
    concepts, dataset_left = datasets(process.get("datasets"), out, notes, trigger, info, readable)
    if concepts:
        out["concepts"] = concepts
    sample_left = samples(sections["sample"], out, trigger, name, info, scale)
    _run_length(sections["train"], out, notes, concepts, readable, scale)

    config = validate(out)
    left = sorted([*top.left(), *(k for s in sections.values() for k in s.left()), *dataset_left, *sample_left])
    origin = f"ai-toolkit config {source}" if source else "This ai-toolkit config"
    used = sum(len(s.used & s.data.keys()) for s in sections.values())
    text = f"{origin}: read as ai-toolkit's job '{name}' ({used} settings of its model, network, save, train and sample carried over)"
    return import_result(config, text, notes, left)


def _run_length(r: Section, out: dict[str, Any], notes: list[str], concepts: list[dict[str, Any]], readable: list[Path] | None,
                scale: int) -> None:
    """ai-toolkit's steps as the epochs that hold them."""
    steps = r.number("steps", 1000, int)
    if steps < 1:
        raise ConfigError(f"train.steps: {steps} is not a number of steps (ai-toolkit config)")
    steps_as_epochs(max(1, steps // scale), f"train.steps {steps}", "ai-toolkit", concepts, out, readable, notes, stated=steps,
                    cap=MAX_EPOCHS)


def _model(r: Section, out: dict[str, Any], notes: list[str]) -> M:
    arch = str(r.get("arch") or "").strip().lower()
    for key, flag_arch in FLAGS:
        if r.flag(key) and not arch:
            arch = flag_arch
    name = str(r.get("name_or_path") or "").strip()
    if not arch:
        arch = "sd1"
        notes.append("model: no arch (nor is_flux / is_xl ...), so SD 1.x, as ai-toolkit reads it")
    model_type = ARCHS.get(arch.split(":")[0])
    if model_type is None:
        raise ConfigError(f"model.arch: '{arch}' has no model type here; pick the model type on the Model tab and set its "
                          "options there (the supported ones are listed in the README)")
    kwargs = r.get("model_kwargs") or {}
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    if kwargs.get("edit") or (model_type == M.KREA_2 and "edit" in arch.partition(":")[2]):
        raise ConfigError(f"model.arch '{arch}': this job trains Krea 2 to edit images, which has no counterpart here (Qwen-Image-Edit "
                          "is the image-editing model type here)")
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
    _quantization(r, out, notes, model_type)
    if r.flag("layer_offloading", r.flag("auto_memory")):
        share = min(1.0, max(0.0, r.number("layer_offloading_transformer_percent", 1.0)))
        out.setdefault(info.denoiser, {})["offload_fraction"] = share
        te_share = min(1.0, max(0.0, r.number("layer_offloading_text_encoder_percent", 1.0)))
        for part in info.text_encoders:
            out.setdefault(part, {})["offload_fraction"] = te_share
    if model_type in (M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B):
        high, low = bool(kwargs.pop("train_high_noise", True)), bool(kwargs.pop("train_low_noise", True))
        if not (high or low):
            raise ConfigError("model.model_kwargs: train_high_noise and train_low_noise are both off; this job trains no expert")
        out["trained_expert"] = "LOW_NOISE" if low and not high else "HIGH_NOISE"
        if high and low:
            notes.append("model.model_kwargs trains both Wan 2.2 experts in one run there; here a run trains one: this one the "
                         "high-noise expert (switch Trained expert to LOW_NOISE for a second run)")
    if kwargs:
        notes.append(f"model.model_kwargs {sorted(kwargs)}: not carried over")
    return model_type


def _quantization(r: Section, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """`quantize` / `qtype` for the transformer and `quantize_te` / `qtype_te` for the text encoders,
    as ai-toolkit's model of the family reads them."""
    info = family_info(model_type)
    quantize, quantize_te = r.flag("quantize"), r.flag("quantize_te", r.flag("quantize"))
    qtype, qtype_te = (str(r.get(k) or "qfloat8").split("|")[0].strip().lower() for k in ("qtype", "qtype_te"))
    if model_type in UNQUANTIZED:
        return
    if quantize:
        out.setdefault(info.denoiser, {})["weight_dtype"] = QTYPES.get(qtype, "FLOAT_8")
        if "|" in str(r.data.get("qtype") or ""):
            notes.append(f"model.qtype '{r.data['qtype']}': the accuracy recovery adapter is ai-toolkit's own; here the "
                         f"transformer is {QTYPES.get(qtype, 'FLOAT_8')}")
        elif qtype not in QTYPES:
            notes.append(f"model.qtype '{qtype}': here FLOAT_8")
    if model_type in T5_PART:  # T5 alone, in qtype; SD 3's with `quantize`
        if quantize if model_type in (M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35) else quantize_te:
            out.setdefault(T5_PART[model_type], {})["weight_dtype"] = QTYPES.get(qtype, "FLOAT_8")
    elif quantize_te:
        for part in info.text_encoders:
            out.setdefault(part, {})["weight_dtype"] = QTYPES.get(qtype_te, "FLOAT_8")


def _network(r: Section, out: dict[str, Any], notes: list[str], model_type: M) -> str:
    if not r.data:
        out["training_method"] = "FINE_TUNE"
        return "FINE_TUNE"
    info = family_info(model_type)
    kind = str(r.get("type") or "lora").strip().lower()
    out["training_method"] = "LORA"
    rank = r.number("rank", None, int) or r.number("linear", None, int) or 4  # ai-toolkit's: rank wins, else linear, else 4
    alpha = r.number("linear_alpha", None) or r.number("alpha", None) or 1.0
    if kind == "lokr":
        out.update(peft_type="LOKR", lokr_dim=rank, lokr_decompose_factor=r.number("lokr_factor", -1, int),
                   lokr_full_matrix=r.flag("lokr_full_rank", True))
    else:
        if kind not in ("lora", "locon"):
            notes.append(f"network.type '{kind}': trained as a LoRA here")
        out.update(peft_type="LORA", lora_rank=rank, lora_alpha=alpha)
    conv = r.get("conv")  # ai-toolkit's convolution rank: UNets' alone (its page sets it for every model)
    if conv and str(conv) != str(rank) and info.denoiser == "unet":
        notes.append(f"network.conv {conv}: convolution layers train at the linear rank here")
    r.get("conv_alpha")
    if r.number("dropout", None):
        out["dropout_probability"] = r.number("dropout")
    # transformer_only (its default): the denoiser's transformer blocks alone (a UNet's attention blocks)
    if r.flag("transformer_only", True):
        out["layer_filter_preset"] = "attn-mlp" if info.denoiser == "unet" or model_type in (M.PIXART_ALPHA, M.PIXART_SIGMA) else "blocks"
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
    for key in ("lokr_full_rank", "lokr_factor", "split_multistage_loras"):
        r.get(key)  # read above, or ai-toolkit's way of saving
    return "LORA"


def _train(r: Section, out: dict[str, Any], notes: list[str], model_type: M, method: str) -> int:
    """The training settings; returns how many of ai-toolkit's steps make one optimizer step (its
    older `gradient_accumulation_steps` counts batches as steps)."""
    info = family_info(model_type)
    out["batch_size"] = r.number("batch_size", 1, int)
    if out["batch_size"] < 1:
        raise ConfigError(f"train.batch_size: {out['batch_size']} is not a batch size (ai-toolkit config)")
    scale = 1
    if r.data.get("gradient_accumulation_steps") not in (None, 1):
        scale = r.number("gradient_accumulation_steps", 1, int)
        if scale < 1:
            raise ConfigError(f"train.gradient_accumulation_steps: {scale} (a whole epoch) is not carried over; give a number of batches")
    out["gradient_accumulation_steps"] = scale if scale > 1 else max(1, r.number("gradient_accumulation", 1, int))
    r.get("gradient_accumulation_steps")
    optimizer_name = str(r.get("optimizer") or "adamw").strip().lower()
    ours, eps = OPTIMIZERS.get(optimizer_name, ("ADAMW", True))
    if optimizer_name not in OPTIMIZERS:
        notes.append(f"train.optimizer '{optimizer_name}' has no counterpart here: ADAMW is used (choose one on the Training tab)")
    lr = r.number("lr", 1e-6)
    if ours in ADAPTIVE and lr < 0.1:
        lr = 1.0
    out["learning_rate"] = lr
    for key in ("unet_lr", "text_encoder_lr"):  # ai-toolkit trains every part at lr
        r.get(key)
    train_te = r.flag("train_text_encoder")
    unet_family = info.denoiser == "unet"
    if train_te and not unet_family:
        notes.append("train.train_text_encoder: ai-toolkit trains no text encoder of this model; nor does this import")
        train_te = False
    out.setdefault(info.denoiser, {}).update(train=r.flag("train_unet", True), learning_rate=lr)
    for part in info.text_encoders:  # trained for the whole run, when told
        out.setdefault(part, {}).update(train=train_te, stop_training_after=None, stop_training_after_unit="NEVER")
    if r.flag("unload_text_encoder"):
        notes.append("train.unload_text_encoder: ai-toolkit then trains every image on its trigger word alone, no caption; "
                     "here the captions are trained (empty the caption files, or set each concept's caption, to match)")
    optimizer: dict[str, Any] = {"optimizer": ours}
    if eps:
        optimizer["eps"] = 1e-6
    if ours == "ADAFACTOR":  # ai-toolkit's Adafactor: a fixed learning rate unless told
        optimizer.update(relative_step=False, scale_parameter=False, warmup_init=False)
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
    out["optimizer"] = optimizer
    _schedule(r, out, notes, scale)
    out["train_dtype"] = DTYPES.get(str(r.get("dtype") or "fp32").lower(), "FLOAT_32")
    mode = "ON" if r.flag("gradient_checkpointing", True) else "OFF"
    for part in (info.denoiser, *info.text_encoders):
        out.setdefault(part, {})["gradient_checkpointing"] = mode
    grad = r.number("max_grad_norm", 1.0)
    out["clip_grad_norm"] = None if ours == "ADAFACTOR" else grad or None  # ai-toolkit clips no Adafactor step
    ema = r.get("ema_config") or {}
    if isinstance(ema, dict) and ema.get("use_ema"):
        try:
            decay = float(ema.get("ema_decay", 0.999))
        except (TypeError, ValueError):
            raise ConfigError(f"train.ema_config.ema_decay: {ema.get('ema_decay')!r} is not a number (ai-toolkit config)") from None
        out.update(ema="GPU", ema_decay=decay, ema_update_step_interval=1)  # updated after every optimizer step
    if r.number("noise_offset", 0.0):
        out["offset_noise_weight"] = r.number("noise_offset")
    if r.number("min_snr_gamma", None) and info.schedule != "flow_matching":
        out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=r.number("min_snr_gamma"))
    loss = str(r.get("loss_type") or "mse").lower()
    if loss in ("mae", "l1"):
        out.update(mse_strength=0.0, mae_strength=1.0)
    elif loss not in ("mse", "l2"):
        notes.append(f"train.loss_type '{loss}': trained with the squared error (MSE) here")
    _timesteps(r, out, notes, info.schedule == "flow_matching")
    for key in ("skip_first_sample", "force_first_sample", "steps"):  # this trainer samples during training, not before it
        r.get(key)
    if r.flag("disable_sampling"):
        out["sample_after"] = 0
    if not r.flag("diff_output_preservation"):  # the page's settings of a preservation that is off
        r.get("diff_output_preservation_multiplier")
        r.get("diff_output_preservation_class")
    if model_type not in (M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B):
        r.get("switch_boundary_every")  # which expert trains a step when both do: one per run here
    else:
        r.at_default("switch_boundary_every", 1)
    if model_type not in (M.FLUX_DEV_1, M.FLUX_2):  # the page's default; only these have a guidance embedding
        r.get("bypass_guidance_embedding")
    r.at_default("content_or_style", "balanced")
    return scale


def _schedule(r: Section, out: dict[str, Any], notes: list[str], scale: int) -> None:
    """ai-toolkit's schedulers over `steps`: constant, linear (torch's LinearLR: from a third of the
    rate up to it), cosine (and cosine_with_restarts, one period over the run), constant_with_warmup
    (1,000 warmup steps unless told)."""
    scheduler = str(r.get("lr_scheduler") or "constant").strip().lower()
    params = r.get("lr_scheduler_params") or {}
    params = params if isinstance(params, dict) else {}
    total = max(1, r.number("steps", 1000, int) // scale)
    if scheduler == "linear":
        start, end = params.pop("start_factor", 1 / 3), params.pop("end_factor", 1.0)
        out.update(learning_rate_scheduler="CUSTOM", custom_learning_rate_scheduler="torch.optim.lr_scheduler.LinearLR",
                   scheduler_params=[{"key": "start_factor", "value": repr(float(start))}, {"key": "end_factor", "value": repr(float(end))},
                                     {"key": "total_iters", "value": str(int(params.pop("total_iters", total)))}],
                   learning_rate_warmup_steps=0.0)
    elif scheduler in ("cosine", "cosine_with_restarts"):
        out["learning_rate_scheduler"] = "COSINE"
    elif scheduler == "constant_with_warmup":
        out.update(learning_rate_scheduler="CONSTANT", learning_rate_warmup_steps=warmup_option(params.pop("num_warmup_steps", 1000)))
    else:
        out["learning_rate_scheduler"] = "CONSTANT"
        if scheduler != "constant":
            notes.append(f"train.lr_scheduler '{scheduler}' has no counterpart here: CONSTANT is used")
    params.pop("total_iters", None)
    if params:
        notes.append(f"train.lr_scheduler_params {sorted(params)}: not carried over")


def _timesteps(r: Section, out: dict[str, Any], notes: list[str], flow: bool) -> None:
    """Flow models: `sigmoid` (ai-toolkit's default, a sigmoid of a normal: LOGIT_NORMAL here),
    `linear` and `weighted` (uniform; weighted also weighs the loss), `shift` (uniform, then the
    model scheduler's shift)."""
    kind = str(r.get("timestep_type") or "sigmoid").lower()
    if not flow:
        return
    if r.flag("linear_timesteps") or r.flag("linear_timesteps2"):
        notes.append("train.linear_timesteps: uniform timesteps here, without ai-toolkit's weighting of the loss by timestep")
        kind = "linear"
    if kind == "sigmoid":
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=0.0, noising_bias=0.0)
    else:
        out["timestep_distribution"] = "UNIFORM"
        if kind == "weighted":
            notes.append("train.timestep_type 'weighted': uniform timesteps here, without ai-toolkit's bell-shaped weighting of the loss")
        elif kind == "shift":
            notes.append("train.timestep_type 'shift': uniform timesteps here; ai-toolkit shifts them by the model scheduler's "
                         "shift: set Timestep shift (or Dynamic timestep shifting) as its scheduler config says")
        elif kind != "linear":
            notes.append(f"train.timestep_type '{kind}': uniform timesteps here")
