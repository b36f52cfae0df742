"""The start checks: everything a run is refused for before its first step, as one list that
`validate`, `train` and the page's Start all call (`start_problems`): the config's own (the
doctor's errors: settings that cannot train together) and what the run needs from this machine
(the base model and concept folders exist and hold images, the output can be written under a name
the file system takes and, with `prevent_overwrites`, is not there yet, no NUL bytes, a known layer preset), which the trainer would otherwise fail
on, some only at the final save, after the whole run trained.

Each problem is one line `field: what is wrong; what to do`. No torch: `validate` stays fast and
the page calls it too. `concept_folder_problems` reads a config dict the schema refused, so the
page lists missing folders together with the schema's problems. The trainer re-checks its concept
folders and output folders when it loads (training/preflight.py), for a run whose folders changed
after Start.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..config.civitai import EXAMPLE as CIVITAI_EXAMPLE
from ..config.civitai import address_problem as civitai_problem
from ..config.civitai import is_civitai, redacted
from ..config.doctor import errors
from ..config.fields import PLANNED, field_meta
from ..config.hub_files import EXAMPLE as HUB_FILE_EXAMPLE
from ..config.hub_files import hub_file_address, hub_repo_address, is_web_address
from ..config.parts import TextEncoderPartConfig
from ..config.schema import TrainConfig

NAME_MAX = 255  # bytes in one file name on ext4, xfs, btrfs, NTFS, APFS
PATH_MAX = 4096
TEMP_EXTRA = len(".") + len(".XXXXXXXX.tmp")  # fsutil's atomic writes: `.{name}.<random>.tmp`
STEP_EXTRA = len("-step") + 10  # intermediate saves: `{prefix}{stem}-step{global_step}{suffix}`
MODEL_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".sft", ".gguf")
DEMO_FOLDER = ("demo-data", "shapes")  # made by ensure_demo_concepts when a run starts
# Layer presets some family knows (the field's choices; "blocks" only the flow-matching
# transformers': SD 3, Flux, Z-Image). A name outside them fails every family's LoRA setup;
# "blocks" for a family without it is still refused by the trainer, before the first step.
LAYER_PRESETS = field_meta(TrainConfig, "layer_filter_preset")["choices"]


def _walk(value: Any, path: str = ""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    else:
        yield path, value


def _shown(text: str) -> str:
    """`text` cut to about 80 characters for a message: its start and its end, where a path's file name is."""
    return text if len(text) <= 80 else f"{text[:30]}...{text[-45:]}"


def nul_problems(data: dict[str, Any]) -> list[str]:
    """Text with a NUL character: no file, folder or program argument can hold one."""
    return [f"{path}: contains a NUL character (\\0); remove it" for path, value in _walk(data)
            if isinstance(value, str) and "\0" in value]


def looks_like_local_path(name: str) -> bool:
    """A model name that can only mean a file or folder here (a Hugging Face id is `owner/name`)."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or "\\" in name or name.count("/") > 1
            or name.lower().endswith(MODEL_SUFFIXES))


def model_problems(config: Any) -> list[str]:
    out = []
    name = (config.base_model_name or "").strip()
    if not name:
        out.append("base_model_name: empty; enter a Hugging Face id (owner/name), a diffusers folder, a .safetensors file "
                   "or a Hugging Face file address")
    names = [("base_model_name", name)]
    for part in type(config).model_fields:
        sub = getattr(config, part, None)
        # a part's own model name that the trainer does not read yet (PLANNED: the import warned
        # that it is ignored) is not checked
        if (hasattr(sub, "model_name") and part not in ("embedding",) and isinstance(sub.model_name, str)
                and field_meta(type(sub), "model_name").get("status") != PLANNED):
            names.append((f"{part}.model_name", sub.model_name.strip()))
    for field, value in names:
        if is_civitai(value):  # a Civitai model's address downloads its file (models/civitai_download.py)
            if problem := civitai_problem(value):
                out.append(f"{field}: {_shown(redacted(value))} {problem}")
        elif is_web_address(value):  # a Hugging Face file (or, for the base model, repo) address downloads; no other site's does
            if hub_file_address(value) is None and not (field == "base_model_name" and hub_repo_address(value)):
                out.append(f"{field}: {_shown(value)} is a web address but not of a Hugging Face file ({HUB_FILE_EXAMPLE}) "
                           f"or a Civitai model ({CIVITAI_EXAMPLE}); download the file and give its path")
        elif value and not value.startswith("tiny:") and looks_like_local_path(value) and not _exists(Path(value).expanduser()):
            out.append(f"{field}: {_shown(value)} does not exist; give an existing diffusers folder or model file, or a Hugging Face id")
    problem = folder_family_problem(config, name)
    return out + ([problem] if problem else [])


def start_file_problem(field: str, value: str, kind: str) -> str | None:
    """What is wrong with `value` as a file a run starts from (`kind` "LoRA" or "embedding"): it
    must be a file here or an address that downloads (a Hugging Face file, a Civitai model of
    that kind, which is checked when it downloads); known before the model loads, minutes before setup."""
    value = str(value or "").strip()
    if not value:
        return None
    if is_civitai(value):
        problem = civitai_problem(value)
        return f"{field}: {_shown(redacted(value))} {problem}" if problem else None
    if is_web_address(value):
        return None if hub_file_address(value) else (
            f"{field}: {_shown(value)} is a web address but not of a Hugging Face file ({HUB_FILE_EXAMPLE}) or a "
            f"Civitai {kind} ({CIVITAI_EXAMPLE}); download the file and give its path")
    try:
        if Path(value).expanduser().is_file():
            return None
    except (OSError, ValueError):  # a name too long for a path, a NUL byte: no such file
        pass
    if kind == "LoRA":
        return (f"{field}: {_shown(value)} does not exist; give a LoRA .safetensors file, a Hugging Face file address or a "
                "Civitai LoRA's address, or leave it blank for a new LoRA")
    return (f"{field}: {_shown(value)} does not exist; give an embedding .safetensors (or .pt) file, a Hugging Face file "
            "address or a Civitai embedding's address, or leave it blank for a new embedding")


def lora_problems(config: Any) -> list[str]:
    """The LoRA a LORA run starts from (`lora_model_name`)."""
    if str(getattr(config.training_method, "value", config.training_method)) != "LORA":
        return []
    problem = start_file_problem("lora_model_name", getattr(config, "lora_model_name", ""), "LoRA")
    return [problem] if problem else []


def embedding_problems(config: Any) -> list[str]:
    """The embedding files a run reads (EMBEDDING: `embedding.model_name`, the one it continues;
    LORA, FINE_TUNE and EMBEDDING: each of `additional_embeddings`)."""
    method = str(getattr(config.training_method, "value", config.training_method))
    wanted = [("embedding", config.embedding)] if method == "EMBEDDING" else []
    if method in ("LORA", "FINE_TUNE", "EMBEDDING"):
        wanted += [(f"additional_embeddings[{i}]", e) for i, e in enumerate(config.additional_embeddings)]
    problems = (start_file_problem(f"{field}.model_name", settings.model_name, "embedding") for field, settings in wanted)
    return [p for p in problems if p]


def folder_family_problem(config: Any, name: str) -> str | None:
    """A diffusers folder as base model whose model_index.json lacks a part the model type loads
    from it (an SD 1.5 folder, with a unet, for Flux): known from that file alone, before the
    pipeline fails on it minutes into loading."""
    from ..config.families import family_info  # noqa: PLC0415
    from ..config.io import ConfigError, read_json  # noqa: PLC0415

    folder = Path(name).expanduser()
    index = folder / "model_index.json"
    info = family_info(config.model_type)
    if not name or info is None or info.denoiser not in ("unet", "transformer") or not _exists(index):
        return None
    try:
        data = read_json(index, "base_model_name")
    except ConfigError as err:
        return f"{err}; the base model folder's model_index.json must be the one its download came with"
    model_type = str(getattr(config.model_type, "value", config.model_type))
    from_base = [p for p in (info.denoiser, *info.text_encoders)
                 if not (_reads_own_model(config, p, model_type) and str(getattr(config, p).model_name or "").strip())]
    missing = [p for p in from_base if not (data.get(p) or [None])[0]]  # an empty entry ([null, null]) ships no such part
    if not missing:
        return None
    own = [p for p in missing if _reads_own_model(config, p, model_type)]
    kind = str(data.get("_class_name") or "a pipeline of unknown class")
    return (f"base_model_name: {_shown(name)} holds {kind} (its model_index.json), which has no {' and no '.join(missing)}; "
            f"model type {model_type} loads those from the base model. Choose a {model_type} model or the model type "
            "that matches this folder" + "".join(f", or set {p}.model_name to a model of its own" for p in own))


def _reads_own_model(config: Any, part: str, model_type: str) -> bool:
    """The model type loads `part` from its own `model_name` (a field neither planned nor kept only
    for OneTrainer's configs, and shown for this model type) without the base model's. A text
    encoder file is not such a model: it is read with the config of the base model's part."""
    section = getattr(config, part, None)
    if section is None or not hasattr(section, "model_name") or isinstance(section, TextEncoderPartConfig):
        return False
    meta = field_meta(type(section), "model_name")
    rule = meta.get("applies_when")
    return meta.get("status") != PLANNED and not meta.get("compat") and (rule is None or bool(rule({"model_type": model_type})))


def concept_problems(config: Any) -> list[str]:
    enabled = [(i, c) for i, c in enumerate(config.concepts) if c.enabled]
    if not config.concepts:
        return ["concepts: there is no concept; add a folder of training images"]
    if not enabled:
        return [f"concepts[{i}].enabled: off, as every concept is; turn one on" for i in range(len(config.concepts))][:1]
    from ..config.families import family_info  # noqa: PLC0415

    info = family_info(config.model_type)
    clips = info is not None and info.frame_step is not None  # a video family trains on clips as well
    out = []
    for i, concept in enabled:
        path = Path(concept.path).expanduser()
        if tuple(path.parts[-2:]) == DEMO_FOLDER:
            continue
        if not concept.path.strip():
            out.append(f"concepts[{i}].path: empty; choose the folder of this concept's images")
        elif not _is_dir(path):
            out.append(f"concepts[{i}].path: folder {_shown(concept.path)} does not exist; fix the path")
        elif _read_by_run(config, concept) and not _has_image(path, bool(concept.include_subdirectories), clips):
            where = ("or its subfolders" if concept.include_subdirectories else
                     "(subfolders are not read: turn on Include subfolders)" if _has_subfolder(path) else "")
            what = "images or clips" if clips else "images"
            unread = _unread_kinds(path, bool(concept.include_subdirectories))
            fix = (f"it holds {', '.join(unread)} files, a format that is not read: convert them to PNG or JPG" if unread else
                   f"choose the folder that holds the {what} (.png, .jpg, .webp{', .mp4, .webm' if clips else ''} ...)")
            out.append(f"concepts[{i}].path: folder {_shown(concept.path)} has no {what}{' ' + where if where else ''}; {fix}")
        else:
            out += _prompt_file_problems(i, concept, path, clips)
    return out


def placeholder_problems(config: Any) -> list[str]:
    """An EMBEDDING run learns its embedding only from items whose caption holds its placeholder:
    captions without it anywhere (the images' own captions, written before the embedding was
    thought of) ran to the end and saved the embedding as it started. OneTrainer's wiki names
    this as the cause of samples that never change. Reads the captions, never an image."""
    if str(getattr(config.training_method, "value", config.training_method)) != "EMBEDDING":
        return []
    placeholder = str(config.embedding.placeholder or "").strip()
    from ..config.families import family_info  # noqa: PLC0415
    from ..data.errors import DataError  # noqa: PLC0415
    from ..data.scan import concept_captions  # noqa: PLC0415

    info = family_info(config.model_type)
    flags = {"clips": info is not None and info.frame_step is not None, "control": bool(info and info.control_image),
             "depth": bool(info and info.depth_maps)}
    trained = [c for c in config.concepts if c.enabled and str(getattr(c.type, "value", c.type)) != "VALIDATION"]
    names, items = [], 0
    for concept in trained:
        if tuple(Path(concept.path).expanduser().parts[-2:]) == DEMO_FOLDER:
            return []
        try:
            captions = concept_captions(concept, **flags)
        except (DataError, OSError, ValueError):
            return []  # (concept_problems names it)
        if any(placeholder in caption for item in captions for caption in item):
            return []
        names.append(concept.name or Path(concept.path).name)
        items += len(captions)
    if not placeholder or not items:
        return []
    return [f"embedding.placeholder: '{placeholder}' is in none of the captions of the {items} item(s) of "
            f"{', '.join(repr(n) for n in names)}: an embedding learns only from images whose caption holds its placeholder, so "
            f"this run would save it as it started. Write it into the captions (e.g. 'a photo of {placeholder}'), or give a "
            "concept a Prompt file whose lines hold it (the concept's Prompt source 'concept')"]


def _read_by_run(config: Any, concept: Any) -> bool:
    """Does the run read this concept's images (data/prepare.py, training/validation.py)?"""
    kind = str(getattr(concept.type, "value", concept.type))
    return kind in ("STANDARD", "PRIOR_PREDICTION") or (kind == "VALIDATION" and bool(getattr(config, "validation", False)))


def _has_subfolder(folder: Path) -> bool:
    try:
        return any(p.is_dir() and not p.name.startswith(".") for p in folder.iterdir())
    except OSError:
        return False


def _has_image(folder: Path, recursive: bool, clips: bool = False) -> bool:
    """Any image (with `clips`, or clip) the data scan would take (data/scan.py's rule), stopping at
    the first: an empty folder failed the run after its model had loaded, with a traceback on the page."""
    from ..data.images import is_image_name, is_mask_name  # noqa: PLC0415
    from ..data.video import is_video_name  # noqa: PLC0415

    def taken(name: str) -> bool:
        return (is_image_name(name) and not is_mask_name(name)) or (clips and is_video_name(name))

    try:
        for _root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".")] if recursive else []
            if any(not n.startswith(".") and taken(n) for n in files):
                return True
    except (OSError, ValueError):
        return True  # unreadable here: the scan names the file
    return False


def _unread_kinds(folder: Path, recursive: bool) -> list[str]:
    """The extensions of the pictures in `folder` that are not read (.jxl, .psd, ...), sorted."""
    from ..config.media_files import UNREAD_IMAGE_EXTENSIONS  # noqa: PLC0415

    found: set[str] = set()
    try:
        for _root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".")] if recursive else []
            found.update(Path(n).suffix.lower() for n in files if Path(n).suffix.lower() in UNREAD_IMAGE_EXTENSIONS)
    except (OSError, ValueError):
        return []
    return sorted(found)


def _prompt_file_problems(i: int, concept: Any, folder: Path, clips: bool = False) -> list[str]:
    """Captions from one file: prompt source 'concept''s prompt file, and with 'sample' a Captions
    file that is set, must exist (the Captions file also be read and name some of the folder's files)."""
    text = getattr(concept, "text", None)
    source = str(getattr(text, "prompt_source", "sample"))
    field, what = {"concept": ("prompt_path", "prompt file"), "sample": ("captions_file", "captions file")}.get(source, ("", ""))
    raw = str(getattr(text, field, "") or "").strip() if field else ""
    if field == "prompt_path" and not raw:
        return [f"concepts[{i}].text.prompt_path: empty, with the prompt source 'concept'; choose the prompt file"]
    if not raw:
        return []
    path = Path(raw).expanduser()
    for candidate in (path, folder / path):  # relative: also beside the images (data/scan.py)
        try:
            if candidate.is_file():
                return _captions_file_read(i, concept, clips) if field == "captions_file" else []
        except (OSError, ValueError):
            pass
    return [f"concepts[{i}].text.{field}: {_shown(raw)} does not exist; choose an existing {what}"
            + (", or clear it to read the folder's own caption files" if field == "captions_file" else "")]


def _captions_file_read(i: int, concept: Any, clips: bool) -> list[str]:
    from ..data.errors import DataError  # noqa: PLC0415
    from ..data.scan import check_captions_file  # noqa: PLC0415

    try:
        check_captions_file(concept, clips)
    except DataError as err:
        return [f"concepts[{i}].text.captions_file: {err}"]
    return []


def _is_dir(path: Path) -> bool:
    """A name the system refuses (too long, ...) is no folder, not an error (found by the config fuzz)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _exists(path: Path) -> bool:
    """As _is_dir: a path the system refuses does not exist."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not _exists(path) and path.parent != path:
        path = path.parent
    return path


def writable_problem(field: str, folder: Path) -> str | None:
    """Whether `folder` (made if missing) could be written: a test file is made in its nearest
    existing folder and removed."""
    existing = folder
    longest = max((len(part.encode()) for part in folder.parts), default=0)
    if longest > NAME_MAX or len(str(folder.absolute()).encode()) > PATH_MAX:
        return f"{field}: {_shown(str(folder))} has a name longer than the file system allows ({NAME_MAX} bytes a name); choose a shorter one"
    try:
        existing = _existing_ancestor(folder)
        if not existing.is_dir():
            return f"{field}: {existing} is a file, not a folder; choose another path"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{field}: cannot write to {existing}; choose a folder you can write to"
        # as the trainer's own check does: access() says yes for root in /proc, /sys, read-only mounts
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".ot-gradio-write-test-"):
            pass
    except OSError as err:
        return f"{field}: cannot write to {existing} ({err.strerror or err}); choose a folder you can write to"
    except ValueError as err:
        return f"{field}: {_shown(str(folder))} is not a usable path ({err})"
    return None


def output_problems(config: Any, workspace: Path) -> list[str]:
    out = []
    text = (config.output_model_destination or "").strip()
    if not text:
        return ["output_model_destination: empty; enter the file (or folder) the trained model is saved to"]
    dest = Path(text).expanduser()
    name = dest.name.encode()
    prefix = config.save_filename_prefix.encode()
    step_name = len(prefix) + len(dest.stem.encode()) + STEP_EXTRA + len(dest.suffix.encode())
    if len(name) + TEMP_EXTRA > NAME_MAX or (not prefix and step_name + TEMP_EXTRA > NAME_MAX):
        allowed = NAME_MAX - TEMP_EXTRA - STEP_EXTRA
        out.append(f"output_model_destination: the file name {_shown(dest.name)} is {len(name)} bytes long; at most {allowed} fit "
                   f"(file names take {NAME_MAX} bytes, with room for step numbers and temporary files); shorten it")
    elif step_name + TEMP_EXTRA > NAME_MAX:
        out.append(f"save_filename_prefix: with it, intermediate saves of {_shown(dest.name)} get names of {step_name} bytes; "
                   f"at most {NAME_MAX - TEMP_EXTRA} fit; shorten the prefix or the output name")
    elif len(str(dest.absolute()).encode()) + TEMP_EXTRA + STEP_EXTRA > PATH_MAX:
        out.append(f"output_model_destination: the path is longer than {PATH_MAX - TEMP_EXTRA - STEP_EXTRA} bytes; choose a shorter one")
    elif _is_dir(dest) and dest.suffix:
        out.append(f"output_model_destination: {text} is a folder; give a file name such as {dest / 'model.safetensors'}")
    else:
        problem = writable_problem("output_model_destination", dest.parent)
        if problem:
            out.append(problem)
    if config.prevent_overwrites and _exists(dest):  # OneTrainer flags an existing output path and will not start
        out.append(f"output_model_destination: {_shown(text)} already exists and prevent_overwrites is on; choose another "
                   "name, move the old model away, or turn prevent_overwrites off")
    problem = writable_problem("workspace_dir", workspace)
    if problem:
        out.append(problem)
    return out


def preset_problems(config: Any) -> list[str]:
    method = str(getattr(config.training_method, "value", config.training_method))
    if method in ("LORA", "FINE_TUNE") and config.layer_filter_preset not in LAYER_PRESETS:
        return [f"layer_filter_preset: {_shown(config.layer_filter_preset)!r} is not a layer preset; choose one of "
                f"{', '.join(LAYER_PRESETS)} (or blocks, for SD 3, Flux and Z-Image)"]
    return []


def concept_folder_problems(data: dict[str, Any]) -> list[str]:
    """`concepts[i].path: ...` for each enabled concept of a config dict (not validated) whose
    folder does not exist (the demo's folder is generated at Start)."""
    out = []
    for i, concept in enumerate(data.get("concepts") or []):
        if not isinstance(concept, dict) or not concept.get("enabled", True):
            continue
        path = str(concept.get("path") or "").strip()
        if not path:
            out.append(f"concepts[{i}].path: empty: choose the folder of this concept's images")
        elif not _is_dir(Path(path)) and not path.replace("\\", "/").endswith("/".join(DEMO_FOLDER)):
            out.append(f"concepts[{i}].path: folder '{path[:200]}' does not exist")
    return out


def start_problems(config: Any, data: dict[str, Any], workspace: str | os.PathLike | None = None) -> list[str]:
    """Every problem known before the first step, for a validated `config` and its dict `data`:
    the doctor's errors, then what this machine lacks for the run (`workspace`: where its run
    folder goes, the config's workspace_dir by default)."""
    nul = nul_problems(data)
    if nul:  # the path checks below cannot look at text holding NUL
        return list(dict.fromkeys(errors(config) + nul))
    ws = Path(workspace or config.workspace_dir).expanduser()
    machine = model_problems(config) + lora_problems(config) + embedding_problems(config) + concept_problems(config) + placeholder_problems(config) + output_problems(config, ws) + preset_problems(config)
    return list(dict.fromkeys(errors(config) + machine))
