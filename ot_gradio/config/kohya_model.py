"""Which model a kohya_ss / sd-scripts config trains: its family (`kohya_model_type`) and where
each part comes from (`model_sources`): the base model, and the files sd-scripts reads beside it,
the Flux / Chroma / Anima transformer file and the text encoders' and VAE's own files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .base_model_match import family_by_name
from .enums import ModelType as M
from .families import family_info
from .kohya_flow import SD3_TYPES
from .kohya_reader import KohyaReader
from .validation import ConfigError

# sd-scripts' files of a family's other parts -> the part that reads it here
_SD3_FILES = {"clip_l": "text_encoder", "clip_g": "text_encoder_2", "t5xxl": "text_encoder_3"}
PART_FIELDS = {M.FLUX_DEV_1: {"clip_l": "text_encoder", "t5xxl": "text_encoder_2", "ae": "vae"},
               M.CHROMA_1: {"t5xxl": "text_encoder", "ae": "vae"}, M.STABLE_DIFFUSION_3: _SD3_FILES, M.STABLE_DIFFUSION_35: _SD3_FILES}
PART_LABELS = {"text_encoder": "text encoder", "text_encoder_2": "text encoder 2", "text_encoder_3": "text encoder 3", "vae": "VAE"}
PART_FILES = {M.FLUX_DEV_1: ("ae", "clip_l", "t5xxl"), M.CHROMA_1: ("ae", "t5xxl"),
              M.ANIMA: ("qwen3", "anima_qwen3", "vae", "anima_vae", "llm_adapter_path", "anima_llm_adapter_path",
                        "t5_tokenizer_path", "anima_t5_tokenizer_path")}
FAMILY_NAMES = {M.FLUX_DEV_1: "Flux", M.CHROMA_1: "Chroma", M.ANIMA: "Anima", M.STABLE_DIFFUSION_3: "SD 3",
                M.STABLE_DIFFUSION_35: "SD 3"}
# the families a base model's name may name for a kohya config (the ones sd-scripts has a script for, here)
NAMED_FAMILIES = (M.STABLE_DIFFUSION_XL_10_BASE, M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35, M.FLUX_DEV_1, M.CHROMA_1)
# SDXL checkpoints' names: "xl" ending a word (juggernautXL, animagine-xl-3.1, realvisxlV40), or the
# SDXL families people name
SDXL_NAMES = re.compile(r"(?i:xl)(?![a-z])|(?i:illustrious|noobai|pony)")


def kohya_model_type(r: KohyaReader, notes: list[str]) -> M:
    """kohya_ss's family switches (the LoRA and DreamBooth pages' `sdxl`, the fine-tune page's
    `sdxl_checkbox`); sd-scripts picks the family by its script, so a TOML without them is read
    by its network module (lora_flux, lora_sd3), its T5 file, `v2`, or else what the file names
    (`_named_family`, said in a note), else as SD 1.5 with a note."""
    module = str(r.data.get("network_module") or "")
    for switch, script, name in (("lumina_checkbox", "lora_lumina", "Lumina Image 2.0"),
                                 ("hunyuan_image_checkbox", "lora_hunyuan_image", "HunyuanImage 2.1")):
        if r.flag(switch) or module.endswith(script):
            raise ConfigError(f"{switch}: this kohya_ss config trains {name}, which has no model type here; nothing was "
                              "imported. Choose one of this trainer's model types on the page instead")
    # (kohya_ss's page saves anima_qwen3 in every config: it names Anima only in a file without the switch)
    if (r.flag("anima_checkbox") or module.endswith("lora_anima") or r.given("qwen3")
            or (r.given("anima_qwen3") and "anima_checkbox" not in r.data)):
        r.get("network_module")
        return M.ANIMA
    if r.flag("sd3_checkbox") or module.endswith("lora_sd3"):
        r.get("network_module")
        return _sd3_version(r)
    if r.flag("flux1_checkbox") or module.endswith("lora_flux") or r.given("t5xxl"):
        r.get("network_module")
        # sd-scripts' flux_train_network.py with --model_type chroma (kohya_ss's Flux page, model type Chroma)
        return M.CHROMA_1 if str(r.get("model_type") or "flux").lower() == "chroma" else M.FLUX_DEV_1
    if r.flag("sdxl") or r.flag("sdxl_checkbox"):
        return M.STABLE_DIFFUSION_XL_10_BASE
    if r.flag("v2"):
        return M.STABLE_DIFFUSION_21 if r.flag("v_parameterization") else M.STABLE_DIFFUSION_21_BASE
    if r.page:  # kohya_ss's page says the family: none of its switches is SD 1.x
        return M.STABLE_DIFFUSION_15
    named = _named_family(r, module)
    if named is None:
        notes.append("no model family is named (sd-scripts takes it from the script that runs): SD 1.5 is assumed; "
                     "choose the Model type if it is another")
        return M.STABLE_DIFFUSION_15
    family, why = named
    family = _sd3_version(r) if family in SD3_TYPES else family
    notes.append(f"{family.value}: from {why} (sd-scripts takes the family from the script that runs); choose the Model "
                 "type if it is another")
    return family


def _sd3_version(r: KohyaReader) -> M:
    name = str(r.data.get("pretrained_model_name_or_path") or "").lower()
    return M.STABLE_DIFFUSION_35 if re.search(r"3[._-]?5", name) else M.STABLE_DIFFUSION_3


def _named_family(r: KohyaReader, module: str) -> tuple[M, str] | None:
    """For a file that names no family (sd-scripts takes it from the script that runs): an
    `[sdxl_arguments]` section, else the family the base model's name names: an SDXL name
    (`…XL`, Illustrious, Pony, NoobAI) before a word of another family (zavychromaXL is no
    Chroma), none for a family sd-scripts has no script for here (PixArt-XL), and with sd-scripts'
    plain `networks.lora` (SD and SDXL) only SDXL. (family, why) or None."""
    if "sdxl_arguments" in r.sections:
        return M.STABLE_DIFFUSION_XL_10_BASE, "its [sdxl_arguments] section"
    name = Path(str(r.data.get("pretrained_model_name_or_path") or "")).name
    sign = family_by_name(name)
    kinds = sign.model_types if sign else ()
    if sign and not any(m in NAMED_FAMILIES or m == M.STABLE_DIFFUSION_15 for m in kinds):
        return None  # a family sd-scripts does not train here: the pre-run check names the mismatch
    if SDXL_NAMES.search(name) or M.STABLE_DIFFUSION_XL_10_BASE in kinds:
        return M.STABLE_DIFFUSION_XL_10_BASE, "the base model's name"
    found = next((m for m in kinds if m in NAMED_FAMILIES), None)
    if found is None or module == "networks.lora":
        return None
    return found, "the base model's name"


def model_sources(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    """The base model and the parts' own files: sd-scripts' Flux, Chroma and Anima model is the
    transformer's file alone (it becomes the transformer's file, the base model the family's hub
    repo); its text encoders' and VAE's files (`_part_files`); the SD families' `vae`."""
    out.update(model_type=model_type.value, base_model_name=str(r.get("pretrained_model_name_or_path") or ""))
    read = _part_files(r, out, notes, model_type)
    if model_type in PART_FILES and out["base_model_name"].lower().endswith((".safetensors", ".sft")):
        hub = family_info(model_type).hub_repo
        out.update(transformer={"model_name": out["base_model_name"]}, base_model_name=hub)
        parts = [k for k in PART_FILES[model_type] if r.given(k) and k not in PART_FIELDS.get(model_type, {})]
        for key in parts:
            r.get(key)
        rest = "its configs" if set(read) >= set(PART_FILES[model_type]) else "the other parts"
        notes.append(f"the {FAMILY_NAMES[model_type]} transformer is read from {out['transformer']['model_name']}"
                     + "".join(f", {k} from {v}" for k, v in read.items())
                     + f"; {rest} from {hub}" + (f" ({', '.join(parts)} files are not read)" if parts else ""))
    if r.given("vae") and "ae" in PART_FIELDS.get(model_type, {}):  # sd-scripts' Flux and Chroma read `ae`, not `vae`
        if value := str(r.get("vae") or "").strip():
            notes.append(f"vae '{value}': sd-scripts' {FAMILY_NAMES[model_type]} training reads ae, not vae; not used")
    elif r.given("vae") and model_type != M.ANIMA:  # (Anima's is one of its part files)
        out.setdefault("vae", {})["model_name"] = str(r.get("vae"))


def _part_files(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> dict[str, str]:
    """sd-scripts' files of the text encoders and the VAE (`clip_l`, `t5xxl`, `ae`) as the parts'
    own files (`text_encoder*.model_name`, `vae.model_name`); a value that names no file (kohya_ss's
    "put the full path ... here") is noted and left out. Returns key -> the file read."""
    read = {}
    for key, part in PART_FIELDS.get(model_type, {}).items():
        value = str(r.get(key) or "").strip() if r.given(key) else ""
        if not value:
            continue
        if not _names_a_file(value):
            notes.append(f"{key}: '{value}' names no file; the {PART_LABELS[part]} comes from the base model")
            continue
        out[part] = {"model_name": value}
        read[key] = value
    return read


def _names_a_file(value: str) -> bool:
    """A path to a weights file, or an address one downloads from."""
    return value.lower().endswith((".safetensors", ".sft")) or value.startswith(("https://", "http://"))
