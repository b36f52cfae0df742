"""Which model a musubi-tuner config trains (kohya's trainer of the video and newer image models:
`--config_file` TOML with `dit`, `vae`, `t5` / `text_encoder`, `network_module`, `task`), and where
its parts come from. musubi-tuner takes the family from the script that runs; its config says it
by `network_module` (networks.lora_wan, lora_qwen_image, lora_flux_2, lora_zimage ...) and, for
Wan, `task`. The rest of the file is sd-scripts' (kohya_import.py reads it), its dataset TOML
too (`[[datasets]]` with `image_directory` / `video_directory`: kohya_dataset.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .enums import ModelType as M
from .families import family_info
from .kohya_reader import KohyaReader
from .validation import ConfigError

# musubi-tuner's network module -> our model type (None: decided by `task` / `model_version` below)
MODULES: dict[str, M | None] = {
    "networks.lora_wan": None, "networks.lora_qwen_image": None, "networks.lora_flux_2": M.FLUX_2, "networks.lora_zimage": M.Z_IMAGE,
    "networks.lora_krea2": M.KREA_2, "networks.lora_ideogram4": M.IDEOGRAM_4, "networks.lora": M.HUNYUAN_VIDEO,
}
# what musubi-tuner trains that has no model type here
NOT_HERE = {"networks.lora_framepack": "FramePack", "networks.lora_hv_1_5": "HunyuanVideo 1.5", "networks.lora_kandinsky": "Kandinsky 5",
            "networks.lora_hidream_o1": "HiDream-O1", "networks.lora_flux": "FLUX.1 Kontext"}
# Wan's --task -> the model type and the diffusers repo whose configs and other parts it reads
WAN_TASKS = {
    "t2v-1.3b": (M.WAN_2_1, "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"), "t2v-14b": (M.WAN_2_1, "Wan-AI/Wan2.1-T2V-14B-Diffusers"),
    "t2i-14b": (M.WAN_2_1, "Wan-AI/Wan2.1-T2V-14B-Diffusers"), "i2v-14b": (M.WAN_2_1_I2V, "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers"),
    "t2v-a14b": (M.WAN_2_2_T2V_A14B, "Wan-AI/Wan2.2-T2V-A14B-Diffusers"), "i2v-a14b": (M.WAN_2_2_I2V_A14B, "Wan-AI/Wan2.2-I2V-A14B-Diffusers"),
}
DEFAULT_TASK = "t2v-14b"  # wan_train_network.py's
# Qwen-Image's model_version -> the diffusers repo (musubi-tuner: `edit` = edit, `edit_plus` = edit-2509; "layered" has no model type here)
QWEN_VERSIONS = {"original": (M.QWEN, "Qwen/Qwen-Image"), "edit": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit"),
                 "edit-2509": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit-2509"), "edit-2511": (M.QWEN_IMAGE_EDIT, "Qwen/Qwen-Image-Edit-2511")}
# Flux.2's model_version (musubi-tuner's default: dev) -> the diffusers repo
FLUX2_VERSIONS = {"dev": "black-forest-labs/FLUX.2-dev", "klein-4b": "black-forest-labs/FLUX.2-klein-4B",
                  "klein-base-4b": "black-forest-labs/FLUX.2-klein-base-4B", "klein-9b": "black-forest-labs/FLUX.2-klein-9B",
                  "klein-base-9b": "black-forest-labs/FLUX.2-klein-base-9B"}
# the keys that make an sd-scripts-shaped config musubi-tuner's
SIGNS = ("dit", "dit_high_noise", "task", "dit_dtype")
# its text encoders' files -> our part, per family (a `.pth` in the original repo's layout is not read)
TEXT_FILES = {M.QWEN: {"text_encoder": "text_encoder"}, M.QWEN_IMAGE_EDIT: {"text_encoder": "text_encoder"},
              M.Z_IMAGE: {"text_encoder": "text_encoder"}, M.FLUX_2: {"text_encoder": "text_encoder"},
              M.HUNYUAN_VIDEO: {"text_encoder1": "text_encoder", "text_encoder2": "text_encoder_2"}}
WAN = (M.WAN_2_1, M.WAN_2_1_I2V, M.WAN_2_2_TI2V_5B, M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B)
# the transformer blocks musubi-tuner's `blocks_to_swap` counts, per Wan task and family (the published sizes)
BLOCKS = {"t2v-1.3b": 30, "t2v-14b": 40, "t2i-14b": 40, "i2v-14b": 40, "t2v-a14b": 40, "i2v-a14b": 40,
          M.QWEN: 60, M.QWEN_IMAGE_EDIT: 60, M.Z_IMAGE: 30}
for _type in WAN:
    TEXT_FILES[_type] = {"t5": "text_encoder"}


def is_musubi(data: dict[str, Any]) -> bool:
    """Its `dit` / `task`, or a network module only musubi-tuner has (sd-scripts has networks.lora
    and lora_flux too: those say nothing without a `dit`)."""
    module = str(data.get("network_module") or "")
    own = (set(MODULES) | set(NOT_HERE)) - {"networks.lora", "networks.lora_flux"}
    return any(data.get(k) not in (None, "") for k in SIGNS) or module in own


def musubi_model_type(r: KohyaReader, notes: list[str]) -> M:
    module = str(r.get("network_module") or "").strip()
    if module in NOT_HERE:  # (lora_flux with a `dit`: its Kontext script)
        raise ConfigError(f"network_module: this musubi-tuner config trains {NOT_HERE[module]}, which has no model type here; nothing "
                          "was imported")
    if module == "networks.lora_wan" or r.given("task"):
        task = str(r.get("task") or DEFAULT_TASK).strip().lower()
        if task.endswith("-fc"):
            raise ConfigError(f"task: '{task}' is Wan's Fun Control model, which has no model type here; nothing was imported")
        if task not in WAN_TASKS:
            raise ConfigError(f"task: '{task}' is no Wan task this trainer knows ({', '.join(WAN_TASKS)}); nothing was imported")
        return WAN_TASKS[task][0]
    if module == "networks.lora_qwen_image":
        version = _qwen_version(r)
        if version not in QWEN_VERSIONS:
            raise ConfigError(f"model_version: Qwen-Image '{version}' has no model type here ({', '.join(QWEN_VERSIONS)} do); nothing "
                              "was imported")
        return QWEN_VERSIONS[version][0]
    found = MODULES.get(module)
    if found is None:
        raise ConfigError(f"network_module: '{module or 'none'}' does not say which model this musubi-tuner config trains; import "
                          "it after setting its network_module, or choose the model type on the page")
    return found


def _qwen_version(r: KohyaReader) -> str:
    """musubi-tuner's Qwen-Image version: `model_version`, else `edit_plus` (2509) or `edit`, else the original."""
    version = str(r.get("model_version") or "").strip().lower()
    if version:
        r.get("edit")
        r.get("edit_plus")
        return version
    return "edit-2509" if r.flag("edit_plus") else "edit" if r.flag("edit") else "original"


def musubi_sources(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """musubi-tuner's `dit` is the transformer's file (the base model the family's diffusers repo,
    for its configs and tokenizers), its `vae` the VAE's and its text encoders' files theirs, where
    this trainer reads such a file; the others are noted."""
    info = family_info(model_type)
    task = str(r.data.get("task") or DEFAULT_TASK).lower()
    hub = WAN_TASKS[task][1] if model_type in WAN and task in WAN_TASKS else info.hub_repo
    if model_type in (M.QWEN, M.QWEN_IMAGE_EDIT):
        hub = QWEN_VERSIONS[_qwen_version(r)][1]
    if model_type == M.FLUX_2:
        version = str(r.get("model_version") or "dev").lower()
        if version not in FLUX2_VERSIONS:
            raise ConfigError(f"model_version: Flux.2 '{version}' is not one this trainer knows ({', '.join(FLUX2_VERSIONS)})")
        hub = FLUX2_VERSIONS[version]
    out.update(model_type=model_type.value, base_model_name=hub)
    dit = str(r.get("dit") or "").strip()
    if r.given("dit_high_noise"):
        notes.append(f"dit_high_noise: musubi-tuner trains both Wan 2.2 experts in one run; here a run trains one ({hub}'s "
                     "high-noise expert by default, Trained expert picks it)")
        r.get("dit_high_noise")
    if dit and info.transformer_file and Path(dit).suffix.lower() in (".safetensors", ".sft", ".gguf"):
        out["transformer"] = {"model_name": dit}
        notes.append(f"the transformer is read from {dit}; its configs and the other parts from {hub}")
    elif dit and info.transformer_file:
        notes.append(f"dit {Path(dit).name}: a transformer file is read as .safetensors (or .gguf) here; the base model's ({hub}) "
                     "is used: set Transformer file to its .safetensors")
    elif dit:
        notes.append(f"dit {dit}: {info.name} loads its transformers from the base model here ({hub}); set it to a diffusers folder "
                     "of your files to use them")
    vae = str(r.get("vae") or "").strip()
    if vae:
        out["vae"] = {"model_name": vae}
    for key, part in TEXT_FILES.get(model_type, {}).items():
        value = str(r.get(key) or "").strip()
        if not value:
            continue
        if Path(value).suffix.lower() in (".safetensors", ".sft") and info.text_encoder_files:
            out.setdefault(part, {})["model_name"] = value
        else:
            notes.append(f"{key} {Path(value).name}: a text encoder in its original repo's layout is not read here; the base "
                         f"model's ({hub}) is used")
    if model_type in (M.WAN_2_2_T2V_A14B, M.WAN_2_2_I2V_A14B):
        _expert(r, out, notes)


def _expert(r: KohyaReader, out: dict[str, Any], notes: list[str]) -> None:
    """Wan 2.2 A14B: musubi-tuner trains one expert when its `dit` is that expert and the timesteps
    are limited to its range: at or above `timestep_boundary` (its default: 875 for T2V, 900 for
    I2V) the high-noise one. A range across the boundary goes by the file's name (`high_noise` /
    `low_noise`), else by the larger part; a range narrower than the expert's is the expert's here."""
    boundary = 875.0 if out["model_type"] == M.WAN_2_2_T2V_A14B.value else 900.0
    if r.given("timestep_boundary"):
        given = r.number("timestep_boundary")
        boundary = given * 1000 if given <= 1 else given
    low = r.number("min_timestep") if r.given("min_timestep") else 0.0
    high = r.number("max_timestep") if r.given("max_timestep") else 1000.0
    name = Path(str(r.data.get("dit") or "")).name.lower()
    if low >= boundary:
        expert = "HIGH_NOISE"
    elif high <= boundary:
        expert = "LOW_NOISE"
    elif "high_noise" in name or "low_noise" in name:
        expert = "HIGH_NOISE" if "high_noise" in name else "LOW_NOISE"
    else:
        expert = "HIGH_NOISE" if high - boundary >= boundary - low else "LOW_NOISE"
        notes.append(f"Wan 2.2 A14B: its timesteps {low:g}-{high:g} span both experts; here a run trains one: the "
                     f"{'high' if expert == 'HIGH_NOISE' else 'low'}-noise expert (Trained expert)")
    out["trained_expert"] = expert
    own = (boundary, 1000.0) if expert == "HIGH_NOISE" else (0.0, boundary)
    if low > own[0] or high < own[1]:
        notes.append(f"min_timestep / max_timestep {low:g}-{high:g}: here the expert trains its whole range ({own[0]:g}-{own[1]:g})")
    for key in ("min_timestep", "max_timestep", "preserve_distribution_shape"):
        r.get(key)


# how musubi-tuner runs (attention kernels, compiling, block-swap details, caches, metadata): not listed as left out
PLUMBING = frozenset({"block_swap_h2d_only", "block_swap_ring_size", "use_pinned_memory_for_block_swap", "compile", "compile_backend",
                      "compile_cache_size_limit", "compile_dynamic", "compile_fullgraph", "compile_mode", "cuda_allow_tf32",
                      "cuda_cudnn_benchmark", "ddp_gradient_as_bucket_view", "ddp_static_graph", "ddp_timeout", "disable_numpy_memmap",
                      "flash3", "flash_attn", "sage_attn", "split_attn", "img_in_txt_in_offloading", "vae_cache_cpu", "vae_chunk_size",
                      "vae_dtype", "text_encoder_dtype", "offload_inactive_dit", "log_config", "show_timesteps",
                      "metadata_arch", "metadata_author", "metadata_description", "metadata_license", "metadata_reso", "metadata_tags",
                      "metadata_title", "no_metadata", "config_file"})


def musubi_options(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """`blocks_to_swap` as the share of the transformer's blocks kept in CPU memory (Offload
    fraction); `gradient_checkpointing_cpu_offload` (Activation offloading); `fp8_scaled` (the
    transformer in 8 bits, as `fp8_base`) and `fp8_t5` / `fp8_llm` / `fp8_vl` (the text encoder's);
    HunyuanVideo's embedded `guidance_scale` (musubi-tuner's default 1)."""
    info = family_info(model_type)
    if r.flag("fp8_scaled"):
        out.setdefault(info.denoiser, {})["weight_dtype"] = "FLOAT_8"
    if r.flag("fp8_t5") or r.flag("fp8_llm") or r.flag("fp8_vl") or r.flag("fp8_text_encoder"):
        # (HunyuanVideo's fp8_llm: its Llama, not its CLIP)
        for part in info.text_encoders[:1] if model_type == M.HUNYUAN_VIDEO else info.text_encoders:
            out.setdefault(part, {})["weight_dtype"] = "FLOAT_8"
    if r.flag("gradient_checkpointing_cpu_offload"):
        out.setdefault(info.denoiser, {})["activation_offloading"] = True
    if r.given("blocks_to_swap"):
        n = r.number("blocks_to_swap", int)
        total = BLOCKS.get(str(r.data.get("task") or "").lower()) or BLOCKS.get(model_type)
        if total:
            share = min(1.0, round(n / total, 2))
            out.setdefault("transformer", {})["offload_fraction"] = share
            notes.append(f"blocks_to_swap {n}: the transformer's Offload fraction is {share} here ({n} of its {total} blocks kept in "
                         "CPU memory)")
        else:
            notes.append(f"blocks_to_swap {n}: set the transformer's Offload fraction (the share of its blocks kept in CPU memory)")
    if model_type == M.HUNYUAN_VIDEO:  # musubi-tuner gives the transformer its value as is; here it is scaled by 1000 first
        value = r.number("guidance_scale") if r.given("guidance_scale") else 1.0
        out.setdefault("transformer", {})["guidance_scale"] = value / 1000
        notes.append(f"guidance_scale {value:g}: musubi-tuner feeds HunyuanVideo's guidance embedding {value:g} itself, which is "
                     f"guidance {value / 1000:g} as the model reads it (x1000); the same here (Guidance scale {value / 1000:g})")
