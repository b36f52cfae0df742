"""Import of a kohya_ss / sd-scripts training config (kohya_ss's JSON, sd-scripts' TOML and its dataset TOML).

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
from .kohya_dataset import dataset_concepts, dataset_config, folder_concepts, run_length
from .kohya_reader import KohyaReader, is_set
from .validation import ConfigError, LoadResult, validate

# keys only kohya's configs have: two of them make a config kohya's
SIGNS = frozenset({"pretrained_model_name_or_path", "train_data_dir", "network_dim", "output_dir", "train_batch_size",
                   "LoRA_type", "save_model_as", "max_resolution", "max_train_epochs", "optimizer_type", "dataset_config"})
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
SAMPLERS = {"ddim": "DDIM", "euler": "EULER", "euler_a": "EULER_A", "k_euler": "EULER", "k_euler_a": "EULER_A",
            "dpmsolver++": "DPMPP", "dpmsingle": "DPMPP", "k_dpm_2": "DPMPP", "dpmpp_sde": "DPMPP_SDE", "unipc": "UNIPC"}
# how kohya_ss runs, not what it trains (processes, logging, its page, the attention kernel: this
# trainer's SDP computes the same): not listed as left out
PLUMBING = frozenset({
    "model_list", "unit", "num_processes", "num_machines", "num_cpu_threads_per_process", "main_process_port", "gpu_ids",
    "multi_gpu", "dynamo_backend", "dynamo_mode", "dynamo_use_dynamic", "dynamo_use_fullgraph", "extra_accelerate_launch_args",
    "max_data_loader_n_workers", "persistent_data_loader_workers", "training_comment", "wandb_api_key", "wandb_run_name",
    "log_tracker_name", "log_tracker_config", "log_with", "logging_dir", "log_prefix", "save_state", "save_state_on_train_end",
    "save_state_to_huggingface", "resume_from_huggingface", "async_upload", "xformers", "sdpa", "mem_eff_attn",
    "vae_batch_size", "cache_latents_to_disk", "huggingface_repo_id", "huggingface_token", "huggingface_repo_type",
    "huggingface_path_in_repo", "huggingface_repo_visibility", "save_as_bool", "LyCORIS_preset", "output_config",
})
# kohya's own defaults, which change nothing when a file states them
KOHYA_DEFAULTS = {"max_timestep": 1000, "min_timestep": 0, "bucket_reso_steps": 64, "min_bucket_reso": 256,
                  "max_bucket_reso": 2048, "lr_scheduler_power": 1, "factor": -1, "train_on_input": True,
                  "noise_offset_type": "Original", "max_token_length": 75, "conv_dim": 1, "conv_alpha": 1}
# kohya's sample prompt options (`a cat --n blurry --w 768`) -> the sample's field, its type
SAMPLE_FIELDS = {"n": ("negative_prompt", str), "w": ("width", int), "h": ("height", int), "d": ("seed", int),
                 "l": ("cfg_scale", float), "s": ("diffusion_steps", int)}


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
    """sd-scripts' or kohya_ss's training config, or sd-scripts' dataset config ([[datasets]])."""
    if not isinstance(data, dict) or "__version" in data or "config_version" in data:
        return False
    if "model_family" in data or "--model_family" in data:  # SimpleTuner's, not kohya's
        return False
    datasets = data.get("datasets")
    return len(SIGNS & flat(data).keys()) >= 2 or (isinstance(datasets, list) and any(isinstance(d, dict) and "subsets" in d for d in datasets))


def import_kohya(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None,
                 base_dir: str | Path | None = None) -> LoadResult:
    """`readable`: the folders where files may be read and subfolders listed (the page's; None:
    any). `base_dir`: where a relative `dataset_config` is (the config file's folder)."""
    r = KohyaReader(flat(raw))
    out: dict[str, Any] = {}
    notes: list[str] = []
    model_type = _model_type(r, notes)
    if r.flag("v_parameterization") and model_type != M.STABLE_DIFFUSION_21:  # a v-prediction SD 1.x / SDXL
        out["force_v_prediction"] = True
    info = family_info(model_type)
    out.update(model_type=model_type.value, base_model_name=str(r.get("pretrained_model_name_or_path") or ""))
    lora = any(r.given(k) for k in ("network_dim", "LoRA_type", "network_module"))
    out["training_method"] = "LORA" if lora else "FINE_TUNE"
    if lora:
        _network(r, out, notes)
    _learning_rates(r, out, info.denoiser, info.text_encoders, lora)
    _training(r, out, (info.denoiser, *info.text_encoders), notes)
    _optimizer(r, out, notes)
    _output(r, out, lora)
    _samples(r, out, notes)
    if isinstance(r.data.get("datasets"), list):  # a dataset TOML imported by itself
        r.get("datasets")
        r.get("general")
        concepts = dataset_concepts(r.data, out, notes, r, readable)
    elif r.given("dataset_config"):  # sd-scripts: it replaces train_data_dir
        concepts = dataset_config(r, out, notes, readable, base_dir)
    else:
        concepts = folder_concepts(r, notes, readable)
    if concepts is not None:
        out["concepts"] = concepts
    run_length(r, out, concepts, readable, notes)

    config = validate(out)
    left = sorted(k for k, v in r.data.items() if k not in r.used and k not in PLUMBING and is_set(v)
                  and KOHYA_DEFAULTS.get(k, object()) != v)
    origin = f"kohya_ss config {source}" if source else "This kohya_ss config"
    text = f"{origin}: read as kohya_ss's ({len(r.used & r.data.keys())} settings carried over)"
    if notes:
        text += "; " + "; ".join(notes)
    if left:
        text += "; set there but not carried over (left at this trainer's defaults): " + ", ".join(left)
    return LoadResult(config, [text + "."])


def _model_type(r: KohyaReader, notes: list[str]) -> M:
    """kohya_ss's family switches; sd-scripts picks the family by its script, so a TOML without
    them is read by its network module (lora_flux), else as SD 1.5 with a note."""
    flux, sdxl, v2 = r.flag("flux1_checkbox"), r.flag("sdxl"), r.flag("v2")
    module = str(r.data.get("network_module") or "")
    if flux or module.endswith("lora_flux") or r.given("t5xxl"):
        r.get("network_module")
        return M.FLUX_DEV_1
    if sdxl:
        return M.STABLE_DIFFUSION_XL_10_BASE
    if v2:
        return M.STABLE_DIFFUSION_21 if r.flag("v_parameterization") else M.STABLE_DIFFUSION_21_BASE
    if not any(k in r.data for k in ("sdxl", "v2", "flux1_checkbox", "sd3_checkbox")):
        notes.append("no model family is named (sd-scripts takes it from the script that runs): SD 1.5 is assumed; "
                     "choose the Model type if it is another")
    return M.STABLE_DIFFUSION_15


def _network(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    algo = re.search(r"algo\s*=\s*['\"]?(\w+)", str(r.data.get("network_args") or ""))
    if "lycoris" in str(r.data.get("network_module") or "") and algo and not r.given("LoRA_type"):
        r.get("network_module")
        r.data["LoRA_type"] = f"LyCORIS/{ {'locon': 'LoCon', 'loha': 'LoHa', 'lokr': 'LoKr'}.get(algo.group(1).lower(), algo.group(1)) }"
    kind = str(r.get("LoRA_type") or "Standard")
    peft, preset = ADAPTERS.get(kind.lower(), ("LORA", "attn-mlp"))
    if kind.lower() not in ADAPTERS:
        notes.append(f"LoRA_type '{kind}' has no counterpart here: it trains as a plain LoRA of the attention and MLP layers")
    out.update(peft_type=peft, layer_filter_preset=preset)
    for key, ours, kind_ in (("network_dim", "lora_rank", int), ("network_alpha", "lora_alpha", float),
                             ("network_dropout", "dropout_probability", float)):
        if r.given(key):
            out[ours] = r.number(key, kind_)
    if r.flag("dora_wd") or "dora_wd=true" in str(r.data.get("network_args", "")).replace(" ", "").lower():
        r.get("network_args")
        out["lora_decompose"] = True
    if r.given("network_weights"):  # the LoRA to continue from
        out["lora_model_name"] = str(r.get("network_weights"))


def _learning_rates(r: KohyaReader, out: dict[str, Any], denoiser: str, encoders: tuple[str, ...], lora: bool) -> None:
    if r.given("learning_rate"):
        out["learning_rate"] = r.number("learning_rate")
    unet = r.number("unet_lr") if r.data.get("unet_lr") not in (None, "") else None
    te_value = r.data.get("text_encoder_lr")
    if isinstance(te_value, list):  # sd-scripts: one per text encoder
        r.data["text_encoder_lr"] = te_value[0] if te_value else None
    te = r.number("text_encoder_lr") if r.data.get("text_encoder_lr") not in (None, "") else None
    if unet:
        out[denoiser] = {"learning_rate": unet}
        out.setdefault("learning_rate", unet)
    # kohya: a learning rate of 0 leaves that part untrained (its parameters are not optimized)
    train_te = not (r.flag("network_train_unet_only") or r.flag("cache_text_encoder_outputs") or (lora and te == 0))
    dropout = r.number("caption_dropout_rate") if r.given("caption_dropout_rate") else None
    for part in encoders:
        # kohya trains a text encoder for the whole run (this trainer's default stops it after 30 epochs)
        section: dict[str, Any] = {"train": train_te, "stop_training_after": None, "stop_training_after_unit": "NEVER"}
        if train_te and te:
            section["learning_rate"] = te
        if dropout:
            section["dropout_probability"] = dropout
        out[part] = section
    if "text_encoder_2" in encoders and denoiser == "transformer":  # Flux's T5: sd-scripts trains it only when asked
        out["text_encoder_2"]["train"] = train_te and r.flag("train_t5xxl")
    if r.flag("network_train_text_encoder_only") or (lora and unet == 0):
        out.setdefault(denoiser, {})["train"] = False
    # kohya's clip skip 2 skips one layer; sd-scripts ignores it for SDXL and Flux (they read the
    # layers they were trained on), and so does this import
    if r.given("clip_skip") and r.number("clip_skip", int) > 1 and denoiser == "unet" and len(encoders) == 1:
        out["text_encoder_layer_skip"] = r.number("clip_skip", int) - 1


def _training(r: KohyaReader, out: dict[str, Any], trained_parts: tuple[str, ...], notes: list[str]) -> None:
    for key, ours, kind in (("train_batch_size", "batch_size", int), ("gradient_accumulation_steps", "gradient_accumulation_steps", int),
                            ("seed", "seed", int), ("max_grad_norm", "clip_grad_norm", float),
                            ("noise_offset", "offset_noise_weight", float), ("min_snr_gamma", "loss_weight_strength", float),
                            ("lr_scheduler_num_cycles", "learning_rate_cycles", float)):
        if r.given(key):
            out[ours] = r.number(key, kind)
    if "loss_weight_strength" in out:
        out["loss_weight_fn"] = "MIN_SNR_GAMMA"
    elif r.flag("debiased_estimation_loss"):
        out["loss_weight_fn"] = "DEBIASED_ESTIMATION"
    if r.given("vae"):
        out.setdefault("vae", {})["model_name"] = str(r.get("vae"))
    if r.flag("sdxl_no_half_vae") or r.flag("no_half_vae"):
        out.setdefault("vae", {})["weight_dtype"] = "FLOAT_32"
    size = r.get("max_resolution") or r.get("resolution") or ""  # kohya_ss's page / sd-scripts
    size = ",".join(str(v) for v in size) if isinstance(size, list) else str(size).replace(" ", "")
    if size:
        w, _, h = size.partition(",")
        out["resolution"] = w if not h or h == w else f"{w}x{h}"
    for key, ours in (("enable_bucket", "aspect_ratio_bucketing"), ("cache_latents", "latent_caching")):
        if r.data.get(key) is not None:
            out[ours] = r.flag(key)
    if r.flag("zero_terminal_snr"):
        out["rescale_noise_scheduler_to_zero_terminal_snr"] = True
    for key, ours in (("mixed_precision", "train_dtype"), ("save_precision", "output_dtype")):
        if str(r.get(key) or "").lower() in PRECISION:
            out[ours] = PRECISION[str(r.data[key]).lower()]
    if r.data.get("gradient_checkpointing") is not None:
        mode = "ON" if r.flag("gradient_checkpointing") else "OFF"
        for part in trained_parts:
            out.setdefault(part, {})["gradient_checkpointing"] = mode
    scheduler = str(r.get("lr_scheduler") or "").lower()
    if scheduler:
        out["learning_rate_scheduler"] = SCHEDULERS.get(scheduler, "CONSTANT")
        if scheduler not in SCHEDULERS:
            notes.append(f"lr_scheduler '{scheduler}' has no counterpart here: CONSTANT is used")
    steps = r.number("lr_warmup_steps") if r.given("lr_warmup_steps") else 0.0
    percent = r.number("lr_warmup") if r.given("lr_warmup") else 0.0  # kohya_ss's page: a percentage of the steps
    # sd-scripts: steps, or below 1 a fraction of all steps; kohya_ss's page: its percentage when no steps
    out["learning_rate_warmup_steps"] = steps if steps else min(percent, 99.0) / 100


def _optimizer(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    name = str(r.get("optimizer") or r.get("optimizer_type") or "")
    if not name:
        return
    ours = OPTIMIZERS.get(name.lower().replace("_", "").replace(".", ""))
    if ours is None:
        notes.append(f"optimizer '{name}' has no counterpart here: choose one on the Training tab (ADAMW is used)")
        ours = "ADAMW"
    section: dict[str, Any] = {"optimizer": ours}
    if name.lower().startswith("sgdnesterov"):
        section["nesterov"] = True
    args = r.get("optimizer_args")
    for item in args if isinstance(args, list) else str(args or "").split():
        key, _, value = str(item).partition("=")
        key, value = key.strip(), value.strip().strip("\"'")
        try:
            if key == "betas":
                parts = [p for p in value.strip("()[]").split(",") if p.strip()]
                section.update(beta1=float(parts[0]), beta2=float(parts[1]))
            elif key in OPTIMIZER_ARGS:
                low = value.lower()
                section[OPTIMIZER_ARGS[key]] = (low == "true") if low in ("true", "false") else float(value)
            elif key:
                notes.append(f"optimizer argument '{key}' is not carried over")
        except (IndexError, ValueError):
            raise ConfigError(f"optimizer_args: '{item}' is not a value this trainer reads (kohya_ss config)") from None
    out["optimizer"] = section


def _output(r: KohyaReader, out: dict[str, Any], lora: bool) -> None:
    folder, name = r.get("output_dir"), r.get("output_name")
    if folder or name:
        out["output_model_destination"] = str(Path(str(folder or "models")) / f"{name or 'last'}.safetensors")
    out["output_model_format"] = "KOHYA_LORA" if lora else "SAFETENSORS"
    r.get("save_model_as")  # safetensors, ckpt or pt there: a .safetensors file here
    for key, unit in (("save_every_n_epochs", "EPOCH"), ("save_every_n_steps", "STEP")):
        if r.given(key):  # kohya saves at both; here at the first (the other is listed as not carried over)
            out.update(save_every=r.number(key, int), save_every_unit=unit)
            break


def sample_from_kohya(line: str) -> dict[str, Any]:
    """One sample prompt line as sd-scripts splits it: the prompt, then ` --<option> <value>` parts
    (`n` negative prompt, `w`/`h` size, `d` seed, `l` CFG, `s` steps, `ss` sampler; any case; other
    options are sd-scripts' own and skipped)."""
    prompt, *options = line.strip().split(" --")
    sample: dict[str, Any] = {"prompt": prompt.strip()}
    for option in options:
        name, _, value = option.strip().partition(" ")
        name, value = name.lower(), value.strip()
        if name == "ss" and value.lower() in SAMPLERS:
            sample["noise_scheduler"] = SAMPLERS[value.lower()]
        elif name in SAMPLE_FIELDS and value:
            key, kind = SAMPLE_FIELDS[name]
            try:
                sample[key] = kind(value)
            except ValueError:
                continue
    return sample


def _samples(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    prompts = r.get("sample_prompts")
    lines = prompts if isinstance(prompts, list) else str(prompts or "").splitlines()
    if isinstance(prompts, str) and len(lines) == 1 and prompts.strip().lower().endswith((".txt", ".toml", ".json")):
        # sd-scripts' file of prompts: not read (an import never opens a file it names, the page's login
        # aside); the user puts its lines in the Sampling tab
        notes.append(f"sample_prompts names a file ({prompts.strip()}): put its prompts in the Sampling tab")
        lines = []
    samples = [sample_from_kohya(str(line)) for line in lines if str(line).strip() and not str(line).lstrip().startswith("#")]
    size = str(out.get("resolution", "")).partition("x")
    sampler = SAMPLERS.get(str(r.get("sample_sampler") or "").lower())
    for sample in samples:
        # sd-scripts' defaults (30 steps, CFG 7.5), but the training size, not its 512 x 512 (noise for SDXL)
        sample.setdefault("diffusion_steps", 30)
        sample.setdefault("cfg_scale", 7.5)
        if size[0].isdigit():
            sample.setdefault("width", int(size[0]))
            sample.setdefault("height", int(size[2] or size[0]))
        if sampler:
            sample.setdefault("noise_scheduler", sampler)
    if samples:
        out["samples"] = samples
    for key, unit in (("sample_every_n_epochs", "EPOCH"), ("sample_every_n_steps", "STEP")):
        if r.given(key):
            out.update(sample_after=r.number(key, int), sample_after_unit=unit)


