"""SimpleTuner's datasets (its `data_backend_config`, multidatabackend.json) and its LyCORIS
settings (`lycoris_config`), for config/simpletuner_import.py.

Each local `image` / `video` entry is a concept: `instance_data_dir`, `repeats` (extra passes: N
shows each image N + 1 times an epoch), `caption_strategy` (textfile: a .txt beside each image;
filename; instanceprompt: `instance_prompt` for every image), `prepend_instance_prompt`, a
`conditioning` entry named in `conditioning_data` as an edit model's control folder, and
`is_regularisation_data` as a PRIOR_PREDICTION concept (SimpleTuner trains such data towards the
base model's own prediction). Its text and image embedding caches are how it runs, not what it
trains.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .dpipe_data import DpSection, read_dataset, resolve
from .family_info import FamilyInfo
from .validation import ConfigError

# a dataset entry's keys that say how SimpleTuner caches and loads, not what it trains
DATASET_PLUMBING = {"id", "type", "dataset_type", "cache_dir_vae", "cache_dir", "text_embeds", "image_embeds", "metadata_backend",
                    "skip_file_discovery", "vae_cache_clear_each_epoch", "vae_cache_ondemand", "vae_cache_disable", "write_batch_size",
                    "default", "preserve_data_backend_cache", "scan_for_errors", "hash_filenames", "conditioning_image_embeds",
                    "source_dataset_id", "conditioning_type", "disable_validation", "aspect_bucket_alignment"}
CACHES = ("text_embeds", "image_embeds", "conditioning_image_embeds", "distillation_cache")


class StSection(DpSection):
    """A SimpleTuner table: its `"false"` strings mean "the default" (its JSON loader drops them)."""

    origin = "SimpleTuner config"

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, default)
        return default if isinstance(value, str) and value.strip().lower() == "false" else value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)


def side(resolution: Any, kind: str, field: str) -> int:
    """The side of the square area a SimpleTuner resolution trains at: `pixel_area` (its default) an
    edge of that area, `area` megapixels, `pixel` the shorter edge (whose area is at least that)."""
    try:
        value = float(resolution)
    except (TypeError, ValueError):
        raise ConfigError(f"{field}: {resolution!r} is not a resolution (SimpleTuner config)") from None
    size = int(round(math.sqrt(value * 1e6))) if kind == "area" or value < 16 else int(value)
    if size < 64:
        raise ConfigError(f"{field}: {size} px is smaller than 64 px (SimpleTuner config)")
    return size - size % 8


def examples_path(name: str, roots: list[Path]) -> tuple[str, list[Path]]:
    """SimpleTuner reads a path starting `config/examples/` from its packaged examples
    (`simpletuner/examples/` in its checkout), also from a config among them."""
    if not name.startswith("config/examples/"):
        return name, roots
    rest = name.removeprefix("config/examples/")
    found = [p.parent.parent for r in roots for p in [r, *r.parents] if p.name == "examples" and p.parent.name == "simpletuner"]
    return f"simpletuner/examples/{rest}", list(dict.fromkeys([*found, *roots]))


def datasets(name: str, roots: list[Path], top: StSection, out: dict[str, Any], notes: list[str], info: FamilyInfo,
             readable: list[Path] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The concepts of the data backend config `name`, and the keys of its entries left out."""
    name, roots = examples_path(name, roots)
    data, data_roots = read_dataset(name, roots, readable, notes, expect=(list, dict))
    if data is None:
        return [], []
    entries = data.get("datasets") if isinstance(data, dict) else data  # its web page's file: {"_metadata", "datasets"}
    if not isinstance(entries, list):
        raise ConfigError(f"data_backend_config {name}: not a list of datasets (SimpleTuner's multidatabackend.json is one)")
    entries = [e for e in entries if isinstance(e, dict) and not (e.get("disabled") or e.get("disable"))]
    conditioning = {str(e.get("id")): e for e in entries if e.get("dataset_type") == "conditioning"}
    concepts, left, sizes, frames = [], [], [], []
    for number, entry in enumerate(entries):
        r = StSection(f"datasets[{number}]", entry)
        r.plumbing = DATASET_PLUMBING | {"disabled", "disable"}
        kind = str(r.get("dataset_type") or "image")
        if kind in CACHES:
            if r.get("caption_filter_list"):
                notes.append(f"datasets[{number}].caption_filter_list: SimpleTuner rewrites captions with it; here they are read as "
                             "written")
            continue
        if kind == "conditioning":
            continue
        if kind not in ("image", "video"):
            notes.append(f"datasets[{number}]: a '{kind}' dataset is not read here")
            continue
        if str(r.get("type") or "local") != "local":
            notes.append(f"datasets[{number}]: its images are on {r.data.get('type')} ({r.data.get('dataset_name') or r.data.get('id')}); "
                         "download them and add their folder as a concept")
            continue
        concept = _concept(r, top, data_roots, notes, info, readable, conditioning)
        if concept is None:
            continue
        concepts.append(concept)
        resolution = r.get("resolution") or top.get("resolution") or 1024
        kind_of_size = str(r.get("resolution_type") or top.get("resolution_type") or "pixel_area")
        sizes.append(side(resolution, kind_of_size, f"{r.name}.resolution"))
        if kind_of_size == "pixel":
            notes.append(f"{r.name}.resolution_type 'pixel': SimpleTuner sets the shorter side to {resolution} px; here the area of "
                         f"a {sizes[-1]} px square")
        if r.get("minimum_image_size") or top.data.get("minimum_image_size"):
            notes.append(f"{r.name}.minimum_image_size: SimpleTuner leaves out smaller images; here every image trains (scaled up)")
        video = r.get("video") if isinstance(r.get("video"), dict) else {}
        if info.frame_step and (kind == "video" or video):
            try:
                frames.append(int(float(video.get("num_frames") or 150)))
            except (TypeError, ValueError):
                raise ConfigError(f"{r.name}.video.num_frames: {video.get('num_frames')!r} is not a number of frames (SimpleTuner "
                                  "config)") from None
        left += r.left()
    if sizes:
        out["resolution"] = ",".join(str(s) for s in sorted(set(sizes)))
        if len(set(sizes)) > 1:
            notes.append(f"resolution: SimpleTuner trains each dataset at its own ({sorted(set(sizes))}); here each step at one of them")
    if frames:
        out["frames"] = str(max(frames))
    return concepts, left


def _concept(r: StSection, top: StSection, roots: list[Path], notes: list[str], info: FamilyInfo, readable: list[Path] | None,
             conditioning: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    folder = str(r.get("instance_data_dir") or "").strip()
    if not folder:
        notes.append(f"{r.name}: no instance_data_dir; add its folder as a concept")
        return None
    path = Path(resolve(folder, roots, readable))
    repeats = r.number("repeats", 0.0)
    if repeats < 0:
        raise ConfigError(f"{r.name}.repeats: {repeats:g} is not a number of repeats (SimpleTuner config)")
    strategy = str(r.get("caption_strategy") or top.get("caption_strategy") or "filename").replace("instance_prompt", "instanceprompt")
    prompt = r.get("instance_prompt") or top.get("instance_prompt") or ""
    prompt = str(prompt[0] if isinstance(prompt, list) and prompt else prompt).strip()
    text: dict[str, Any] = {}
    if strategy == "instanceprompt" or r.flag("only_instance_prompt", top.flag("only_instance_prompt")):
        text["default_caption"] = prompt  # (an image's own .txt, which SimpleTuner ignores, would win here)
        notes.append(f"{r.name}: every image trains on its instance_prompt there; here on it where the image has no caption file")
    elif strategy == "filename":
        text.update(prompt_source="filename", filename_spaces=True)  # SimpleTuner reads a file name's underscores as spaces
    elif strategy != "textfile":
        notes.append(f"{r.name}.caption_strategy '{strategy}': here captions are .txt files beside the images")
    if r.flag("disable_multiline_split", top.flag("disable_multiline_split")):  # a caption file is one caption
        text["caption_lines"] = "WHOLE"
    if r.flag("prepend_instance_prompt", top.flag("prepend_instance_prompt")) and prompt and strategy != "instanceprompt":
        text["caption_prefix"] = prompt
    crop = r.flag("crop")
    image: dict[str, Any] = {"enable_crop_jitter": crop and str(r.get("crop_style") or "random") == "random"}
    concept: dict[str, Any] = {"name": str(r.data.get("id") or path.name), "path": str(path), "balancing": float(repeats) + 1.0,
                               "text": text, "image": image}
    if crop and str(r.get("crop_aspect") or "square") == "square":
        notes.append(f"{r.name}: crop_aspect 'square' crops every image square there; here Aspect ratio bucketing is off")
        concept["_square"] = True
    if r.flag("is_regularisation_data") or r.flag("is_regularization_data"):
        concept["type"] = "PRIOR_PREDICTION"  # trained towards the base model's own prediction, as SimpleTuner's teacher
    for key in ("conditioning_data",):
        ids = r.get(key)
        ids = [ids] if isinstance(ids, (str, int)) and not isinstance(ids, bool) else list(ids) if isinstance(ids, list) else []
        sources = [conditioning[i] for i in map(str, ids) if i in conditioning]
        if sources and info.name == "Flux.2":
            raise ConfigError(f"{r.name}.conditioning_data: this SimpleTuner config trains Flux.2 on reference images, which has no "
                              "counterpart here (Qwen-Image-Edit is the image-editing model type here); nothing was imported")
        if sources and info.control_image and len(sources) == 1 and sources[0].get("instance_data_dir"):
            image["control_folder"] = resolve(str(sources[0]["instance_data_dir"]), roots, readable)
        elif ids:
            notes.append(f"{r.name}.conditioning_data: one folder of source images is read here, for an image-editing model (its "
                         "Control image folder); not carried over")
    if r.number("probability", 1.0) != 1.0:
        r.used.discard("probability")
    for key in ("resolution", "resolution_type", "crop_style", "crop_aspect", "minimum_image_size", "caption_strategy",
                "instance_prompt", "prepend_instance_prompt", "only_instance_prompt", "video", "is_regularization_data"):
        r.get(key)
    return concept


# LyCORIS's algorithms -> our adapter type
ALGOS = {"lora": "LORA", "locon": "LORA", "loha": "LOHA", "lokr": "LOKR"}


def lycoris(name: str, roots: list[Path], out: dict[str, Any], notes: list[str], readable: list[Path] | None) -> None:
    """SimpleTuner's `lycoris_config` JSON: `algo`, `linear_dim`, `linear_alpha` (whole numbers
    there), `factor`, `full_matrix`, and its `apply_preset` targets (Attention and FeedForward: the
    attention and feed-forward layers)."""
    name, roots = examples_path(name, roots)
    found: list[str] = []
    data, _ = read_dataset(name, [*roots, *(r / "config" for r in roots)], readable, found)
    if data is None:  # SimpleTuner refuses to start without it
        raise ConfigError(f"lycoris_config {name}: not found from the config's folder; it says which LyCORIS adapter to train. Put "
                          "it beside the config, or choose the adapter on the LoRA tab after importing without lora_type lycoris")
    r = StSection("lycoris_config", data)
    algo = str(r.get("algo") or "lokr").lower()
    if algo not in ALGOS:
        raise ConfigError(f"lycoris_config.algo: '{algo}' has no counterpart here ({', '.join(ALGOS)} do)")
    dim, alpha = int(r.number("linear_dim", 4)), int(r.number("linear_alpha", 1))
    alpha = alpha or dim  # (whole numbers there; LyCORIS reads 0 as alpha = dim)
    out.update(peft_type=ALGOS[algo], lora_alpha=float(alpha))
    preset = r.get("apply_preset") if isinstance(r.get("apply_preset"), dict) else {}
    per_class = preset.get("module_algo_map") if isinstance(preset.get("module_algo_map"), dict) else {}
    factor = r.number("factor", -1, int)
    for name_ in ("Attention", *per_class):  # the attention layers' own factor (most layers), as LyCORIS gives it them
        if isinstance(per_class.get(name_), dict) and per_class[name_].get("factor") is not None:
            factor = int(per_class[name_]["factor"])
            break
    if algo == "lokr":
        full = r.flag("full_matrix")
        out.update(lokr_dim=dim if not full else 10000, lokr_decompose_factor=factor, lokr_full_matrix=full)
    else:
        out["lora_rank"] = dim
    if len({str(v.get("factor")) for v in per_class.values() if isinstance(v, dict)}) > 1:
        notes.append(f"lycoris_config.apply_preset.module_algo_map: one factor for every layer here ({factor})")
    # LyCORIS picks modules by their class names in SimpleTuner's model code: its own default is every layer
    targets = [str(t) for t in preset.get("target_module") or []]
    attention = any("attention" in t.lower() or "attn" in t.lower() for t in targets)
    feed_forward = any(w in t.lower() for t in targets for w in ("feedforward", "mlp", "swiglu", "glu", "block"))
    if not targets or "Linear" in targets:
        out["layer_filter_preset"] = "full"
    elif attention and feed_forward:
        out["layer_filter_preset"] = "attn-mlp"
    elif attention:
        out["layer_filter_preset"] = "attn-only"
    else:
        out["layer_filter_preset"] = "attn-mlp"
        notes.append(f"lycoris_config.apply_preset.target_module {targets}: here the attention and feed-forward layers")
    if targets:
        notes.append(f"lycoris_config.apply_preset.target_module {targets}: SimpleTuner's LyCORIS matches these class names of its "
                     f"own model code; here the Layer preset is {out['layer_filter_preset']} (check it on the Training tab, Layers)")
    if r.number("multiplier", 1.0) != 1.0:
        r.used.discard("multiplier")
    r.get("bypass_mode")
    for key in r.left():
        notes.append(f"{key}: not carried over")
