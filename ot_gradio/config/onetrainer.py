"""Import of OneTrainer configs and presets.

Our keys are OneTrainer's (TrainConfig version 11), so importing is mostly bookkeeping: bring
older OneTrainer layouts up to version 11 (its own migrations), read concepts and samples that
OneTrainer keeps in separate files, undo the renames of newer versions, then validate as ours.
Whatever the trainer will not act on is listed in one warning.
"""

from __future__ import annotations

import os
import typing
from copy import deepcopy
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .attention import imported_attention
from .doctor import planned_changes
from .enums import Optimizer
from .families import trainable_parts
from .fields import nested_section, strip_optional
from .json_file import MAX_LIST_ITEMS, may_read, read_json
from .migrations import migrate, strip_ot_versions
from .optimizer import OptimizerConfig
from .ot_optimizer import read_onetrainer_optimizer
from .ot_samples import fill_onetrainer_samples
from .ot_steps import batch_counted_steps
from .schema import LAYER_PRESET_NAMES, TrainConfig
from .validation import ConfigError, LoadResult, strip_unknown, validate

OT_LAYOUT_VERSION = 11  # the OneTrainer TrainConfig version our keys match

PARTS = ("unet", "prior", "transformer", "text_encoder", "text_encoder_2", "text_encoder_3", "text_encoder_4",
         "vae", "effnet_encoder", "decoder", "decoder_text_encoder", "decoder_vqgan", "unconditional_transformer")


def is_onetrainer_config(data: Any) -> bool:
    """OneTrainer writes ``__version``; its presets have no version at all. Ours always carry
    ``config_version`` (a file without it is version 0, which is OneTrainer's layout anyway)."""
    return isinstance(data, dict) and ("__version" in data or "config_version" not in data)


def import_onetrainer(data: dict[str, Any], base_dir: str | Path | None = None, source: str | None = None,
                      readable: list[Path] | None = None) -> LoadResult:
    """A OneTrainer config or preset -> our config, with one warning listing what is not supported."""
    warnings: list[str] = []
    written = "__version" in data  # a file OneTrainer wrote (a preset or a dict made by hand has none)
    data = to_our_layout(data)
    if note := batch_counted_steps(data):
        warnings.append(note)
    if note := _text_encoder_frozen_there(data):
        warnings.append(note)
    if note := _embedding_switch_ignored_there(data):
        warnings.append(note)
    preset = data.get("layer_filter_preset")
    if isinstance(preset, str) and preset not in LAYER_PRESET_NAMES and str(data.get("layer_filter") or "").strip():
        data["layer_filter_preset"] = "custom"  # a preset of OneTrainer's page (Würstchen's down-blocks, ...): its filter decides
    if isinstance(data.get("optimizer"), dict):  # what OneTrainer trains with for a null or left-out setting
        warnings += read_onetrainer_optimizer(data["optimizer"], fill_missing=written, learning_rate=data.get("learning_rate"))
    warnings += _weight_types_changed(data)
    warnings += imported_attention(data)
    read_samples = False
    for key, file_key in (("concepts", "concept_file_name"), ("samples", "sample_definition_file_name")):
        if data.get(key) is None and (key in data or file_key in data):
            read_samples = read_samples or key == "samples"
            items, warning = _read_list_file(data.get(file_key), file_key, base_dir, readable)
            data[key] = strip_ot_versions(ot_concepts(items) if key == "concepts" else items)
            if warning:
                warnings.append(warning)
    if (written or read_samples) and isinstance(data.get("samples"), list):  # a file OneTrainer wrote, or its
        data["samples"] = fill_onetrainer_samples(data["samples"], data.get("model_type"))  # samples file: its defaults per model
    data["config_version"] = 0
    data = migrate(data)
    data, unknown = strip_unknown(data)
    reset = read_as_onetrainer(data, TrainConfig)
    if reset:
        warnings.append(f"{', '.join(reset)}: null, which OneTrainer cannot set there either; the default is used, as "
                        "OneTrainer does.")
    config = validate(data)

    unsupported = planned_changes(config)
    if unsupported or unknown:
        origin = f"OneTrainer config {source}" if source else "This OneTrainer config"
        parts = []
        if unsupported:
            parts.append("options not supported by the trainer yet (kept, but ignored): " + ", ".join(unsupported))
        if unknown:
            parts.append("options unknown to this version (dropped): " + ", ".join(unknown))
        warnings.insert(0, f"{origin} imported with " + "; and ".join(parts) + ".")
    return LoadResult(config, warnings)


def to_our_layout(data: dict[str, Any]) -> dict[str, Any]:
    """Key-level conversion only (no files read, no validation): usable on sparse presets too."""
    data = deepcopy(data)
    version = data.get("__version")
    if version is None and _flat_layout(data):  # saved before OneTrainer wrote a version: OneTrainer reads it as 0
        version = 0
    if isinstance(version, int) and not isinstance(version, bool):
        for step in range(max(version, 0), OT_LAYOUT_VERSION):
            migration = _OT_MIGRATIONS.get(step)
            if migration is not None:
                data = migration(data)
    if isinstance(data.get("concepts"), list):
        data["concepts"] = ot_concepts(data["concepts"])
    data = strip_ot_versions(data)
    if "weight_dtype" in data:
        # OneTrainer's global weight type of versions before 10. Its presets still carry it, and
        # OneTrainer ignores it there (each part has its own; FLOAT_32 where the preset sets none);
        # its migration uses it for parts set to NONE. So do we, and drop it without a word.
        data = _ot_9(data)
    _remembered_optimizer_settings(data)
    _undo_newer_renames(data)
    _fix_enum_values(data)
    if "huggingface_token" in data:
        data.setdefault("secrets", {}).setdefault("huggingface_token", data.pop("huggingface_token"))
    return data


def read_as_onetrainer(data: dict[str, Any], model: type[BaseModel], where: str = "") -> list[str]:
    """Values of another type, taken as OneTrainer's `from_dict` takes them: a number in a text
    field is its text (`"resolution": 512` is "512"); null in a field that takes none keeps the
    field's default (OneTrainer's int(None) fails there and it keeps its default). Returns the
    fields put back to their defaults."""
    reset: list[str] = []
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value, annotation = data[name], field.annotation
        kind, section = nested_section(annotation)
        if value is None and annotation is not Any and type(None) not in typing.get_args(annotation):
            del data[name]
            reset.append(where + name)
        elif strip_optional(annotation) is str and isinstance(value, int | float) and not isinstance(value, bool):
            data[name] = str(value)
        elif kind == "section" and isinstance(value, dict):
            reset += read_as_onetrainer(value, section, f"{where}{name}.")
        elif kind == "list" and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    reset += read_as_onetrainer(item, section, f"{where}{name}.{index}.")
    return reset


def _flat_layout(data: dict[str, Any]) -> bool:
    """OneTrainer's first layout: the optimizer a name with flat `optimizer_*` settings, or the parts'
    settings flat (`train_unet`, `unet_weight_dtype` ...). Its presets, also without a version,
    already have the sections."""
    return isinstance(data.get("optimizer"), str) or any(key in data for key in (*_OT_1_FIELDS, *_OT_1_EPOCHS))


def ot_concepts(items: list[Any]) -> list[Any]:
    """OneTrainer's concepts brought to its concept version 2, each from its own `__version` (none:
    0): `repeats` became `balancing`, then `validation_concept` became `type` (VALIDATION or STANDARD)."""
    out = []
    for item in items:
        if isinstance(item, dict):
            item = dict(item)
            version = item.pop("__version", 0)
            version = version if isinstance(version, int) and not isinstance(version, bool) else 0
            if version < 1 and "repeats" in item:
                item["balancing"] = item.pop("repeats")
            if version < 2 and "validation_concept" in item:
                item["type"] = "VALIDATION" if item.pop("validation_concept") else "STANDARD"
        out.append(item)
    return out


def _remembered_optimizer_settings(data: dict[str, Any]) -> None:
    """OneTrainer's page fills the optimizer from `optimizer_defaults[<its name>]` when it loads a
    config; its presets rely on that (the fine-tune presets name only ADAFACTOR and keep its
    settings, fused back pass on, there). Settings written in `optimizer` itself win."""
    optimizer, defaults = data.get("optimizer"), data.get("optimizer_defaults")
    if not (isinstance(optimizer, dict) and isinstance(defaults, dict)):
        return
    name = optimizer.get("optimizer")
    remembered = defaults.get(name) if isinstance(name, str) else None  # a wrong name is refused by validation
    if isinstance(remembered, dict):  # keys unknown here are reported once, under optimizer_defaults
        data["optimizer"] = {**{k: v for k, v in remembered.items() if k in OptimizerConfig.model_fields}, **optimizer}


def _weight_types_changed(data: dict[str, Any]) -> list[str]:
    """OneTrainer's weight types read as the nearest one here, said once per kind, naming the
    parts. INT_W8A8_COMPRESSED / FLOAT_W8A8_COMPRESSED (8-bit weights and matmuls, the weights
    also compressed by NVIDIA's nvCOMP on the GPU) are trained as INT_W8A8 / FLOAT_W8A8,
    uncompressed."""
    swaps = {"INT_W8A8_COMPRESSED": "INT_W8A8", "FLOAT_W8A8_COMPRESSED": "FLOAT_W8A8"}
    changed = []
    for name in PARTS:
        part = data.get(name)
        if isinstance(part, dict) and isinstance(part.get("weight_dtype"), str) and part["weight_dtype"] in swaps:
            old = part["weight_dtype"]
            part["weight_dtype"] = swaps[old]
            changed.append(f"{name}.weight_dtype {old} -> {swaps[old]}")
    if not changed:
        return []
    return [f"{'; '.join(changed)}: the same 8-bit weights and 8-bit matmuls, but not compressed (nvCOMP weight "
            "compression is not supported), so the weights take their full 8 bits of memory."]


# OneTrainer's LoRA and fine-tune of these model types never train the text encoder (it stays
# frozen whatever `text_encoder.train` says; its page has no switch for it); this trainer can
TEXT_ENCODER_FROZEN_THERE = ("Z_IMAGE", "FLUX_2", "KREA_2", "ERNIE", "ANIMA", "IDEOGRAM_4")


def _text_encoder_frozen_there(data: dict[str, Any]) -> str | None:
    """A config of such a model type whose text encoder would train (OneTrainer's default is on)
    keeps it frozen, as it trained there; the note says how to train it here."""
    model_type = data.get("model_type")
    if model_type not in TEXT_ENCODER_FROZEN_THERE or data.get("training_method", "FINE_TUNE") not in ("LORA", "FINE_TUNE"):
        return None
    part = data.setdefault("text_encoder", {})
    if not isinstance(part, dict) or part.get("train", True) is not True:
        return None
    part["train"] = False
    return (f"text_encoder.train: OneTrainer never trains the text encoder of {model_type}, so it stays frozen here too, "
            "as the run trained there; turn Train on in Training -> Text encoder to train it.")


def _embedding_switch_ignored_there(data: dict[str, Any]) -> str | None:
    """OneTrainer's SD 1.x/2.x, Würstchen and Stable Cascade train their embeddings whatever the
    text encoder's `train_embedding` says (its page does not show it for them): off, it is on here."""
    model_type = str(data.get("model_type") or "")
    part = data.get("text_encoder")
    if not (model_type.startswith(("STABLE_DIFFUSION_1", "STABLE_DIFFUSION_2")) or model_type in ("WUERSTCHEN_2", "STABLE_CASCADE_1")):
        return None
    if not isinstance(part, dict) or part.get("train_embedding") is not False:
        return None
    part["train_embedding"] = True
    return (f"text_encoder.train_embedding: off, which OneTrainer ignores for {model_type} (its embeddings train whatever it "
            "says); on here, so the embeddings train as they did there.")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# The conversions below run on the file's raw values, before validation. Each acts only on a
# value of the type it expects and leaves any other value as it is, for validation to report as
# "field: must be ..." (a dict where a name belongs must not become a TypeError here).

def _read_list_file(name: Any, key: str, base_dir: str | Path | None, readable: list[Path] | None = None) -> tuple[list[Any], str | None]:
    """OneTrainer's concepts/samples file, relative to the config's folder, then to the cwd; with
    `readable` (the page's folders), only a file inside one of them is read."""
    if not isinstance(name, str) or not name:
        return [], None  # not text: validation names the field
    if os.path.isabs(name):
        candidates = [Path(name)]
    else:
        candidates = ([Path(base_dir) / name] if base_dir else []) + [Path.cwd() / name]
    for path in candidates:
        try:
            found = path.is_file()
        except (OSError, ValueError) as err:  # a name too long, a NUL byte
            shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name)} characters)"
            raise ConfigError(f"{key}: {shown!r} is not a usable file name ({getattr(err, 'strerror', None) or err}); "
                              "give the path of OneTrainer's concepts/samples JSON file") from None
        if found and not may_read(path, readable):
            return [], (f"{key}: {name} is outside the folders this page may read, so the config has no "
                        f"{'concepts' if key == 'concept_file_name' else 'samples'}; add them here, or import the file "
                        "from the command line (validate --output).")
        if found:
            items = read_json(path, key, expect=list)
            most = MAX_LIST_ITEMS["concepts" if key == "concept_file_name" else "samples"]
            if len(items) > most:
                raise ConfigError(f"{key}: {path} holds {len(items)} items; at most {most} are supported")
            return items, None
    what = "concepts" if key == "concept_file_name" else "samples"
    looked = " or ".join(str(p) for p in candidates)
    return [], f"{key}: {name} was not found (looked in {looked}), so the config has no {what}; add them here or put the file there."


def _undo_newer_renames(data: dict[str, Any]) -> None:
    """OneTrainer 12+ renamed a few keys; take them back to the version-11 names we use."""
    if "caching_threads" in data:
        data.setdefault("dataloader_threads", data.pop("caching_threads"))
    if "image_caching" in data or "text_caching" in data:
        image = data.pop("image_caching", None)
        text = data.pop("text_caching", None)
        data.setdefault("latent_caching", image if image is not None else text)
    defaults = data.get("optimizer_defaults")
    for optimizer in [data.get("optimizer"), *(defaults.values() if isinstance(defaults, dict) else [])]:
        # a mode since adv-optm 2.5 ("disabled", "flattened", "iterative"); the adv-optm here has the
        # flattened form only. Any other text stays, for validation to refuse by name.
        modes = {"": False, "disabled": False, "flattened": True, "iterative": True}
        if isinstance(optimizer, dict) and isinstance(optimizer.get("orthogonal_gradient"), str) and optimizer["orthogonal_gradient"] in modes:
            optimizer["orthogonal_gradient"] = modes[optimizer["orthogonal_gradient"]]


# CUDNN (OneTrainer's Krea 2 presets): PyTorch's scaled-dot-product attention held to its cuDNN
# kernel; SDP lets PyTorch pick another (the trainer keeps cuDNN's out on CUDA: its backward returned
# wrong gradients on an H200, models/attention.keep_cudnn_attention_off)
_ENUM_ALIASES = {"timestep_distribution": {"PARABOLA": "INVERTED_PARABOLA"}, "attention_mechanism": {"CUDNN": "SDP"}}


def _fix_enum_values(data: dict[str, Any]) -> None:
    for key, aliases in _ENUM_ALIASES.items():
        if isinstance(data.get(key), str) and data[key] in aliases:
            data[key] = aliases[data[key]]
    if isinstance(data.get("tensorboard_port"), str) and data["tensorboard_port"].isdigit():
        data["tensorboard_port"] = int(data["tensorboard_port"])
    defaults = data.get("optimizer_defaults")
    if isinstance(defaults, dict):
        known = {o.value for o in Optimizer}
        # remembered settings of optimizers we do not know are OneTrainer UI state: drop them
        data["optimizer_defaults"] = {k: v for k, v in defaults.items() if k in known}


# --- OneTrainer's own migrations (TrainConfig __version n -> n+1), for configs older than 11 ----

def _ot_0(data: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(data.get("optimizer"), str):
        return data
    settings: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "optimizer":
            settings["optimizer"] = value
        elif key.startswith("optimizer_"):
            settings[key.removeprefix("optimizer_")] = value
        else:
            out[key] = value
    out["optimizer"] = settings
    out["optimizer_defaults"] = {settings["optimizer"]: deepcopy(settings)}
    return out


_OT_1_FIELDS = {
    "train_unet": ("unet", "train"), "unet_learning_rate": ("unet", "learning_rate"), "unet_weight_dtype": ("unet", "weight_dtype"),
    "train_prior": ("prior", "train"), "prior_model_name": ("prior", "model_name"), "prior_learning_rate": ("prior", "learning_rate"),
    "prior_weight_dtype": ("prior", "weight_dtype"), "train_text_encoder": ("text_encoder", "train"),
    "text_encoder_learning_rate": ("text_encoder", "learning_rate"), "text_encoder_weight_dtype": ("text_encoder", "weight_dtype"),
    "train_text_encoder_2": ("text_encoder_2", "train"), "text_encoder_2_learning_rate": ("text_encoder_2", "learning_rate"),
    "text_encoder_2_weight_dtype": ("text_encoder_2", "weight_dtype"), "vae_model_name": ("vae", "model_name"),
    "vae_weight_dtype": ("vae", "weight_dtype"), "effnet_encoder_model_name": ("effnet_encoder", "model_name"),
    "effnet_encoder_weight_dtype": ("effnet_encoder", "weight_dtype"), "decoder_model_name": ("decoder", "model_name"),
    "decoder_weight_dtype": ("decoder", "weight_dtype"), "decoder_text_encoder_weight_dtype": ("decoder_text_encoder", "weight_dtype"),
    "decoder_vqgan_weight_dtype": ("decoder_vqgan", "weight_dtype"),
}
_OT_1_EPOCHS = {"train_unet_epochs": "unet", "train_prior_epochs": "prior", "train_text_encoder_epochs": "text_encoder",
                "train_text_encoder_2_epochs": "text_encoder_2"}


def _ot_1(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    embedding: dict[str, Any] = {}

    for key, value in data.items():
        if key in _OT_1_FIELDS:
            name, field = _OT_1_FIELDS[key]
            out.setdefault(name, {})[field] = value
        elif key in _OT_1_EPOCHS:
            out.setdefault(_OT_1_EPOCHS[key], {}).update(stop_training_after=value, stop_training_after_unit="EPOCH")
        elif key == "embedding_model_names":
            if isinstance(value, list) and value:
                embedding["model_name"] = value[0]
            elif value:
                embedding["model_name"] = value  # not a list: validation names it
        elif key in ("token_count", "initial_embedding_text"):
            embedding[key] = value
        else:
            out[key] = value
    if embedding:
        out["embedding"] = embedding
    return out


def _ot_2(data: dict[str, Any]) -> dict[str, Any]:
    gamma = data.pop("min_snr_gamma", 0.0)
    if gamma:
        data.update(loss_weight_fn="MIN_SNR_GAMMA", loss_weight_strength=gamma)
    elif data.get("model_type") in ("WUERSTCHEN_2", "STABLE_CASCADE_1"):
        data.update(loss_weight_fn="P2", loss_weight_strength=1.0)
    return data


def _ot_3(data: dict[str, Any]) -> dict[str, Any]:
    weight = data.pop("noising_weight", 0.0)
    bias = data.pop("noising_bias", 0.5)
    if weight:
        data.update(timestep_distribution="SIGMOID", noising_weight=weight, noising_bias=bias - 0.5 if _number(bias) else bias)
    else:
        data.update(timestep_distribution="UNIFORM", noising_weight=0.0, noising_bias=0.0)
    return data


def _ot_4(data: dict[str, Any]) -> dict[str, Any]:
    if isinstance(data.get("gradient_checkpointing", True), bool):
        data["gradient_checkpointing"] = "ON" if data.pop("gradient_checkpointing", True) else "OFF"
    return data


def _rename(data: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    for old, new in renames.items():
        if old in data:
            data[new] = data.pop(old)
    return data


def _ot_6(data: dict[str, Any]) -> dict[str, Any]:
    if "lora_layer_preset" in data and data["lora_layer_preset"] is None:
        data["lora_layer_preset"] = "full"
    return data


def _ot_8(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("model_type") not in ("STABLE_CASCADE_1", "WUERSTCHEN_2") and isinstance(data.get("prior"), dict):
        data["transformer"] = deepcopy(data["prior"])
    return data


def _ot_9(data: dict[str, Any]) -> dict[str, Any]:
    weight_dtype = data.pop("weight_dtype", None)
    for name in PARTS:
        part = data.get(name)
        if isinstance(part, dict) and part.get("weight_dtype") == "NONE" and weight_dtype is not None:
            part["weight_dtype"] = weight_dtype
    return data


def _ot_10(data: dict[str, Any]) -> dict[str, Any]:
    """The global checkpointing and offloading, per part. OneTrainer writes the offloading into
    every part and acts on the model's own; here it goes only where offloading works (the denoiser
    and the text encoders, which the doctor checks), so a VAE never holds it."""
    mode = data.pop("gradient_checkpointing", "ON")
    activations = data.pop("enable_activation_offloading", True)
    fraction = data.pop("layer_offload_fraction", 0.0)
    if "enable_async_offloading" in data:
        data["async_offloading"] = data.pop("enable_async_offloading")
    offloadable = trainable_parts(str(data.get("model_type") or "STABLE_DIFFUSION_15"))
    for name in PARTS:
        part = data.get(name)
        if isinstance(part, dict):
            part["gradient_checkpointing"] = mode != "OFF"
            offload = mode == "CPU_OFFLOADED" and name in offloadable
            part["activation_offloading"] = offload and bool(activations)
            part["offload_fraction"] = fraction if offload else 0.0
    return data


_OT_MIGRATIONS = {
    0: _ot_0,
    1: _ot_1,
    2: _ot_2,
    3: _ot_3,
    4: _ot_4,
    5: lambda d: _rename(d, {"save_after": "save_every", "save_after_unit": "save_every_unit"}),
    6: _ot_6,
    7: lambda d: _rename(d, {"lora_layers": "layer_filter", "lora_layer_preset": "layer_filter_preset", "lora_layers_regex": "layer_filter_regex"}),
    8: _ot_8,
    9: _ot_9,
    10: _ot_10,
}
