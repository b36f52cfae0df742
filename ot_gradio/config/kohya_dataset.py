"""kohya's datasets as concepts, and how long kohya trains on them: `train_data_dir` /
`reg_data_dir` `<repeats>_<name>` folders, sd-scripts' dataset TOML, and max_train_epochs /
max_train_steps / kohya_ss's epoch turned into epochs of the imported concepts."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .balancing_count import epoch_count
from .families import family_info
from .json_file import may_read, read_json
from .kohya_reader import KohyaReader, changes_something, flag, is_set
from .media_files import CAPTION_EXTENSIONS, IMAGE_EXTENSIONS, kohya_repeats
from .metadata_file import metadata_folder, metadata_rows
from .resolution import parse_resolutions
from .validation import ConfigError

# what a dataset config's general, dataset and subset tables set that is carried over (or said)
DATASET_KEYS = frozenset({"image_dir", "num_repeats", "is_reg", "class_tokens", "shuffle_caption", "keep_tokens", "flip_aug",
                          "random_crop", "alpha_mask", "caption_prefix", "caption_suffix", "caption_extension", "metadata_file", "caption_separator",
                          "caption_tag_dropout_rate", "caption_dropout_rate", "keep_tokens_separator", "resolution", "batch_size",
                          "enable_bucket", "bucket_no_upscale", "bucket_reso_steps", "min_bucket_reso", "max_bucket_reso",
                          # musubi-tuner's: a dataset is its folder; its latent cache folder is its own business
                          "image_directory", "video_directory", "image_jsonl_file", "video_jsonl_file", "cache_directory", "target_frames", "frame_extraction",
                          "max_frames", "control_directory", "enable_wildcard", "frame_sample", "source_fps"})
# musubi-tuner's target frame rate per model (its VideoDataset.TARGET_FPS_*), what source_fps clips are taken at
MUSUBI_FPS = {"WAN_2_1": 16.0, "WAN_2_1_I2V": 16.0, "WAN_2_2_TI2V_5B": 16.0, "WAN_2_2_T2V_A14B": 16.0, "WAN_2_2_I2V_A14B": 16.0,
              "HUNYUAN_VIDEO": 24.0}
MUSUBI_SOURCES = ("image_directory", "video_directory", "image_jsonl_file", "video_jsonl_file")  # a musubi-tuner dataset's images
BUCKET_KEYS = {"bucket_reso_steps": ("bucket_resolution_step", 64), "min_bucket_reso": ("min_bucket_resolution", 256),
               "max_bucket_reso": ("max_bucket_resolution", 1024)}  # ours, and sd-scripts' default
PAGE_BUCKETS = {"max_bucket_reso": 2048}  # kohya_ss's page's own defaults, where they differ
BUCKET_SETTINGS = ("enable_bucket", "bucket_no_upscale", *BUCKET_KEYS)
KOHYA_STEPS = 1600  # sd-scripts' max_train_steps when a config sets neither it nor max_train_epochs


def buckets(get: Callable[[str], Any], out: dict[str, Any], notes: list[str], page: bool = False,
            other_sizes: tuple[str, ...] = ()) -> None:
    """kohya's bucketing: `enable_bucket` (sd-scripts buckets only when told; kohya_ss's `page`
    always says), `bucket_no_upscale`, and, where it buckets, kohya's own buckets
    (`bucket_reso_steps`, `min_bucket_reso`, `max_bucket_reso`, sd-scripts' 64, 256 and 1024 where
    unset; a page config's unset ones are its page's, whose largest side is 2048). A step that is
    no multiple of the model's becomes the next one that is; a largest side below the resolution
    or a smallest one above it (which sd-scripts refuses; `other_sizes`: the other datasets') is
    moved to it; each with a note."""
    given = {key: get(key) for key in BUCKET_SETTINGS}
    if given["enable_bucket"] is not None or not page:
        out["aspect_ratio_bucketing"] = flag(given["enable_bucket"])
        if given["enable_bucket"] is None:
            notes.append("enable_bucket is not set, so sd-scripts trains every image at the resolution (cropped), as this "
                         "import does: turn on Data → Aspect ratio bucketing for buckets")
    if given["bucket_no_upscale"] is not None:
        out["bucket_no_upscale"] = flag(given["bucket_no_upscale"])
    if not out.get("aspect_ratio_bucketing", True):
        return
    values = {}
    for key, (ours, default) in BUCKET_KEYS.items():
        try:
            values[ours] = int(float(given[key])) if is_set(given[key]) else PAGE_BUCKETS.get(key, default) if page else default
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: {given[key]!r} is not a number (kohya_ss config)") from None
    info = family_info(out.get("model_type", ""))
    need, step = (info.bucket_step if info else None) or 8, values["bucket_resolution_step"]
    if step < 1 or step % need:
        values["bucket_resolution_step"] = max(need, step + (-step) % need)
        notes.append(f"bucket_reso_steps {step}: {values['bucket_resolution_step']} px here (this model's image sides are "
                     f"multiples of {need} px)")
    try:
        sides = [side for text in (str(out.get("resolution", "512")), *other_sizes) for size in parse_resolutions(text)
                 for side in size]
    except ValueError:
        sides = []
    if sides and values["max_bucket_resolution"] < max(sides):
        notes.append(f"max_bucket_reso {values['max_bucket_resolution']}: {max(sides)} here, the resolution's longest side "
                     "(sd-scripts refuses a smaller one)")
        values["max_bucket_resolution"] = max(sides)
    if sides and values["min_bucket_resolution"] > min(sides):
        notes.append(f"min_bucket_reso {values['min_bucket_resolution']}: {min(sides)} here, the resolution's shortest side "
                     "(sd-scripts refuses a larger one)")
        values["min_bucket_resolution"] = min(sides)
    out.update(values)


def run_length(r: KohyaReader, out: dict[str, Any], concepts: list[dict[str, Any]] | None, readable: list[Path] | None,
               notes: list[str]) -> None:
    """How long kohya trains: `max_train_epochs`, else `max_train_steps` (sd-scripts: 1600 when
    neither is set), and kohya_ss's page turns its `epoch` into the steps only when it has no steps
    and no dataset TOML. Steps become the epochs that hold them, counted from the concepts' images
    at the batch size and accumulation (kohya stops at the step, mid-epoch; here the last epoch ends)."""
    r.get("epoch")  # read here whatever it means
    if r.given("max_train_epochs"):  # it wins over max_train_steps
        out["epochs"] = r.number("max_train_epochs", int)
        r.get("max_train_steps")
        return
    steps = r.number("max_train_steps", int) if r.given("max_train_steps") else 0
    if not steps and isinstance(r.data.get("datasets"), list):  # a dataset TOML by itself says nothing of it
        return
    if not steps and r.given("epoch") and not r.given("dataset_config"):
        out["epochs"] = r.number("epoch", int)
        return
    told = f"max_train_steps {steps}" if steps else f"no max_train_steps or max_train_epochs (sd-scripts trains {KOHYA_STEPS} steps then)"
    steps_as_epochs(steps or KOHYA_STEPS, told, "kohya", concepts, out, readable, notes)


def steps_as_epochs(steps: int, told: str, trainer: str, concepts: list[dict[str, Any]] | None, out: dict[str, Any],
                    readable: list[Path] | None, notes: list[str], *, stated: int | None = None, cap: int | None = None) -> None:
    """Another trainer's run of `steps` optimizer steps as the epochs of the imported concepts that
    hold them (it stops at step `stated`, default `steps`, mid-epoch; here the last epoch ends), at
    most `cap`; said in `notes` after `told`, also when the images could not be counted."""
    per_epoch = steps_per_epoch(concepts, out, readable)
    if per_epoch is None:
        notes.append(f"{told}: Epochs stays at this trainer's default, as the images were not counted: set Epochs to "
                     f"{steps} x batch size x accumulation / the images an epoch shows")
        return
    epochs = max(1, -(-steps // per_epoch))
    out["epochs"] = min(cap, epochs) if cap else epochs
    notes.append(f"{told}: {out['epochs']} epochs of about {per_epoch} steps here ({trainer} stops at step {stated or steps}; "
                 "here the epoch it falls in ends)")


def steps_per_epoch(concepts: list[dict[str, Any]] | None, out: dict[str, Any], readable: list[Path] | None) -> int | None:
    """Optimizer steps an epoch of the imported concepts takes; None when an image folder could not be counted."""
    if not concepts:
        return None
    samples = 0
    for concept in concepts:  # as the trainer counts them (OneTrainer's rounding down)
        strategy = concept.get("balancing_strategy") or "REPEATS"
        if strategy == "SAMPLES":
            samples += epoch_count(1, float(concept["balancing"]), strategy)  # (SAMPLES: whatever the image count)
        elif (count := _image_count(Path(concept["path"]), readable)) is None:
            return None
        else:
            samples += epoch_count(count, float(concept["balancing"]), strategy)
    batches = -(-samples // int(out.get("batch_size", 1)))
    return max(1, -(-batches // int(out.get("gradient_accumulation_steps", 1)))) if samples else None


def _training_options(r: KohyaReader) -> dict[str, Any]:
    """The dataset options a training config sets for every subset (sd-scripts reads them below a
    dataset config's `[general]`)."""
    options = {key: r.get(key) for key in ("shuffle_caption", "keep_tokens", "flip_aug", "caption_tag_dropout_rate", "caption_extension",
                                           "keep_tokens_separator", "random_crop", "alpha_mask", "caption_prefix",
                                           "caption_suffix", "enable_wildcard", "caption_separator")
               if r.data.get(key) is not None}
    if r.given("dataset_repeats"):  # sd-scripts' num_repeats of a subset that sets none (in_json's, the fine-tune page's)
        options["num_repeats"] = r.number("dataset_repeats", int)
    r.get("dataset_repeats")  # (read either way: a folder's own repeats win)
    return options


def _beside(name: str, base_dir: str | Path | None, readable: list[Path] | None) -> str:
    """A relative metadata file where the config is, if it is there and may be read (sd-scripts
    reads it from the folder it runs in); else as given."""
    path = Path(str(name)).expanduser()
    if not path.is_absolute() and base_dir is not None and may_read(Path(base_dir) / path, readable) and (
            Path(base_dir) / path).is_file():
        return str(Path(base_dir) / path)
    return str(name)


def _gui_metadata(r: KohyaReader, readable: list[Path] | None) -> str | None:
    """kohya_ss's fine-tune page's metadata file, `train_dir`/meta_lat.json (use_latent_files) or
    meta_cap.json, as it passes it as in_json, where the page does not make it anew from the
    caption files before each run (*Generate caption metadata* off); None where it does (the
    caption files are read then) or the file is not there."""
    made = [r.get(key) for key in ("generate_caption_database", "create_caption") if key in r.data]
    train_dir = r.get("train_dir")
    if not made or any(flag(value) for value in made):
        return None
    latent = str(r.get("use_latent_files") or "").lower() in ("yes", "true")
    name = r.get("latent_metadata_filename" if latent else "caption_metadata_filename")
    if not train_dir or not name:
        return None
    path = Path(str(train_dir)).expanduser() / str(name)
    return str(path) if may_read(path, readable) and path.is_file() else None


def folder_concepts(r: KohyaReader, notes: list[str], readable: list[Path] | None,
                    base_dir: str | Path | None = None) -> list[dict[str, Any]] | None:
    """`train_data_dir`'s `<repeats>_<name>` folders (and `reg_data_dir`'s); a folder outside
    `readable` is not listed: it is one concept, said in a note."""
    subsets: list[dict[str, Any]] = []
    found = False
    if r.given("in_json"):  # sd-scripts' fine-tuning method: one folder's images, their captions in the metadata file
        found = True
        subsets.append({"image_dir": r.get("train_data_dir"), "metadata_file": _beside(r.get("in_json"), base_dir, readable), "is_reg": False})
        if r.given("reg_data_dir"):
            notes.append("reg_data_dir is not read with in_json (sd-scripts' fine-tuning method reads none either)")
    for key, regularisation in () if found else (("train_data_dir", False), ("reg_data_dir", True)):
        root = r.get(key)
        if not root:
            continue
        found = True
        folder = Path(str(root)).expanduser()
        listed = may_read(folder, readable)
        try:
            subfolders = sorted(p for p in folder.iterdir() if p.is_dir()) if listed and folder.is_dir() else []
        except OSError:
            subfolders = []
        named = [(p, repeats) for p in subfolders if (repeats := kohya_repeats(p.name))]
        if not listed:
            notes.append(f"{key} '{root}' is outside the folders this page may list: it is one concept with Balancing 1; add "
                         "its `<repeats>_<name>` folders as concepts, or import the file from the command line")
        elif not named:
            notes.append(f"{key} '{root}' has no `<repeats>_<name>` folder here: it is one concept with Balancing 1")
        subsets += [{"image_dir": str(path), "num_repeats": repeats[0] if repeats else 1, "is_reg": regularisation,
                     "class_tokens": repeats[1] if repeats else None} for path, repeats in named or [(folder, None)]]
    if r.given("image_folder") and not r.given("in_json"):  # kohya_ss's fine-tune page: one folder, `dataset_repeats` times an epoch
        found = True
        subsets.append({"image_dir": str(r.get("image_folder")), "is_reg": False,
                        **({"metadata_file": gui} if (gui := _gui_metadata(r, readable)) else {})})
    options = _training_options(r)
    return _to_concepts([{**options, **subset} for subset in subsets], r, notes, readable) if found else None


def dataset_config(r: KohyaReader, out: dict[str, Any], notes: list[str], readable: list[Path] | None,
                    base_dir: str | Path | None) -> list[dict[str, Any]] | None:
    """sd-scripts' dataset TOML (`dataset_config`)."""
    name = str(r.get("dataset_config"))
    path = Path(name).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not may_read(path, readable):
        notes.append(f"dataset_config {name} is outside the folders this page may read: add its folders as concepts")
        return None
    try:
        data = read_json(path, "dataset_config")
    except ConfigError as err:
        notes.append(f"{err}: add its folders as concepts")
        return None
    return dataset_concepts(data, out, notes, r, readable, path.parent)


def dataset_concepts(data: dict[str, Any], out: dict[str, Any], notes: list[str], r: KohyaReader,
                      readable: list[Path] | None, base_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Each `[[datasets.subsets]]` a concept, its options those of the training config, then
    `[general]`, the dataset, then the subset (sd-scripts' order); the first dataset's resolution,
    batch size and buckets."""
    general = data.get("general") if isinstance(data.get("general"), dict) else {}
    datasets = [d for d in data.get("datasets") or [] if isinstance(d, dict)]
    training = _training_options(r)
    subsets: list[dict[str, Any]] = []
    first_size = None

    def effective(dataset: dict[str, Any], key: str) -> Any:  # the dataset's, then [general]'s, then the training config's
        return dataset[key] if key in dataset else general[key] if key in general else r.data.get(key)

    musubi = bool(datasets) and not any(d.get("subsets") for d in datasets) and any(
        d.get(key) for d in datasets for key in MUSUBI_SOURCES)  # musubi-tuner's: each dataset is its folder or its JSONL file
    for index, dataset in enumerate(datasets):
        merged = {**training, **general, **{k: v for k, v in dataset.items() if k != "subsets"}}
        if musubi:
            merged.setdefault("resolution", [960, 544])  # musubi-tuner's default
        size = _size(merged.get("resolution"))
        if index == 0:
            first_size = size
            if size:
                out["resolution"] = size
            if isinstance(merged.get("batch_size"), int):
                out["batch_size"] = merged["batch_size"]
        elif size and size != first_size:  # a dataset of its own size: its concepts train at it
            merged["resolution_override"] = size
        if index and isinstance(merged.get("batch_size"), int) and merged["batch_size"] != out.get("batch_size", 1):
            notes.append(f"dataset {index + 1} sets batch_size {merged['batch_size']}: here every dataset trains at the first's, "
                         f"{out.get('batch_size', 1)}")  # (sd-scripts' and musubi-tuner's default: 1)
        if index and (differ := [k for k in BUCKET_SETTINGS if effective(dataset, k) != effective(datasets[0], k)]):
            notes.append(f"dataset {index + 1} sets its own {', '.join(differ)}: here every dataset is bucketed as the first")
        own = [subset for subset in dataset.get("subsets") or [] if isinstance(subset, dict)]
        if not own and (folder := dataset.get("image_directory") or dataset.get("video_directory")):  # musubi-tuner's
            own = [{"image_dir": folder, "caption_lines": "WHOLE",  # musubi-tuner reads a caption file whole, and
                    "media": "CLIPS" if dataset.get("video_directory") else "IMAGES",  # its folder's one kind of file
                    **({"control_folder": dataset["control_directory"]} if dataset.get("control_directory") else {})}]
            _musubi_frames(dataset, general, out, notes)
        elif not own and (jsonl := dataset.get("image_jsonl_file") or dataset.get("video_jsonl_file")):  # its captions file:
            own = [{"metadata_file": jsonl, "caption_lines": "WHOLE",  # the images or clips it names, with their captions
                    "media": "CLIPS" if dataset.get("video_jsonl_file") else "IMAGES"}]
            _musubi_frames(dataset, general, out, notes)
            _musubi_rows(Path(_beside(jsonl, base_dir, readable)).expanduser(), readable, notes)
        if len({bool(subset.get("metadata_file")) for subset in own}) > 1:
            notes.append(f"dataset {index + 1} mixes subsets with and without metadata_file, which sd-scripts refuses; here "
                         "each is a concept")
        subsets += [{**merged, **subset, **({"metadata_file": _beside(subset["metadata_file"], base_dir, readable)}
                                            if subset.get("metadata_file") else {})} for subset in own]
    # the first dataset's, then [general]'s, then the training config's (sd-scripts' fallback, read either way)
    others = tuple({str(s["resolution_override"]) for s in subsets if s.get("resolution_override")})
    for key in BUCKET_SETTINGS:
        r.get(key)
    if musubi:  # musubi-tuner's buckets: this trainer's aspect buckets at the model's step; none unless enable_bucket,
        first = datasets[0]  # but for clips, which it always buckets, upscaling too (its video caching ignores both)
        videos = [d for d in datasets if d.get("video_directory") or d.get("video_jsonl_file")]
        images = [d for d in datasets if d not in videos]
        out["aspect_ratio_bucketing"] = bool(videos) or bool(effective(first, "enable_bucket"))
        # an image dataset's own no-upscale holds (one setting for the run); clips alone: none, as there
        out["bucket_no_upscale"] = bool(images) and bool(effective(images[0], "bucket_no_upscale"))
        if videos and images and not all(effective(d, "enable_bucket") for d in images):
            notes.append("the image datasets set no enable_bucket: musubi-tuner buckets their images by aspect only for clips; "
                         "here the images are bucketed too (one setting for the run)")
        if videos and out["bucket_no_upscale"]:
            notes.append("bucket_no_upscale: musubi-tuner upscales clips to their buckets whatever it says; here it holds for the "
                         "clips too (one setting for the run)")
        if out["aspect_ratio_bucketing"]:
            _musubi_buckets(out, others)
    else:
        buckets(lambda key: effective(datasets[0] if datasets else {}, key), out, notes, page=r.page, other_sizes=others)
    unread = sorted({k for part in (general, *datasets, *(s for d in datasets for s in d.get("subsets") or [] if isinstance(s, dict)))
                     for k, v in part.items() if k not in DATASET_KEYS and k != "subsets" and changes_something(k, v)})
    if unread:
        notes.append("the dataset config sets, not carried over: " + ", ".join(unread))
    _caption_dropout(subsets, out, notes)
    return _to_concepts(subsets, r, notes, readable)


def _musubi_buckets(out: dict[str, Any], other_sizes: tuple[str, ...]) -> None:
    """musubi-tuner's buckets (its BucketSelector) are kohya's around the resolution's area: widths in
    16 px steps from half the area's side, each with the tallest height within the area, both ways
    round. Here kohya's buckets in that step (the model's multiple where larger) between that smallest
    side and the largest it makes; at step 0 a "WxH" resolution would be one fixed size, as OneTrainer's."""
    info = family_info(out.get("model_type", ""))
    step = math.lcm(16, (info.bucket_step if info else None) or 8)
    try:
        sizes = [size for text in (str(out.get("resolution", "512")), *other_sizes) for size in parse_resolutions(text)]
    except ValueError:
        return  # said where the resolution is checked
    lows = [max(step, math.isqrt(h * w) // 2 // step * step) for h, w in sizes]
    highs = [max(h, w, h * w // low // step * step) for (h, w), low in zip(sizes, lows, strict=True)]
    out.update(bucket_resolution_step=step, min_bucket_resolution=min(lows), max_bucket_resolution=max(highs))


def _musubi_frames(dataset: dict[str, Any], general: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """musubi-tuner's `target_frames` (the clip lengths it cuts, the longest here: Frames) and its
    `frame_extraction` (here each clip's frames are read from its start, or from a random window)."""
    if not (dataset.get("video_directory") or dataset.get("video_jsonl_file")):
        return
    frames = dataset.get("target_frames", general.get("target_frames", [1]))  # musubi-tuner's default: 1-frame clips
    lengths = [int(f) for f in (frames if isinstance(frames, list) else [frames] if frames else []) if str(f).strip().isdigit()]
    extraction = str(dataset.get("frame_extraction", general.get("frame_extraction")) or "head")
    if extraction == "full":  # each whole clip, up to max_frames
        lengths = [int(dataset.get("max_frames", general.get("max_frames", 129)))]
    if lengths and max(lengths) > int(str(out.get("frames") or 0) or 0):
        out["frames"] = str(max(lengths))
    if len(set(lengths)) > 1:
        notes.append(f"target_frames {sorted(set(lengths))}: musubi-tuner trains a clip once for each length it is long enough "
                     f"for, and leaves out one shorter than all; here each clip trains once, with up to {max(lengths)} frames "
                     "(Frames), a shorter one with the frames it has")
    if (fps := MUSUBI_FPS.get(str(out.get("model_type") or ""))) is not None:
        out["frame_rate"] = fps  # musubi-tuner's target rate for the model; without source_fps it takes every frame
        if dataset.get("source_fps", general.get("source_fps")) is None and not any("source_fps" in n for n in notes):
            notes.append(f"a video dataset without source_fps: musubi-tuner trains every frame of a clip whatever its rate (a "
                         f"30 fps clip plays slowed down at the model's {fps:g} fps); here clips are taken at up to {fps:g} "
                         "frames a second (Clip frame rate)")
    if "target_frames" not in dataset and "target_frames" not in general and extraction != "full":
        notes.append("a video dataset without target_frames: musubi-tuner cuts 1-frame clips then, and so do these Frames")
    if extraction == "uniform" and int(dataset.get("frame_sample", general.get("frame_sample", 1)) or 1) == 1:
        extraction = "head"  # musubi-tuner's own change (one uniform sample is the head)
    windows = extraction not in ("head", "full")  # chunk / slide / uniform: several windows of each clip an epoch there
    if "random_clip_window" in out and out["random_clip_window"] != windows:  # (one setting for the run here)
        notes.append("the video datasets take their frames differently (frame_extraction); here every clip trains one "
                     "window at a random start each time it is shown")
        out["random_clip_window"] = True
    elif "random_clip_window" not in out:
        out["random_clip_window"] = windows  # head / full: each clip's first frames (its whole, up to max_frames), as there
    if windows:
        notes.append(f"frame_extraction '{extraction}': musubi-tuner trains several windows of each clip every epoch; here "
                     "one window at a random start each time a clip is shown (Random clip window)")


def _musubi_rows(path: Path, readable: list[Path] | None, notes: list[str]) -> None:
    """What a musubi-tuner JSONL dataset holds that its Captions file does not carry: control images
    named per row, clips kept as folders of frames, and a file named in several rows (each row an
    item there, one item drawing among their captions here)."""
    rows = metadata_rows(path, readable) or []
    names = [name for name, _ in rows]
    if any(key.startswith("control_path") for _, row in rows for key in row):
        notes.append(f"{path.name}: its rows' control_path images are not carried over; put them in a Control image folder, "
                     "each named as its image")
    if any(name and may_read(Path(name), readable) and Path(name).is_dir() for name in names):
        notes.append(f"{path.name}: a clip kept as a folder of frames is not read here; make it a video file")
    if len(set(names)) < len(names):
        notes.append(f"{path.name}: a file named in several rows trains once an epoch here, drawing among their captions "
                     "(there: once a row)")


def _size(value: Any) -> str | None:
    """A dataset's resolution (512, or [768, 512]) as this trainer writes one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return str(int(value[0])) if value[0] == value[1] else f"{int(value[0])}x{int(value[1])}"
    return None


def _caption_dropout(subsets: list[dict[str, Any]], out: dict[str, Any], notes: list[str]) -> None:
    """A dataset's `caption_dropout_rate` (kohya: per subset) as the whole caption's dropout (here
    one rate for the run)."""
    rates = sorted({float(s["caption_dropout_rate"]) for s in subsets if is_set(s.get("caption_dropout_rate"))})
    if not rates:
        return
    out["caption_dropout_probability"] = rates[-1]
    if len(rates) > 1 or len(rates) < len(subsets):
        notes.append(f"caption_dropout_rate differs between the subsets: here {rates[-1]} for every concept")


def _to_concepts(subsets: list[dict[str, Any]], r: KohyaReader, notes: list[str], readable: list[Path] | None) -> list[dict[str, Any]]:
    """kohya's subsets (image_dir, num_repeats, is_reg, shuffle_caption, keep_tokens, flip_aug,
    class_tokens) as concepts. kohya repeats the regularisation images up to the training images'
    count times their repeats, and weighs their loss by `prior_loss_weight`."""
    weight = r.number("prior_loss_weight") if r.given("prior_loss_weight") else 1.0
    concepts, train_total, counted = [], 0, True
    for number, subset in enumerate(subsets):
        try:
            concept = _subset_concept(subset, notes, weight, readable)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"dataset subset {number + 1} ({subset.get('image_dir')}): {err}") from None
        if concept is None:
            continue
        if not concept["type_reg"]:
            count = _image_count(Path(concept["path"]), readable)
            counted = counted and count is not None
            train_total += (count or 0) * int(concept["balancing"])
        concepts.append(concept)
    for concept in concepts:
        if concept.pop("type_reg") and counted and train_total:
            concept.update(balancing=float(train_total), balancing_strategy="SAMPLES")
    if any(c["name"].startswith("reg: ") and c.get("balancing_strategy") != "SAMPLES" for c in concepts):
        notes.append("regularisation images keep their folders' repeats: kohya repeats them up to the training images' "
                     "count (set their Balancing so)")
    return concepts


def _image_count(folder: Path, readable: list[Path] | None) -> int | None:
    if not may_read(folder, readable):
        return None
    try:
        return sum(1 for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and not p.name.startswith("."))
    except OSError:
        return None


def _subset_concept(options: dict[str, Any], notes: list[str], weight: float, readable: list[Path] | None = None) -> dict[str, Any] | None:
    """One subset (its options merged as sd-scripts merges them); None for one kohya skips."""
    metadata = str(options.get("metadata_file") or "")
    image_dir = options.get("image_dir") or (metadata_folder(Path(metadata).expanduser(), readable) if metadata else None)
    if not image_dir:
        notes.append(f"a dataset subset without image_dir{f' ({metadata})' if metadata else ''} is not carried over: add its "
                     "images' folder as a concept" + (", with the metadata file as its Captions file" if metadata else ""))
        return None
    folder = Path(str(image_dir))
    repeats = int(float(options.get("num_repeats", 1)))
    if repeats <= 0:
        notes.append(f"{folder.name}: num_repeats {repeats}, which kohya skips; not carried over")
        return None
    reg = flag(options.get("is_reg"))
    extension = str(options.get("caption_extension") or ".caption").strip().lower()
    if metadata:  # sd-scripts' fine-tuning subset: the images the metadata file names, with its captions and tags
        notes.append(f"{folder.name}: metadata_file {Path(metadata).name} is its Captions file: the files it names train "
                     "with its captions, as there")
    elif ("." + extension.lstrip(".")) not in CAPTION_EXTENSIONS:
        notes.append(f"caption_extension '{options['caption_extension']}': here captions are read from .txt, else .caption "
                     "files; rename them, or those images train uncaptioned")
    separator = options.get("keep_tokens_separator")
    if separator and separator != "|||":
        notes.append(f"keep_tokens_separator '{separator}' ({folder.name}): here kohya's `|||` is the separator")
    kohya_name = kohya_repeats(folder.name)
    text: dict[str, Any] = {"enable_tag_shuffling": flag(options.get("shuffle_caption")),
                            "keep_tags_count": int(float(options.get("keep_tokens") or 0)),  # kohya's default keeps none
                            # kohya's caption for an image without a caption file: the subset's class tokens, or a
                            # `<repeats>_<name>` folder's name
                            "default_caption": str(options.get("class_tokens") or ""),
                            "caption_prefix": str(options.get("caption_prefix") or ""),
                            "caption_suffix": str(options.get("caption_suffix") or ""),
                            # sd-scripts reads a caption file's first line; with enable_wildcard one line at random
                            "caption_lines": options.get("caption_lines") or ("EACH" if flag(options.get("enable_wildcard")) else "FIRST")}
    if flag(options.get("enable_wildcard")):
        notes.append(f"enable_wildcard ({folder.name}): a caption file's lines are drawn one at a time, as there; its "
                     "{a|b} choices are not expanded here (they train as written)")
    if is_set(options.get("caption_tag_dropout_rate")):  # kohya drops each tag after the kept ones with it
        text.update(tag_dropout_enable=True, tag_dropout_mode="RANDOM", tag_dropout_probability=float(options["caption_tag_dropout_rate"]))
    # kohya's random crop: where in the image its bucket is cut, drawn anew (OneTrainer's crop jitter)
    image: dict[str, Any] = {"enable_random_flip": flag(options.get("flip_aug")), "enable_crop_jitter": flag(options.get("random_crop")),
                             "alpha_mask": flag(options.get("alpha_mask"))}  # the alpha channel as the mask (masked training)
    if metadata:
        text["captions_file"] = metadata
    if options.get("caption_separator"):  # kohya's separator of tags (shuffled, kept), and of a metadata caption from its tags
        text["tag_delimiter"] = str(options["caption_separator"])
    if options.get("media"):  # musubi-tuner's datasets: images or clips
        image["media"] = options["media"]
    if options.get("control_folder"):  # musubi-tuner's control_directory: an image-editing model's source images
        image["control_folder"] = str(options["control_folder"])
    if options.get("resolution_override"):
        image.update(enable_resolution_override=True, resolution_override=options["resolution_override"])
    return {"name": ("reg: " if reg else "") + (kohya_name[1] if kohya_name else folder.name), "path": str(folder),
            **({"include_subdirectories": True} if metadata else {}),  # (merge_captions_to_metadata --recursive: subfolders)
            "balancing": float(repeats), "loss_weight": weight if reg else 1.0, "type_reg": reg, "text": text, "image": image}
