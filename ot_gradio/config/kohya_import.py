"""Import of a kohya_ss / sd-scripts training config (kohya_ss's JSON, sd-scripts' TOML and its dataset TOML).

A kohya_ss user's saved config names the model, the dataset folder (`train_data_dir`, whose
`<repeats>_<name>` subfolders are the concepts), the network and the optimizer in kohya's words.
It becomes our config: each setting with a counterpart here is carried over, and one warning
lists what was carried and every other set value, which is left at our default. sd-scripts'
sectioned configs (`"optimizer_arguments": {...}`) are read flat, as sd-scripts reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .enums import ModelType as M
from .families import family_info
from .kohya_dataset import buckets, dataset_concepts, dataset_config, folder_concepts, run_length
from .kohya_flow import flow_timesteps, other_family_keys
from .kohya_model import FAMILY_NAMES, kohya_model_type, model_sources
from .kohya_network import network
from .kohya_reader import KohyaReader, changes_something
from .lr_schedules import warmup_option
from .musubi_model import PLUMBING as MUSUBI_PLUMBING
from .musubi_model import is_musubi, musubi_model_type, musubi_options, musubi_sources
from .validation import ConfigError, LoadResult, import_result, validate

# keys only kohya's configs have: two of them make a config kohya's
SIGNS = frozenset({"pretrained_model_name_or_path", "train_data_dir", "network_dim", "output_dir", "train_batch_size", "dit",
                   "LoRA_type", "save_model_as", "max_resolution", "max_train_epochs", "optimizer_type", "dataset_config"})
OPTIMIZERS = {
    "adamw": "ADAMW", "adamw8bit": "ADAMW_8BIT", "pagedadamw8bit": "ADAMW_8BIT", "adam": "ADAM", "adam8bit": "ADAM_8BIT",
    "lion": "LION", "lion8bit": "LION_8BIT", "pagedlion8bit": "LION_8BIT", "sgd": "SGD", "sgdnesterov": "SGD",
    "sgdnesterov8bit": "SGD_8BIT", "prodigy": "PRODIGY", "adafactor": "ADAFACTOR", "dadaptation": "DADAPT_ADAM",
    "dadaptadam": "DADAPT_ADAM", "dadaptadagrad": "DADAPT_ADA_GRAD", "dadaptadan": "DADAPT_ADAN", "dadaptlion": "DADAPT_LION",
    "dadaptsgd": "DADAPT_SGD", "came": "CAME",
}
SCHEDULERS = {"constant": "CONSTANT", "constant_with_warmup": "CONSTANT", "linear": "LINEAR", "cosine": "COSINE",
              "cosine_with_restarts": "COSINE_WITH_RESTARTS", "adafactor": "ADAFACTOR",
              # polynomial: diffusers' decay to 1e-7, of power 1 (sd-scripts' default) the linear one; cosine_with_min_lr:
              # transformers' cosine, from 1 down to lr_scheduler_min_lr_ratio (the minimum LR factor here)
              "polynomial": "LINEAR", "cosine_with_min_lr": "COSINE"}
# kohya's optimizer_args names -> ours
OPTIMIZER_ARGS = {"weight_decay": "weight_decay", "eps": "eps", "d_coef": "d_coef", "decouple": "decouple", "d0": "d0",
                  "growth_rate": "growth_rate",
                  "use_bias_correction": "use_bias_correction", "safeguard_warmup": "safeguard_warmup",
                  "relative_step": "relative_step", "scale_parameter": "scale_parameter", "warmup_init": "warmup_init",
                  "momentum": "momentum", "nesterov": "nesterov"}
T5_PART = {M.FLUX_DEV_1: "text_encoder_2", M.CHROMA_1: "text_encoder", M.STABLE_DIFFUSION_3: "text_encoder_3",
           M.STABLE_DIFFUSION_35: "text_encoder_3"}
# the families whose sd-scripts model is the transformer's file alone, and the keys naming their other parts' files
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
    "vae_batch_size", "lowram", "highvram", "sd3_text_encoder_batch_size", "text_encoder_batch_size", "cache_latents_to_disk", "cache_text_encoder_outputs_to_disk", "sd3_cache_text_encoder_outputs_to_disk",
    "flux1_cache_text_encoder_outputs_to_disk", "huggingface_repo_id", "huggingface_token", "huggingface_repo_type",
    "huggingface_path_in_repo", "huggingface_repo_visibility", "save_as_bool", "output_config",
    # the fine-tune page's own preparation of kohya's metadata files
    "train_dir", "caption_metadata_filename", "latent_metadata_filename", "full_path", "create_buckets", "create_caption",
    "use_latent_files", "generate_caption_database", "generate_image_buckets", "batch_size",
})
# kohya's sample prompt options (`a cat --n blurry --w 768`) -> the sample's field, its type
SAMPLE_FIELDS = {"n": ("negative_prompt", str), "w": ("width", int), "h": ("height", int), "d": ("seed", int),
                 "l": ("cfg_scale", float), "s": ("diffusion_steps", int)}


# tables that are values, not sections: a dataset config's [general], an optimizer_args table
NOT_SECTIONS = frozenset({"general", "optimizer_args"})


def flat(data: dict[str, Any]) -> dict[str, Any]:
    """A config file's sections flattened, as sd-scripts reads its `--config_file`: every table's
    keys at the top, whatever the table's name ([model_arguments], [network], [training] ...)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key not in NOT_SECTIONS:
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
    folders = ("subsets", "image_directory", "video_directory", "image_jsonl_file", "video_jsonl_file")  # sd-scripts' subsets, musubi-tuner's datasets
    if is_musubi(flat(data)):  # (a musubi-tuner config naming its model by network_module / task, its dit on the command line)
        return True
    return len(SIGNS & flat(data).keys()) >= 2 or (isinstance(datasets, list) and any(isinstance(d, dict) and d.keys() & set(folders)
                                                                                      for d in datasets))


def import_kohya(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None,
                 base_dir: str | Path | None = None) -> LoadResult:
    """`readable`: the folders where files may be read and subfolders listed (the page's; None:
    any). `base_dir`: where a relative `dataset_config` is (the config file's folder)."""
    r = KohyaReader(command_line(flat(raw)), sections=[k for k, v in raw.items() if isinstance(v, dict)])
    out: dict[str, Any] = {}
    notes: list[str] = []
    musubi = is_musubi(r.data)  # kohya's musubi-tuner: sd-scripts' options, its own model files and families
    model_type = musubi_model_type(r, notes) if musubi else kohya_model_type(r, notes)
    if r.flag("v_parameterization") and model_type != M.STABLE_DIFFUSION_21:  # a v-prediction SD 1.x / SDXL
        out["force_v_prediction"] = True
    (musubi_sources if musubi else model_sources)(r, out, notes, model_type)
    method = ("EMBEDDING" if r.given("token_string") else
              "LORA" if any(r.given(k) for k in ("network_dim", "LoRA_type", "network_module")) else "FINE_TUNE")
    out["training_method"] = method
    if method == "LORA":
        network(r, out, notes, model_type)
    if method == "EMBEDDING":
        _embedding(r, out, notes)
    else:
        _learning_rates(r, out, model_type, method)
    if model_type == M.ANIMA and method == "LORA" and out.get("text_encoder", {}).get("train"):
        out["text_encoder"]["train"] = False
        notes.append("text encoder: sd-scripts' Anima LoRA can train Qwen3 too; here Anima's transformer alone is trained, as "
                     "OneTrainer does (no program is known to load a Qwen3 LoRA layer of such a file)")
    _training(r, out, model_type, notes)
    flow_timesteps(r, out, model_type, notes)
    if musubi:
        musubi_options(r, out, notes, model_type)
    else:  # kohya_ss's page saves other families' keys
        other_family_keys(r, model_type)
    _optimizer(r, out, notes)
    _output(r, out, method)
    _samples(r, out, notes, model_type)
    if isinstance(r.data.get("datasets"), list):  # a dataset TOML imported by itself
        r.get("datasets")
        r.get("general")
        concepts = dataset_concepts(r.data, out, notes, r, readable, base_dir)
    elif r.given("dataset_config"):  # sd-scripts: it replaces train_data_dir and reg_data_dir (ignored with a warning there)
        concepts = dataset_config(r, out, notes, readable, base_dir)
        if concepts is None:  # not read: the training config's own bucket settings
            buckets(r.get, out, notes, page=r.page)
        for key in ("train_data_dir", "reg_data_dir", "dataset_repeats"):  # the dataset config's folders and repeats instead
            r.get(key)
    else:
        concepts = folder_concepts(r, notes, readable, base_dir)
    if concepts is not None:
        out["concepts"] = concepts
        if any(c["image"].get("alpha_mask") for c in concepts):  # sd-scripts' alpha_mask: the transparent areas weigh 0,
            out.update(masked_training=True, unmasked_probability=0.0, unmasked_weight=0.0)  # in every step
    run_length(r, out, concepts, readable, notes)

    config = validate(out)
    plumbing = PLUMBING | MUSUBI_PLUMBING if musubi else PLUMBING
    left = sorted(k for k, v in r.data.items() if k not in r.used and k not in plumbing and changes_something(k, v))
    tool = "musubi-tuner" if musubi else "kohya_ss"
    origin = f"{tool} config {source}" if source else f"This {tool} config"
    text = f"{origin}: read as {tool}'s ({len(r.used & r.data.keys())} settings carried over)"
    return import_result(config, text, notes, left)


def scheduler_args(value: Any) -> list[dict[str, str]]:
    """sd-scripts' `lr_scheduler_args` as the CUSTOM scheduler's parameters: each value as written,
    a Python literal (sd-scripts reads them with ast.literal_eval: a text value keeps its quotes)."""
    import shlex  # noqa: PLC0415

    items = value if isinstance(value, list) else shlex.split(str(value or ""), posix=False)
    pairs = (str(item).partition("=") for item in items)
    return [{"key": key.strip(), "value": val.strip()} for key, _, val in pairs if key.strip()]


def _learning_rates(r: KohyaReader, out: dict[str, Any], model_type: M, method: str) -> None:
    info = family_info(model_type)
    denoiser, encoders = info.denoiser, info.text_encoders
    if r.given("learning_rate"):
        out["learning_rate"] = r.number("learning_rate")
    for key in ("text_encoder_lr", "learning_rate_te1"):  # sd-scripts: one per text encoder; the DreamBooth page: te1/te2
        if isinstance(r.data.get(key), list):
            r.data[key] = r.data[key][0] if r.data[key] else None
    unet = r.number("unet_lr") if r.data.get("unet_lr") not in (None, "") else None
    sd1 = denoiser == "unet" and len(encoders) == 1
    for key in ("learning_rate_te", "learning_rate_te1", "learning_rate_te2"):  # the DreamBooth page's, for one family or another
        r.get(key)
    keys = ("text_encoder_lr", "learning_rate_te" if sd1 else "learning_rate_te1")
    te_key = next((k for k in keys if r.data.get(k) not in (None, "")), None)
    te = r.number(te_key) if te_key else None
    if method == "LORA" and unet == 0 and te == 0:  # kohya_ss's page sends neither: both train at the learning rate
        unet = te = None
    if unet:
        out.setdefault(denoiser, {})["learning_rate"] = unet  # beside a transformer file read above
        out.setdefault("learning_rate", unet)
    if method == "LORA":  # a learning rate of 0 leaves that part untrained (its parameters are not optimized)
        train_te = not (r.flag("network_train_unet_only") or te == 0)
    elif r.data.get("train_text_encoder") is not None:  # the fine-tune page, sdxl_train.py
        train_te = r.flag("train_text_encoder")
    elif sd1:  # SD 1.x/2.x DreamBooth (train_db.py) trains it unless its rate is 0
        train_te = te != 0
    else:  # SDXL DreamBooth: with a text encoder rate above 0; SD 3 and Flux fine-tunes: only when told
        train_te = denoiser == "unet" and (bool(te) or bool(r.data.get("learning_rate_te2")))
    if any([r.flag(f"{prefix}cache_text_encoder_outputs") for prefix in ("", "sdxl_", "sd3_", "flux1_")]):  # each read
        train_te = False
    for part in encoders:
        # kohya trains a text encoder for the whole run (this trainer's default stops it after 30 epochs)
        section: dict[str, Any] = {"train": train_te, "stop_training_after": None, "stop_training_after_unit": "NEVER"}
        if train_te and te:
            section["learning_rate"] = te
        out.setdefault(part, {}).update(section)  # beside a text encoder file read above
    if train_te and r.given("learning_rate_te2") and "text_encoder_2" in out and denoiser == "unet":
        out["text_encoder_2"]["learning_rate"] = r.number("learning_rate_te2")
    if model_type in T5_PART:  # sd-scripts trains T5 only when asked
        out[T5_PART[model_type]]["train"] = train_te and r.flag("train_t5xxl")
    if r.flag("network_train_text_encoder_only") or (method == "LORA" and unet == 0):
        out.setdefault(denoiser, {})["train"] = False


def _training(r: KohyaReader, out: dict[str, Any], model_type: M, notes: list[str]) -> None:
    info = family_info(model_type)
    for key, ours, kind in (("train_batch_size", "batch_size", int), ("gradient_accumulation_steps", "gradient_accumulation_steps", int),
                            ("seed", "seed", int), ("lr_scheduler_num_cycles", "learning_rate_cycles", float)):
        if r.given(key):
            out[ours] = r.number(key, kind)
    if r.data.get("max_grad_norm") not in (None, ""):  # 0: no clipping
        out["clip_grad_norm"] = r.number("max_grad_norm") or None
    flux_noise = model_type in (M.FLUX_DEV_1, M.CHROMA_1, M.ANIMA)  # flux_train_utils' noise (Anima's script uses it too)
    sd3 = model_type in (M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35)
    # kohya_ss sends noise_offset only with its "Original" noise type, and multires noise only with
    # "Multires"; sd-scripts' Flux and SD 3 scripts draw plain noise and use no min-SNR gamma
    noise_type = str(r.get("noise_offset_type") or "Original")
    original, multires = noise_type == "Original", noise_type != "Original" or not r.given("noise_offset_type")
    if r.given("noise_offset") and original and not (flux_noise or sd3):
        out["offset_noise_weight"] = r.number("noise_offset")
        out["offset_noise_random_strength"] = r.flag("noise_offset_random_strength")
        if r.given("adaptive_noise_scale"):
            out["adaptive_noise_scale"] = r.number("adaptive_noise_scale")
    elif not original:
        for key in ("noise_offset", "noise_offset_random_strength", "adaptive_noise_scale"):
            r.get(key)  # unused there too
    if r.given("multires_noise_iterations") and multires and not (flux_noise or sd3):
        out["multires_noise_iterations"] = r.number("multires_noise_iterations", int)
        if r.given("multires_noise_discount"):
            out["multires_noise_discount"] = r.number("multires_noise_discount")
    elif not multires:
        r.get("multires_noise_iterations")
        r.get("multires_noise_discount")
    if r.given("min_snr_gamma") and not (flux_noise or sd3):
        out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=r.number("min_snr_gamma"))
    elif r.flag("debiased_estimation_loss") and not (flux_noise or sd3):
        out["loss_weight_fn"] = "DEBIASED_ESTIMATION"
    if r.given("ip_noise_gamma") and not sd3:  # input perturbation: the noisy input only, as here
        out["perturbation_noise_weight"] = r.number("ip_noise_gamma")
        out["perturbation_noise_random_strength"] = r.flag("ip_noise_gamma_random_strength")
    # the timesteps trained, [min_timestep, max_timestep) of 1000 (sd-scripts' Flux, Chroma and Anima draw from all)
    for key, ours in (("min_timestep", "min_noising_strength"), ("max_timestep", "max_noising_strength")):
        if r.given(key) and changes_something(key, r.data[key]) and not flux_noise and "trained_expert" not in out:
            out[ours] = min(1.0, max(0.0, r.number(key) / 1000))
    if flux_noise or sd3:
        ignored = ("noise_offset", "multires_noise_iterations", "min_snr_gamma", "debiased_estimation_loss",
                   *(("ip_noise_gamma",) if sd3 else ("min_timestep", "max_timestep")))
        if named := [k for k in ignored if changes_something(k, r.data.get(k)) and (k != "multires_noise_iterations" or multires)]:
            for key in (*ignored, "multires_noise_discount"):
                r.get(key)
            notes.append(f"{', '.join(named)}: sd-scripts does not use them for {FAMILY_NAMES[model_type]}, nor does this import")
    if r.flag("masked_loss") and not r.flag("alpha_mask"):  # sd-scripts' masks: a conditioning_data_dir (alpha: below)
        notes.append("masked_loss: here a mask is a <image>-masklabel.png beside each image (white trains); put them there and "
                     "turn on Training → Masked training (Tools → Masks can draw them)")
    if r.given("caption_dropout_rate"):  # kohya's empty caption: every text encoder's at once
        out["caption_dropout_probability"] = r.number("caption_dropout_rate")
    loss_type = str(r.get("loss_type") or "l2").lower()
    if loss_type in ("l2", "l1"):
        for key in ("huber_c", "huber_schedule", "huber_scale"):  # the pseudo-Huber loss's alone
            r.get(key)
    if loss_type == "l1":
        out.update(mse_strength=0.0, mae_strength=1.0)
    elif loss_type in ("huber", "smooth_l1"):  # sd-scripts' pseudo-Huber with a timestep schedule of its threshold
        for key in ("huber_c", "huber_schedule", "huber_scale"):
            r.get(key)
        notes.append(f"loss_type {loss_type}: sd-scripts' pseudo-Huber loss, whose threshold huber_c changes with the "
                     "timestep (huber_schedule), has no counterpart here; it trains with the squared error (MSE). The "
                     "Huber strength and delta on the Training tab give a Huber loss with a fixed threshold")
    # kohya's clip skip 2 skips one layer; sd-scripts ignores it for SDXL and Flux (they read the
    # layers they were trained on), and so does this import
    if r.given("clip_skip") and r.number("clip_skip", int) > 1 and info.denoiser == "unet" and len(info.text_encoders) == 1:
        out["text_encoder_layer_skip"] = r.number("clip_skip", int) - 1
    if r.given("max_token_length") and info.denoiser == "unet":  # 150 / 225: CLIP read in windows of 75
        out["text_encoder_max_token_length"] = r.number("max_token_length", int)
    if r.flag("fp8_base") or r.flag("fp8_base_unet"):  # the denoiser's weights in 8 bits, computed in the train type
        out.setdefault(info.denoiser, {})["weight_dtype"] = "FLOAT_8"
    full = "BFLOAT_16" if r.flag("full_bf16") else "FLOAT_16" if r.flag("full_fp16") else None
    if full:  # sd-scripts' full_bf16 / full_fp16: the trained weights themselves (and their gradients) in that type
        if out.get("training_method") == "LORA":
            out["lora_weight_dtype"] = full
        else:
            for part in (info.denoiser, *info.text_encoders):
                if out.get(part, {}).get("train", part == info.denoiser):
                    out.setdefault(part, {})["weight_dtype"] = full
    if r.flag("sdxl_no_half_vae") or r.flag("no_half_vae"):
        out.setdefault("vae", {})["weight_dtype"] = "FLOAT_32"
    size = r.get("max_resolution") or r.get("resolution") or ""  # kohya_ss's page / sd-scripts
    size = ",".join(str(v) for v in size) if isinstance(size, list) else str(size).replace(" ", "")
    if size:
        out["resolution"] = _resolution(size, notes)
    if not (isinstance(r.data.get("datasets"), list) or r.given("dataset_config")):  # else the dataset config's (dataset_concepts)
        buckets(r.get, out, notes, page=r.page)
    if r.data.get("cache_latents") is not None:
        out["latent_caching"] = r.flag("cache_latents")
    if r.flag("zero_terminal_snr"):
        out["rescale_noise_scheduler_to_zero_terminal_snr"] = True
        if not r.flag("v_parameterization"):  # sd-scripts keeps epsilon; zero terminal SNR alone trains v here
            out["force_epsilon_prediction"] = True
    for key, ours in (("mixed_precision", "train_dtype"), ("save_precision", "output_dtype")):
        if str(r.get(key) or "").lower() in PRECISION:
            out[ours] = PRECISION[str(r.data[key]).lower()]
    if r.data.get("gradient_checkpointing") is not None:
        mode = "ON" if r.flag("gradient_checkpointing") else "OFF"
        for part in (info.denoiser, *info.text_encoders):
            out.setdefault(part, {})["gradient_checkpointing"] = mode
    scheduler = str(r.get("lr_scheduler") or "").lower()
    if scheduler:
        out["learning_rate_scheduler"] = SCHEDULERS.get(scheduler, "CONSTANT")
        if scheduler not in SCHEDULERS:
            notes.append(f"lr_scheduler '{scheduler}' has no counterpart here: CONSTANT is used")
        if scheduler == "cosine_with_restarts" and r.data.get("lr_scheduler_num_cycles") == "" and r.given("epoch"):
            out["learning_rate_cycles"] = float(r.number("epoch", int))  # kohya_ss's page: blank = one cycle an epoch
    power = r.number("lr_scheduler_power") if r.given("lr_scheduler_power") else 1.0  # read: polynomial's alone
    if scheduler == "polynomial" and power != 1.0:
        notes.append(f"lr_scheduler 'polynomial' of power {power:g}: here it decays linearly (the power 1 curve)")
    ratio = r.number("lr_scheduler_min_lr_ratio") if r.given("lr_scheduler_min_lr_ratio") else 0.0  # read: these schedulers' alone
    if scheduler == "cosine_with_min_lr":
        out["learning_rate_min_factor"] = ratio
        cycles = r.number("lr_scheduler_num_cycles") if r.given("lr_scheduler_num_cycles") else 1.0
        if cycles != 1.0:  # sd-scripts runs it with half its cycles: 1 is the one cosine decay
            notes.append(f"lr_scheduler_num_cycles {cycles:g} with cosine_with_min_lr: here it is one cosine decay")
    steps = r.number("lr_warmup_steps") if r.given("lr_warmup_steps") else 0.0
    percent = r.number("lr_warmup") if r.given("lr_warmup") else 0.0  # kohya_ss's page: a percentage of the steps
    # sd-scripts: steps, or below 1 a fraction of all steps; kohya_ss's page: its percentage when no steps
    out["learning_rate_warmup_steps"] = warmup_option(steps) if steps else min(percent, 99.0) / 100
    custom = str(r.get("lr_scheduler_type") or "").strip()
    if custom:  # sd-scripts builds that class (torch.optim.lr_scheduler's when no module is named) with lr_scheduler_args, no warmup
        out.update(learning_rate_scheduler="CUSTOM", learning_rate_warmup_steps=0.0,
                   custom_learning_rate_scheduler=custom if "." in custom else f"torch.optim.lr_scheduler.{custom}",
                   scheduler_params=scheduler_args(r.get("lr_scheduler_args")))



def _resolution(size: str, notes: list[str]) -> str:
    """kohya's "W,H" (one size) as "WxH"; a side that is no multiple of 8 rounded down to one, with a note."""
    try:
        sides = [int(float(v)) for v in size.lower().replace("x", ",").split(",") if v.strip()][:2]
    except ValueError:
        raise ConfigError(f"resolution: '{size}' is not a size (kohya_ss config)") from None
    if not sides:
        raise ConfigError(f"resolution: '{size}' is not a size (kohya_ss config)")
    rounded = [max(64, side - side % 8) for side in sides]
    if rounded != sides:
        notes.append(f"resolution {size}: {'x'.join(map(str, rounded))} here (sides are multiples of 8)")
    w, h = rounded[0], rounded[-1]
    return str(w) if w == h else f"{w}x{h}"


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
    if ours == "ADAFACTOR":  # sd-scripts' Adafactor: relative step unless told otherwise, transformers' scaling
        section.update(relative_step=True, scale_parameter=True, warmup_init=False)
    args = r.get("optimizer_args")
    # kohya_ss takes out every double quote, then splits on spaces
    for item in args if isinstance(args, list) else str(args or "").replace('"', "").split():
        key, _, value = str(item).partition("=")
        key, value = key.strip().strip("\"'"), value.strip().strip("\"'")
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
    if section.get("relative_step"):  # sd-scripts then schedules with Adafactor's own, the learning rate its start
        out["learning_rate_scheduler"] = "ADAFACTOR"
    out["optimizer"] = section


def _output(r: KohyaReader, out: dict[str, Any], method: str) -> None:
    folder, name = r.get("output_dir"), r.get("output_name")
    if folder or name:
        out["output_model_destination"] = str(Path(str(folder or "models")) / f"{name or 'last'}.safetensors")
    out["output_model_format"] = "KOHYA_LORA" if method == "LORA" else "SAFETENSORS"
    r.get("save_model_as")  # safetensors, ckpt or pt there: a .safetensors file here
    for key, unit, last in (("save_every_n_epochs", "EPOCH", "save_last_n_epochs"), ("save_every_n_steps", "STEP", "save_last_n_steps")):
        if r.given(key):  # kohya saves at both; here at the first (the other is listed as not carried over)
            every = r.number(key, int)
            out.update(save_every=every, save_every_unit=unit)
            if r.given(last) and every > 0:  # sd-scripts keeps the last N epochs' saves, or those of the last N steps
                n = r.number(last, int)
                out["save_keep_last"] = n if unit == "EPOCH" else n // every + 1
            break


def sample_from_kohya(line: str, flux: bool = False) -> dict[str, Any]:
    """One sample prompt line as sd-scripts splits it: the prompt, then ` --<option> <value>` parts
    (`n` negative prompt, `w`/`h` size, `d` seed, `l` CFG, `s` steps, `ss` sampler; any case; other
    options are sd-scripts' own and skipped). For Flux, `g` is the guidance (this trainer's CFG
    scale there) and `l`, sd-scripts' true CFG, is skipped."""
    prompt, *options = line.strip().split(" --")
    sample: dict[str, Any] = {"prompt": prompt.strip()}
    fields = {**SAMPLE_FIELDS, "g": SAMPLE_FIELDS["l"]} if flux else SAMPLE_FIELDS
    for option in options:
        name, _, value = option.strip().partition(" ")
        name, value = name.lower(), value.strip()
        if name == "ss" and value.lower() in SAMPLERS:
            sample["noise_scheduler"] = SAMPLERS[value.lower()]
        elif name in fields and value and not (flux and name == "l"):
            key, kind = fields[name]
            try:
                sample[key] = kind(value)
            except ValueError:
                continue
    return sample


def _samples(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    prompts = r.get("sample_prompts")
    lines = prompts if isinstance(prompts, list) else str(prompts or "").splitlines()
    if isinstance(prompts, str) and len(lines) == 1 and prompts.strip().lower().endswith((".txt", ".toml", ".json")):
        # sd-scripts' file of prompts: not read (an import never opens a file it names, the page's login
        # aside); the user puts its lines in the Sampling tab
        notes.append(f"sample_prompts names a file ({prompts.strip()}): put its prompts in the Sampling tab")
        lines = []
    flux = model_type == M.FLUX_DEV_1
    samples = [sample_from_kohya(str(line), flux) for line in lines if str(line).strip() and not str(line).lstrip().startswith("#")]
    size = str(out.get("resolution", "")).partition("x")
    sampler = SAMPLERS.get(str(r.get("sample_sampler") or "").lower())
    chroma = model_type == M.CHROMA_1  # Flux's sampling script: 20 steps, its CFG (--l) 1.0
    for sample in samples:
        # sd-scripts' defaults (30 steps, CFG 7.5; Flux: 20 steps, guidance 3.5), but the training
        # size, not its 512 x 512 (noise for SDXL)
        sample.setdefault("diffusion_steps", 20 if flux or chroma else 30)
        sample.setdefault("cfg_scale", 3.5 if flux else 1.0 if chroma else 7.5)
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


def _embedding(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    """kohya_ss's textual-inversion page: the token, its start word, vectors, the embedding to continue."""
    embedding: dict[str, Any] = {"placeholder": str(r.get("token_string") or "<embedding>")}
    if r.given("init_word"):
        embedding["initial_embedding_text"] = str(r.get("init_word"))
    if r.given("num_vectors_per_token"):
        embedding["token_count"] = r.number("num_vectors_per_token", int)
    if r.given("weights"):
        embedding["model_name"] = str(r.get("weights"))
    out["embedding"] = embedding
    if r.given("learning_rate"):
        out["embedding_learning_rate"] = r.number("learning_rate")
    template = str(r.get("template") or "caption")
    if template != "caption":
        notes.append(f"template '{template}': kohya trains on its own '{template}' sentences with the token; here on the "
                     f"captions, which must hold '{embedding['placeholder']}'")


def command_line(data: dict[str, Any]) -> dict[str, Any]:
    """kohya_ss's `additional_parameters` (sd-scripts options it adds to the command line, which
    win over the file's): `--key value`, `--key=value`, `--switch`."""
    import shlex  # noqa: PLC0415

    text = data.get("additional_parameters")
    if not isinstance(text, str) or not text.strip():
        return data
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    options: dict[str, Any] = {}
    key = None
    for word in words:
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            options[key] = value if eq else True
            key = None if eq else key
        elif key is not None:
            options[key] = word if options[key] is True else f"{options[key]} {word}"
    return {**data, **options, "additional_parameters": None}
