"""Import of a SimpleTuner config (bghira/SimpleTuner): its config.json (keys with or without `--`,
or its web page's `{"_metadata", "config"}`) or flat config.toml, with `model_family` /
`model_flavour`, and its `data_backend_config` (config/simpletuner_data.py).

Each setting with a counterpart here is carried over as SimpleTuner trains it, with its defaults
where the file is silent: a full fine-tune unless `model_type` says lora, lr 4e-7, batch 4, one
epoch, LoRA alpha = rank and dropout 0.1 on the attention projections (to_q / to_k / to_v /
to_out.0; Flux's `flux_lora_target` presets), logit-normal timesteps shifted by 3, caption
dropout 0.1, a save every 500 steps (5 kept), each optimizer's own settings (`adamw_bf16`: eps
1e-6). A family without a flavour or path trains its default flavour's repo, as there (Flux: FLUX.1
Krea dev). A value written as the string "false" is SimpleTuner's default, as its loader drops it.
One warning says what is read differently and lists every other set value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import jsontext
from .dpipe_data import config_roots
from .enums import ModelType as M
from .families import family_info
from .kohya_dataset import steps_as_epochs
from .lr_schedules import warmup_option
from .simpletuner_data import StSection, datasets, lycoris, side
from .validation import ConfigError, LoadResult, import_result, validate

# model_family -> (default flavour, {flavour: (our type, repo)})
_WAN = "Wan-AI/Wan2.1-"
FAMILIES: dict[str, tuple[str, dict[str, tuple[M, str]]]] = {
    "sd1x": ("dreamshaper", {"1.5": (M.STABLE_DIFFUSION_15, "stable-diffusion-v1-5/stable-diffusion-v1-5"),
                             "1.4": (M.STABLE_DIFFUSION_15, "CompVis/stable-diffusion-v1-4"),
                             "dreamshaper": (M.STABLE_DIFFUSION_15, "Lykon/dreamshaper-8"),
                             "realvis": (M.STABLE_DIFFUSION_XL_10_BASE, "SG161222/RealVisXL_V5.0")}),
    "sd2x": ("pseudoflex-v2", {"2.1": (M.STABLE_DIFFUSION_21, "stabilityai/stable-diffusion-2-1"),
                               "2.0": (M.STABLE_DIFFUSION_20, "stabilityai/stable-diffusion-2"),
                               "digitaldiffusion": (M.STABLE_DIFFUSION_21, "Junglerally/Digital-Diffusion"),
                               "pseudoflex-v2": (M.STABLE_DIFFUSION_21, "bghira/pseudo-flex-v2"),
                               "pseudojourney": (M.STABLE_DIFFUSION_21, "bghira/pseudo-journey-v2")}),
    "sdxl": ("base-1.0", {"base-1.0": (M.STABLE_DIFFUSION_XL_10_BASE, "stabilityai/stable-diffusion-xl-base-1.0"),
                          "base-0.9": (M.STABLE_DIFFUSION_XL_10_BASE, "stabilityai/stable-diffusion-xl-base-0.9")}),
    "sd3": ("medium", {"medium": (M.STABLE_DIFFUSION_35, "stabilityai/stable-diffusion-3.5-medium"),
                       "large": (M.STABLE_DIFFUSION_35, "stabilityai/stable-diffusion-3.5-large")}),
    "pixart_sigma": ("900m-1024-v0.6", {
        "900m-1024-v0.6": (M.PIXART_SIGMA, "terminusresearch/pixart-900m-1024-ft-v0.6"),
        "900m-1024-v0.7-stage1": (M.PIXART_SIGMA, "terminusresearch/pixart-900m-1024-ft-v0.7-stage1"),
        "900m-1024-v0.7-stage2": (M.PIXART_SIGMA, "terminusresearch/pixart-900m-1024-ft-v0.7-stage2"),
        "600m-512": (M.PIXART_SIGMA, "PixArt-alpha/PixArt-Sigma-XL-2-512-MS"),
        "600m-1024": (M.PIXART_SIGMA, "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS"),
        "600m-2048": (M.PIXART_SIGMA, "PixArt-alpha/PixArt-Sigma-XL-2-2K-MS")}),
    "flux": ("krea", {"dev": (M.FLUX_DEV_1, "black-forest-labs/FLUX.1-dev"), "krea": (M.FLUX_DEV_1, "black-forest-labs/FLUX.1-Krea-dev"),
                      "schnell": (M.FLUX_DEV_1, "black-forest-labs/FLUX.1-schnell"),
                      "fluxbooru": (M.FLUX_DEV_1, "terminusresearch/fluxbooru-v0.3"),
                      "libreflux": (M.FLUX_DEV_1, "jimmycarter/LibreFlux-SimpleTuner")}),
    "flux2": ("klein-9b", {"dev": (M.FLUX_2, "black-forest-labs/FLUX.2-dev"), "klein-4b": (M.FLUX_2, "black-forest-labs/FLUX.2-klein-base-4B"),
                           "klein-9b": (M.FLUX_2, "black-forest-labs/FLUX.2-klein-base-9B")}),
    "sana": ("sana1.5-4.8b-1024", {f: (M.SANA, f"Efficient-Large-Model/{r}") for f, r in (
        ("sana1.5-4.8b-1024", "SANA1.5_4.8B_1024px_diffusers"), ("sana1.5-1.6b-1024", "SANA1.5_1.6B_1024px_diffusers"),
        ("sana1.0-1.6b-2048", "Sana_1600M_2Kpx_BF16_diffusers"), ("sana1.0-1.6b-1024", "Sana_1600M_1024px_BF16_diffusers"),
        ("sana1.0-600m-1024", "Sana_600M_1024px_diffusers"), ("sana1.0-600m-512", "Sana_600M_512px_diffusers"))}),
    "hidream": ("full", {f: (M.HI_DREAM_FULL, f"HiDream-ai/HiDream-I1-{f.capitalize()}") for f in ("dev", "full", "fast")}),
    "chroma": ("base", {"base": (M.CHROMA_1, "lodestones/Chroma1-Base"), "hd": (M.CHROMA_1, "lodestones/Chroma1-HD"),
                        "flash": (M.CHROMA_1, "lodestones/Chroma1-Flash")}),
    "qwen_image": ("v2.0", {"v1.0": (M.QWEN, "Qwen/Qwen-Image"), "v2.0": (M.QWEN, "Qwen/Qwen-Image-2512"),
                            "edit-v1": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit"), "edit-v2": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit-2509"),
                            "edit-v2+": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit-2509"),
                            "edit-v3": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit-2511")}),
    "z_image": ("turbo-ostris-v2", {"base": (M.Z_IMAGE, "Tongyi-MAI/Z-Image"), "turbo": (M.Z_IMAGE, "Tongyi-MAI/Z-Image-Turbo"),
                                    "turbo-ostris-v2": (M.Z_IMAGE, "Tongyi-MAI/Z-Image-Turbo"),
                                    "ostris-de-turbo": (M.Z_IMAGE, "Tongyi-MAI/Z-Image-Turbo")}),
    "anima": ("preview-3", {f: (M.ANIMA, "circlestone-labs/Anima-Base-v1.0-Diffusers")
                            for f in ("release", "base-v1.0", "preview-3", "preview-2", "preview")}),
    "krea2": ("raw", {"raw": (M.KREA_2, "krea/Krea-2-Raw"), "turbo": (M.KREA_2, "krea/Krea-2-Turbo")}),
    "ernie": ("base", {"base": (M.ERNIE, "baidu/ERNIE-Image"), "turbo": (M.ERNIE, "baidu/ERNIE-Image-Turbo")}),
    "ideogram": ("fp8", {"fp8": (M.IDEOGRAM_4, "ideogram-ai/ideogram-4-fp8"), "nf4": (M.IDEOGRAM_4, "ideogram-ai/ideogram-4-nf4")}),
    "wan": ("t2v-480p-1.3b-2.1", {
        "t2v-480p-1.3b-2.1": (M.WAN_2_1, _WAN + "T2V-1.3B-Diffusers"), "t2v-480p-14b-2.1": (M.WAN_2_1, _WAN + "T2V-14B-Diffusers"),
        "i2v-14b-2.1": (M.WAN_2_1_I2V, _WAN + "I2V-14B-480P-Diffusers"), "i2v-14b-2.1-720p": (M.WAN_2_1_I2V, _WAN + "I2V-14B-720P-Diffusers"),
        "i2v-14b-2.2-high": (M.WAN_2_2_I2V_A14B, "Wan-AI/Wan2.2-I2V-A14B-Diffusers"),
        "i2v-14b-2.2-low": (M.WAN_2_2_I2V_A14B, "Wan-AI/Wan2.2-I2V-A14B-Diffusers"),
        "ti2v-5b-2.2": (M.WAN_2_2_TI2V_5B, "Wan-AI/Wan2.2-TI2V-5B-Diffusers")}),
    "ltxvideo2": ("dev", {f: (M.LTX_2, "Lightricks/LTX-2") for f in ("dev", "dev-fp4", "dev-fp8")}),
    "stable_cascade": ("stage-c", {"stage-c": (M.STABLE_CASCADE_1, "stabilityai/stable-cascade-prior"),
                                   "stage-c-lite": (M.STABLE_CASCADE_1, "stabilityai/stable-cascade-prior")}),
}
ALIASES = {"pixart": "pixart_sigma", "sd1": "sd1x", "sd2": "sd2x"}
# what it trains that has no model type here (by family, or family:flavour)
NOT_HERE = {"hunyuanvideo": "HunyuanVideo 1.5", "ltxvideo": "LTX-Video 0.9", "kolors": "Kolors", "auraflow": "AuraFlow",
            "lumina2": "Lumina 2", "cosmos": "Cosmos-Predict2", "cosmos2image": "Cosmos-Predict2", "cosmos3": "Cosmos 3",
            "deepfloyd": "DeepFloyd IF", "omnigen": "OmniGen", "z_image_omni": "Z-Image Omni", "flux:kontext": "Flux Kontext",
            "wan:flf2v-14b-2.1": "Wan 2.1 FLF2V", "wan:vace-1.3b-2.1": "Wan VACE", "wan:vace-14b-2.1": "Wan VACE",
            "sdxl:refiner-1.0": "the SDXL refiner", "sdxl:refiner-0.9": "the SDXL refiner",
            "wan:animegen-t2v-high": "AnimeGen (aidealab's Wan 2.2 transformer files)",
            "wan:animegen-t2v-low": "AnimeGen (aidealab's Wan 2.2 transformer files)"}
# its optimizers -> ours and their own settings (SimpleTuner's table), where ours differ
OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adamw_bf16": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "torch-adamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}),
    "torch-adam": ("ADAM", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}),
    "torch-sgd": ("SGD", {"weight_decay": 0.0, "momentum": 0.0}),
    "ao-adamw8bit": ("ADAMW_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "bnb-adamw8bit": ("ADAMW_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "bnb-adamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "bnb-lion": ("LION", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "bnb-lion8bit": ("LION_8BIT", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "optimi-lion": ("LION", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "optimi-adamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.0}),
    "optimi-stableadamw": ("ADAMW", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 1e-2}),
    "adamw_schedulefree": ("SCHEDULE_FREE_ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}),
    "bnb-lion-paged": ("LION", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "bnb-lion8bit-paged": ("LION_8BIT", {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}),
    "bnb-adamw-paged": ("ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "bnb-adamw8bit-paged": ("ADAMW_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-2}),
    "bnb-adam": ("ADAM", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}),
    "bnb-adam8bit": ("ADAM_8BIT", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}),
    "optimi-adam": ("ADAM", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.0}),
    "optimi-sgd": ("SGD", {"weight_decay": 0.0}),
    "torch-rmsprop": ("RMSPROP", {}), "torch-adagrad": ("ADAGRAD", {}), "bnb-adagrad": ("ADAGRAD", {}),
    "torch-adafactor": ("ADAFACTOR", {}), "muon": ("MUON", {}), "sdnq-came": ("CAME", {"weight_decay": 0.01}),
    "adamw_schedulefree+aggressive": ("SCHEDULE_FREE_ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-3}),
    "adamw_schedulefree+no_kahan": ("SCHEDULE_FREE_ADAMW", {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 1e-3}),
    "prodigy": ("PRODIGY_PLUS_SCHEDULE_FREE", {"beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.0, "d_coef": 1.0}),
}
UNCLIPPED = ("optimi-stableadamw", "prodigy")  # SimpleTuner clips neither
SCHEDULE_FREE = ("adamw_schedulefree", "adamw_schedulefree+aggressive", "adamw_schedulefree+no_kahan")  # nor schedules them
# its base_model_precision (and text_encoder_N_precision) -> our weight type
PRECISIONS = (("int8", "INT_8"), ("uint8", "INT_8"), ("fp8", "FLOAT_8"), ("nf4", "NFLOAT_4"), ("int4", "NFLOAT_4"), ("uint4", "NFLOAT_4"),
              ("int2", "NFLOAT_4"), ("uint2", "NFLOAT_4"), ("uint3", "NFLOAT_4"), ("int5", "NFLOAT_4"), ("int6", "NFLOAT_4"))
DTYPES = {"bf16": "BFLOAT_16", "fp16": "FLOAT_16", "no": "FLOAT_32", "fp8": "BFLOAT_16"}
# standard LoRA targets: its default (every family's attention projections) and Flux's presets, as whole-name regexes
ATTENTION = r"(^|\.)(to_k|to_q|to_v|to_qkv|to_out\.0)$"
OWN_TARGETS = {M.IDEOGRAM_4: r"(^|\.)(to_q|to_k|to_v|to_out\.0|w1|w2|w3)$",  # (its fused qkv / o, as diffusers splits them)
               M.LTX_2: r"^(?!.*(video_to_audio_attn|connector|embedding)).*(^|\.)(to_k|to_q|to_v|to_qkv|to_out\.0)$",
               M.FLUX_2: r"(^|\.)attn\.(to_q|to_k|to_v|to_out\.0|to_qkv_mlp_proj)$"}
FLUX_TARGETS = {
    "all": r"(^|\.)(to_k|to_q|to_v|to_qkv|add_qkv_proj|add_k_proj|add_q_proj|add_v_proj|to_out\.0|to_add_out)$",
    "context": r"(^|\.)(add_k_proj|add_q_proj|add_v_proj|add_qkv_proj|to_add_out)$",
    "context+ffs": r"(^|\.)(add_k_proj|add_q_proj|add_v_proj|add_qkv_proj|to_add_out|ff_context\.net\.0\.proj|ff_context\.net\.2)$",
    "all+ffs": r"(^|\.)(to_k|to_q|to_v|to_qkv|add_qkv_proj|add_k_proj|add_q_proj|add_v_proj|to_out\.0|to_add_out|ff\.net\.0\.proj|"
               r"ff\.net\.2|ff_context\.net\.0\.proj|ff_context\.net\.2|proj_mlp|proj_out)$",
    "tiny": r"^single_transformer_blocks\.(7|20)\.proj_out$", "nano": r"^single_transformer_blocks\.7\.proj_out$",
    "ai-toolkit": r"(^|\.)(to_k|to_q|to_v|to_qkv|add_qkv_proj|add_k_proj|add_q_proj|add_v_proj|to_out\.0|to_add_out|ff\.net\.0\.proj|"
                  r"ff\.net\.2|ff_context\.net\.0\.proj|ff_context\.net\.2|proj_mlp|proj_out|norm\.linear|norm1\.linear|"
                  r"norm1_context\.linear)$",
    "all+ffs+embedder": r"(^|\.)(to_k|to_q|to_v|to_qkv|add_qkv_proj|add_k_proj|add_q_proj|add_v_proj|to_out\.0|to_add_out|"
                        r"ff\.net\.0\.proj|ff\.net\.2|ff_context\.net\.0\.proj|ff_context\.net\.2|proj_mlp|proj_out|x_embedder)$",
}
# Chroma's own presets where they differ from Flux's
CHROMA_TARGETS = {"tiny": r"(^|\.)(to_q|to_k|to_v|to_out\.0|ff\.net\.0\.proj)$",
                  "tiny+embedder": r"(^|\.)(to_q|to_k|to_v|to_out\.0|ff\.net\.0\.proj|x_embedder)$"}
# how SimpleTuner runs, logs and publishes, not what it trains: not listed as left out
PLUMBING = {"data_backend_config", "resume_from_checkpoint", "hub_model_id", "push_to_hub", "push_checkpoints_to_hub", "report_to",
            "tracker_project_name", "tracker_run_name", "tracker_image_layout", "validation_torch_compile", "disable_benchmark",
            "aspect_bucket_rounding", "vae_batch_size", "vae_cache_scan_behaviour", "vae_cache_ondemand", "vae_dtype", "quantize_via",
            "i_know_what_i_am_doing", "model_card_safe_for_work", "webhook_config", "logging_dir", "attention_mechanism",
            "disable_tf32", "allow_tf32", "dataloader_prefetch", "num_processes", "quantize_activations", "compress_disk_cache",
            "validation_noise_scheduler", "model_family", "model_flavour", "model_type", "lora_type", "pretrained_model_name_or_path",
            "override_dataset_config", "aws_config", "trust_remote_code", "delete_unwanted_images", "delete_problematic_images",
            "metadata_update_interval", "max_workers", "read_batch_size", "write_batch_size", "image_processing_batch_size",
            "text_encoder_batch_size", "vae_enable_tiling", "vae_enable_slicing", "validation_num_video_frames", "num_validation_images"}


def _keys(data: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lstrip("-"): v for k, v in data.items()}


def is_simpletuner_config(data: Any) -> bool:
    """SimpleTuner's config: its `model_family` (keys with or without `--`), also inside its web page's `config`."""
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and "_metadata" in data:
        data = data["config"]
    return isinstance(data, dict) and "model_family" in _keys(data)


def import_simpletuner(raw: dict[str, Any], source: str | None = None, readable: list[Path] | None = None,
                       base_dir: str | Path | None = None) -> LoadResult:
    """`base_dir`: the config's folder (SimpleTuner runs from the folder above config/); `readable`:
    the folders the import may read (the page's; None: any)."""
    if isinstance(raw.get("config"), dict) and "_metadata" in raw:
        raw = raw["config"]
    r = StSection("", _keys(raw))
    r.plumbing = PLUMBING
    notes: list[str] = []
    out: dict[str, Any] = {}
    model_type = _model(r, out, notes)
    info = family_info(model_type)
    method = _method(r, out, notes, model_type, readable, config_roots(base_dir))
    name = str(r.get("data_backend_config") or "config/multidatabackend.json")
    concepts, data_left = datasets(name, config_roots(base_dir), r, out, notes, info, readable)
    if concepts:
        if any([c.pop("_square", False) for c in concepts]):
            out["aspect_ratio_bucketing"] = False
        if method != "LORA":  # SimpleTuner's regularisation data is ordinary data in a full fine-tune
            for concept in concepts:
                concept.pop("type", None)
        out["concepts"] = concepts
    top_side = side(r.get("resolution") or 1024, str(r.get("resolution_type") or "pixel_area"), "resolution")  # (the datasets' default)
    out.setdefault("resolution", str(top_side))
    if r.number("minimum_image_size", 0):
        notes.append("minimum_image_size: SimpleTuner leaves out smaller images; here every image trains (scaled up)")
    _training(r, out, notes, model_type, method)
    _run_length(r, out, notes, concepts, readable)
    _saving(r, out, notes, info, method)
    config = validate(out)
    left = sorted([*r.left(), *data_left])
    origin = f"SimpleTuner config {source}" if source else "This SimpleTuner config"
    text = f"{origin}: read as SimpleTuner trains it ({len(r.used & r.data.keys())} settings carried over)"
    return import_result(config, text, notes, left)


def _model(r: StSection, out: dict[str, Any], notes: list[str]) -> M:
    family = ALIASES.get(str(r.get("model_family") or "").strip().lower(), str(r.data.get("model_family") or "").strip().lower())
    flavour = str(r.get("model_flavour") or "").strip().lower()
    path = str(r.get("pretrained_model_name_or_path") or "").strip()
    for key in (family, f"{family}:{flavour}"):
        if key in NOT_HERE:
            raise ConfigError(f"model_family: this SimpleTuner config trains {NOT_HERE[key]}, which has no model type here; nothing "
                              "was imported")
    if family not in FAMILIES:
        raise ConfigError(f"model_family: '{family}' has no model type here; nothing was imported (the SimpleTuner families read "
                          f"here: {', '.join(sorted(FAMILIES))})")
    for key, what in (("controlnet", "a ControlNet"), ("distillation_method", "a distilled model (its distillation objective)")):
        if r.get(key) and str(r.data[key]).lower() not in ("none", "false"):
            raise ConfigError(f"{key}: this SimpleTuner config trains {what}, which has no counterpart here; nothing was imported")
    default, flavours = FAMILIES[family]
    flavours = {key.lower(): value for key, value in flavours.items()}
    if flavour and flavour not in flavours:
        raise ConfigError(f"model_flavour: '{flavour}' is no {family} flavour this trainer knows ({', '.join(flavours)})")
    model_type, repo = flavours[flavour or default]
    if family == "sd3" and re.search(r"stable-diffusion-3-medium", path):
        model_type = M.STABLE_DIFFUSION_3
    out.update(model_type=model_type.value, base_model_name=path or repo)
    if not path and not flavour:
        notes.append(f"model_flavour: none, so SimpleTuner's default for {family}, {default} ({repo})")
    if family == "z_image" and (flavour or default) in ("turbo", "turbo-ostris-v2", "ostris-de-turbo"):
        notes.append(f"model_flavour '{flavour or default}': SimpleTuner trains Z-Image Turbo with ostris' training adapter (or his "
                     "de-distilled transformer); here Z-Image Turbo as it is")
    if family == "anima" and (flavour or default).startswith("preview"):
        notes.append(f"model_flavour '{flavour or default}': a preview of Anima there; here its released base ({repo})")
    if family == "flux" and (flavour or default) == "schnell":
        notes.append("model_flavour 'schnell': SimpleTuner trains it with ostris' training adapter and its fast schedule; here "
                     "FLUX.1 schnell as it is, with the timesteps below")
    if family == "flux" and (flavour or default) == "libreflux":
        notes.append("model_flavour 'libreflux': SimpleTuner masks the padding in its attention; here Attention mask is off")
    if family == "sd2x":  # SimpleTuner trains every SD 2.x flavour with zero terminal SNR (and v-prediction)
        out["rescale_noise_scheduler_to_zero_terminal_snr"] = True
    elif r.flag("rescale_betas_zero_snr"):
        out["rescale_noise_scheduler_to_zero_terminal_snr"] = True
    if family in ("sd1x", "sdxl", "sd2x"):
        prediction = str(r.get("prediction_type") or "").strip().lower()
        if prediction in ("v_prediction", "epsilon"):
            out["force_v_prediction" if prediction == "v_prediction" else "force_epsilon_prediction"] = True
        elif family != "sd2x" and out.get("rescale_noise_scheduler_to_zero_terminal_snr"):
            out["force_epsilon_prediction"] = True  # SimpleTuner keeps SD 1.x / SDXL at epsilon; zero SNR alone trains v here
    if model_type == M.WAN_2_2_I2V_A14B:
        out["trained_expert"] = "HIGH_NOISE" if (flavour or default).endswith("high") else "LOW_NOISE"
        notes.append("Wan 2.2 A14B: SimpleTuner trains the expert at every timestep (its boundary is for sampling); here the "
                     "expert trains its own range of them (Trained expert)")
    info = family_info(model_type)
    transformer = str(r.get("pretrained_transformer_model_name_or_path") or r.get("pretrained_unet_model_name_or_path") or "").strip()
    if transformer and info.transformer_file and Path(transformer).suffix.lower() in (".safetensors", ".sft", ".gguf"):
        out.setdefault(info.denoiser, {})["model_name"] = transformer
    elif transformer:
        notes.append(f"pretrained_transformer_model_name_or_path {transformer}: a transformer is read from a .safetensors or .gguf "
                     "file here; the base model's is used")
    vae = str(r.get("pretrained_vae_model_name_or_path") or "").strip()
    if vae and model_type in (M.STABLE_DIFFUSION_XL_10_BASE, M.PIXART_SIGMA):  # SimpleTuner reads it for these alone
        out.setdefault("vae", {})["model_name"] = vae
    elif model_type == M.STABLE_DIFFUSION_XL_10_BASE and not r.data.get("pretrained_vae_model_name_or_path"):
        out.setdefault("vae", {})["model_name"] = "madebyollin/sdxl-vae-fp16-fix"  # its default for SDXL
    _precision(r, out, notes, model_type)
    return model_type


def _precision(r: StSection, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    info = family_info(model_type)
    mixed = str(r.get("mixed_precision") or "bf16").lower()
    out["train_dtype"] = DTYPES.get(mixed, "BFLOAT_16")
    weights = "BFLOAT_16" if mixed in ("bf16", "fp8") else "FLOAT_16" if mixed == "fp16" else "FLOAT_32"

    def stored(value: Any) -> str:
        text = str(value or "no_change").lower()
        return next((ours for prefix, ours in PRECISIONS if text.startswith(prefix)), weights)

    base = str(r.get("base_model_precision") or "no_change").lower()
    out.setdefault(info.denoiser, {})["weight_dtype"] = stored(base)
    if base.startswith(("int2", "uint2", "uint3", "int5", "int6")):
        notes.append(f"base_model_precision '{base}': stored in 4 bits here (NFLOAT_4), the fewest bits this trainer stores")
    for number, part in enumerate(info.text_encoders, start=1):
        out.setdefault(part, {})["weight_dtype"] = stored(r.get(f"text_encoder_{number}_precision"))


def _method(r: StSection, out: dict[str, Any], notes: list[str], model_type: M, readable: list[Path] | None,
            roots: list[Path]) -> str:
    """LoRA (standard: rank, alpha = rank unless set, dropout 0.1; LyCORIS: its JSON) or a full fine-tune."""
    info = family_info(model_type)
    kind = str(r.get("model_type") or "full").lower()
    for part in info.text_encoders:  # SimpleTuner freezes them, train_text_encoder or not (no adapter goes on them)
        out.setdefault(part, {}).update(train=False, stop_training_after=None, stop_training_after_unit="NEVER")
    if r.flag("train_text_encoder"):
        notes.append("train_text_encoder: SimpleTuner's code freezes the text encoders all the same; nor are they trained here")
    if kind != "lora":
        out["training_method"] = "FINE_TUNE"
        if not r.data.get("model_type"):
            notes.append("model_type: not set, so a full fine-tune, SimpleTuner's default (set model_type lora for a LoRA)")
        return "FINE_TUNE"
    out["training_method"] = "LORA"
    if str(r.get("lora_type") or "standard").lower() == "lycoris":
        for key in ("lora_rank", "lora_alpha", "lora_dropout"):  # SimpleTuner reads none of them for LyCORIS
            r.get(key)
        lycoris(str(r.get("lycoris_config") or "config/lycoris_config.json"), roots, out, notes, readable)
    else:
        rank = r.number("lora_rank", 16, int)
        alpha = r.number("lora_alpha", None)
        out.update(peft_type="LORA", lora_rank=rank, lora_alpha=float(alpha if alpha else rank),
                   dropout_probability=r.number("lora_dropout", 0.1))
        if r.flag("use_dora") and "quanto" not in str(r.data.get("base_model_precision") or ""):  # (off with quanto there)
            out["lora_decompose"] = True
        preset = str(r.get("flux_lora_target") or "all").lower() if model_type in (M.FLUX_DEV_1, M.CHROMA_1) else ""
        own = CHROMA_TARGETS.get(preset) if model_type == M.CHROMA_1 else None
        target = own or FLUX_TARGETS.get(preset) or OWN_TARGETS.get(model_type) or ATTENTION
        modules = r.get("peft_lora_target_modules")
        if isinstance(modules, str) and modules.strip().startswith("["):
            try:
                modules = jsontext.loads(modules)
            except ValueError:
                raise ConfigError("peft_lora_target_modules: not a JSON list of module names (SimpleTuner config)") from None
        if isinstance(modules, list) and modules:  # it overrides every preset there, each name matching a module's end
            target = r"(^|\.)(" + "|".join(re.escape(str(m)) for m in modules) + r")$"
        out.update(layer_filter_preset="custom", layer_filter=target, layer_filter_regex=True)
    if r.get("init_lora"):
        out["lora_model_name"] = str(r.data["init_lora"])
    return "LORA"


def _training(r: StSection, out: dict[str, Any], notes: list[str], model_type: M, method: str) -> None:
    info = family_info(model_type)
    out["batch_size"] = r.number("train_batch_size", 4, int)
    out["gradient_accumulation_steps"] = max(1, r.number("gradient_accumulation_steps", 1, int))
    name = str(r.get("optimizer") or "adamw_bf16").lower()
    ours, defaults = OPTIMIZERS.get(name, ("ADAMW", OPTIMIZERS["adamw_bf16"][1]))
    if name not in OPTIMIZERS:
        notes.append(f"optimizer '{name}' has no counterpart here: ADAMW with adamw_bf16's settings is used")
    optimizer: dict[str, Any] = {"optimizer": ours, **defaults}
    if name == "optimi-stableadamw":
        notes.append("optimizer 'optimi-stableadamw': its update clipping is not applied here (AdamW)")
    lr = 1.0 if name == "prodigy" else r.number("learning_rate", 4e-7)  # prodigy's own lr 1 wins there
    for item in str(r.get("optimizer_config") or "").split(","):  # "k=v,k2=v2", over the optimizer's own settings
        key, _, value = (p.strip() for p in item.partition("="))
        ours_key = {"use_bias_correction": "use_bias_correction", "bias_correction": "use_bias_correction"}.get(key, key)
        try:
            if key == "lr" and value:
                lr = float(value)
            elif key in ("weight_decay", "eps", "d_coef", "momentum", "d0", "beta3") and value:
                optimizer[key] = float(value)
            elif ours_key in ("use_bias_correction", "split_groups", "use_stableadamw", "factored", "weight_decay_by_lr", "amsgrad"):
                optimizer[ours_key] = value.lower() == "true"
            elif key:
                notes.append(f"optimizer_config {key}: not carried over")
        except ValueError:
            raise ConfigError(f"optimizer_config: {item!r} is not a number (SimpleTuner config)") from None
    if r.get("optimizer_beta1") is not None and r.get("optimizer_beta2") is not None:
        optimizer.update(beta1=float(r.number("optimizer_beta1")), beta2=float(r.number("optimizer_beta2")))
    out["optimizer"] = optimizer
    if r.flag("lr_scale") or r.flag("lr_scale_sqrt"):  # the rate times the batch (its square root), as SimpleTuner scales it
        factor = out["batch_size"] * out["gradient_accumulation_steps"]
        lr *= factor ** 0.5 if r.flag("lr_scale_sqrt") else factor
    out["learning_rate"] = lr
    _schedule(r, out, notes, name)
    clip, method_name = r.number("max_grad_norm", 2.0), str(r.get("grad_clip_method") or "value").lower()
    if name in UNCLIPPED or not clip:
        out["clip_grad_norm"] = None
    elif method_name == "norm":
        out["clip_grad_norm"] = clip
    else:
        out["clip_grad_norm"] = None
        notes.append(f"max_grad_norm {clip:g}: SimpleTuner clamps each gradient value at it (grad_clip_method 'value', its default); "
                     "here gradients are not clipped (set Clip grad norm to clip their norm)")
    mode = "ON" if r.flag("gradient_checkpointing", True) else "OFF"
    for part in (info.denoiser, *info.text_encoders):
        out.setdefault(part, {})["gradient_checkpointing"] = mode
    out["caption_dropout_probability"] = r.number("caption_dropout_probability", 0.1)
    flow = info.schedule == "flow_matching"
    if not flow and r.flag("offset_noise"):
        out["offset_noise_weight"] = r.number("noise_offset", 0.1)
        if r.number("noise_offset_probability", 0.25) != 1.0:
            notes.append("noise_offset_probability: here the offset noise is added to every sample")
    if not flow and r.number("snr_gamma", None):
        out.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=r.number("snr_gamma"))
    if flow:
        _flow(r, out, notes, model_type)
    else:  # (read by its flow-matching models alone)
        for key in ("flow_schedule_shift", "flow_schedule_auto_shift", "flow_sigmoid_scale", "flow_use_uniform_schedule"):
            r.get(key)
    if not r.flag("use_ema"):
        for key in ("ema_decay", "ema_device", "ema_update_interval", "ema_validation"):  # settings of an EMA that is off
            r.get(key)
    else:
        out.update(ema="CPU" if str(r.get("ema_device") or "cpu") == "cpu" else "GPU", ema_decay=r.number("ema_decay", 0.995),
                   ema_update_step_interval=r.number("ema_update_interval", 1, int))
    if r.get("seed") not in (None, 0, -1):
        out["seed"] = r.number("seed", None, int)
    loss = str(r.get("loss_type") or "l2").lower()
    if loss == "huber":
        out.update(mse_strength=0.0, huber_strength=1.0, huber_delta=r.number("huber_c", 0.1))
        if str(r.get("huber_schedule") or "snr").lower() != "constant":
            notes.append(f"huber_schedule '{r.data.get('huber_schedule') or 'snr'}': SimpleTuner's Huber delta grows with the noise "
                         "(nearly squared error at high noise); here it is huber_c at every timestep")
    elif loss != "l2":
        notes.append(f"loss_type '{loss}': trained with the squared error here")


def _flow(r: StSection, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """Its timesteps: a sigmoid of a normal of std `flow_sigmoid_scale` (uniform or beta when told),
    shifted by `flow_schedule_shift` (3; Sana none, Wan 2.2 I2V's experts 5), or by the image's size
    (`flow_schedule_auto_shift`); Flux's guidance input `flux_guidance_value` (1)."""
    if model_type == M.SANA:  # uniform over its scheduler's timesteps, unshifted, whatever the flow_* settings say
        out.update(timestep_distribution="UNIFORM", timestep_shift=1.0, dynamic_timestep_shifting=False)
        for key in ("flow_sigmoid_scale", "flow_schedule_shift", "flow_use_uniform_schedule", "flow_schedule_auto_shift"):
            r.get(key)
        return
    if model_type == M.IDEOGRAM_4:  # its own: a logit-normal of std ideogram_schedule_std (1.5), its mean by the image's size
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=r.number("ideogram_schedule_std", 1.5) - 1.0,
                   noising_bias=r.number("ideogram_schedule_mu", 0.0), timestep_shift=1.0, dynamic_timestep_shifting=True)
        for key in ("flow_sigmoid_scale", "flow_schedule_shift", "flow_schedule_auto_shift"):
            r.get(key)
        return
    if r.flag("flow_use_uniform_schedule"):
        out["timestep_distribution"] = "UNIFORM"
    else:
        if r.flag("flow_use_beta_schedule"):
            notes.append("flow_use_beta_schedule: a logit-normal distribution here (no Beta distribution)")
        out.update(timestep_distribution="LOGIT_NORMAL", noising_weight=r.number("flow_sigmoid_scale", 1.0) - 1.0, noising_bias=0.0)
    default = 3.0
    if model_type == M.WAN_2_2_I2V_A14B:  # SimpleTuner sets 5 for its experts, whatever the file says
        out.update(timestep_shift=5.0, dynamic_timestep_shifting=False)
        r.get("flow_schedule_shift")
    elif r.flag("flow_schedule_auto_shift"):
        out.update(timestep_shift=1.0, dynamic_timestep_shifting=True)
    else:
        out.update(timestep_shift=r.number("flow_schedule_shift", default) or 1.0, dynamic_timestep_shifting=False)
    if model_type == M.FLUX_DEV_1:
        out.setdefault("transformer", {})["guidance_scale"] = r.number("flux_guidance_value", 1.0)
        if str(r.get("flux_guidance_mode") or "constant") != "constant":
            notes.append("flux_guidance_mode 'random-range': here Flux's guidance input is Guidance scale, fixed")


def _schedule(r: StSection, out: dict[str, Any], notes: list[str], optimizer: str) -> None:
    """Its schedulers: constant (with warmup), linear and polynomial (to lr_end, here to 0, linearly),
    and its own cosine, which falls to lr_end over lr_warmup_steps (1,000 when 0) and rises back, as
    torch's CosineAnnealingLR does; none for its schedule-free optimizers."""
    name = str(r.get("lr_scheduler") or "constant_with_warmup").lower().replace("cosine_with_warmup", "cosine")
    warmup = r.number("lr_warmup_steps", 0, int)
    out["learning_rate_warmup_steps"] = warmup_option(warmup)
    if optimizer in SCHEDULE_FREE or optimizer == "prodigy":  # (schedule-free here: a constant rate)
        out.update(learning_rate_scheduler="CONSTANT", learning_rate_warmup_steps=0.0)
        if warmup or name not in ("constant", "constant_with_warmup"):
            notes.append(f"lr_scheduler '{name}', lr_warmup_steps {warmup}: SimpleTuner warms up (and, with prodigy, schedules) "
                         f"'{optimizer}'; here it runs schedule-free at a constant rate")
    elif name in ("constant", "constant_with_warmup"):
        out["learning_rate_scheduler"] = "CONSTANT"
    elif name in ("linear", "polynomial"):
        out["learning_rate_scheduler"] = "LINEAR"
        end = r.number("lr_end", 4e-7)
        if out.get("learning_rate"):  # down to lr_end, as there
            out["learning_rate_min_factor"] = min(1.0, max(0.0, end / out["learning_rate"]))
        if name == "polynomial":
            notes.append("lr_scheduler 'polynomial': SimpleTuner decays to lr_end by power lr_power; here linearly")
    elif name == "cosine":
        period = warmup or 1000
        end = r.number("lr_end", 4e-7)
        out.update(learning_rate_scheduler="CUSTOM", custom_learning_rate_scheduler="torch.optim.lr_scheduler.CosineAnnealingLR",
                   scheduler_params=[{"key": "T_max", "value": str(period)}, {"key": "eta_min", "value": repr(float(end))}],
                   learning_rate_warmup_steps=0.0)
        notes.append(f"lr_scheduler 'cosine': SimpleTuner's falls to lr_end over lr_warmup_steps ({period}) and rises back, without "
                     "warmup; here the same (torch's CosineAnnealingLR)")
    else:
        out["learning_rate_scheduler"] = "CONSTANT"
        notes.append(f"lr_scheduler '{name}' has no counterpart here: CONSTANT is used")
    for key in ("lr_end", "lr_power", "lr_num_cycles"):
        r.get(key)


def _run_length(r: StSection, out: dict[str, Any], notes: list[str], concepts: list[dict[str, Any]], readable: list[Path] | None) -> None:
    """`max_train_steps` (with num_train_epochs 0, as SimpleTuner wants it) as the epochs that hold
    them, else `num_train_epochs` (1)."""
    steps, epochs = r.number("max_train_steps", 0, int), r.number("num_train_epochs", 1, int)
    if steps > 0 and epochs > 0 and r.data.get("num_train_epochs") is not None:
        raise ConfigError("max_train_steps and num_train_epochs: SimpleTuner refuses both set; set num_train_epochs to 0")
    if steps <= 0:
        out["epochs"] = max(1, epochs)
        return
    steps_as_epochs(steps, f"max_train_steps {steps}", "SimpleTuner", concepts, out, readable, notes)


def _saving(r: StSection, out: dict[str, Any], notes: list[str], info, method: str) -> None:
    """The LoRA at `output_dir/pytorch_lora_weights.safetensors` in diffusers' names (ComfyUI's with
    lora_format comfyui), a save every `checkpoint_step_interval` steps (500), `checkpoints_total_limit`
    kept (5), and its validation prompt as a sample every `validation_step_interval` steps (100)."""
    folder = Path(str(r.get("output_dir") or "simpletuner-results"))
    if method == "LORA":
        out["output_model_destination"] = str(folder / "pytorch_lora_weights.safetensors")
        comfy = str(r.get("lora_format") or "diffusers").lower() == "comfyui"
        out["output_model_format"] = "COMFY_LORA" if comfy and not any(layout == "kohya" for layout, *_ in info.lora_unread) else (
            "KOHYA_LORA" if comfy else "DIFFUSERS_LORA")
        out["output_dtype"] = out.get("train_dtype", "BFLOAT_16")
    else:
        out.update(output_model_destination=str(folder / "pipeline"), output_model_format="DIFFUSERS")
    every = r.number("checkpoint_step_interval", None, int) or r.number("checkpointing_steps", 500, int)
    out.update(save_every=every, save_every_unit="STEP")
    if keep := r.number("checkpoints_total_limit", None, int) or r.number("save_total_limit", 5, int):
        out["save_keep_last"] = keep
    prompt = str(r.get("validation_prompt") or "").strip()
    if prompt and not r.flag("validation_disable"):
        size = str(r.get("validation_resolution") or "256").split(",")[0].lower()
        width, _, height = size.partition("x")
        try:
            w = int(float(width)) if float(width) >= 128 else int((float(width) * 1e6) ** 0.5)
            h = int(float(height)) if height else w
        except ValueError:
            raise ConfigError(f"validation_resolution: {size!r} is not a size (SimpleTuner config)") from None
        sample = {"prompt": prompt, "negative_prompt": str(r.get("validation_negative_prompt") or "blurry, cropped, ugly"),
                  "width": max(64, w - w % 8), "height": max(64, h - h % 8), "cfg_scale": r.number("validation_guidance", 7.5),
                  "diffusion_steps": r.number("validation_num_inference_steps", 30, int)}
        if r.get("validation_seed") is not None:
            sample.update(seed=r.number("validation_seed", 0, int), random_seed=False)
        out["samples"] = [sample]
        interval = r.number("validation_step_interval", None, int) or r.number("validation_steps", 100, int)
        out.update(sample_after=interval, sample_after_unit="STEP")
