"""A diffusion-pipe dataset TOML (its main config's `dataset = '...'`), for config/dpipe_import.py:
`resolutions` (sides of square areas, each a pass over the data), `enable_ar_bucket` (off: every
image cropped square, its default), `frame_buckets` and each `[[directory]]` a concept (`path`,
`num_repeats`, `caption_prefix`, `control_path`), read as diffusion-pipe reads them.

diffusion-pipe opens every path as given, so a relative one is relative to the folder it runs in,
its repository's root; a config's folder is seldom that. The dataset TOML is looked up from the
main config's folder and the two above it (`examples/x.toml` in the root, `configs/wan/x.toml`),
and its directories' relative paths from the same folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .aitoolkit_data import Section
from .family_info import FamilyInfo
from .json_file import may_read, read_json
from .media_files import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from .validation import ConfigError

# how diffusion-pipe caches and shuffles, not what it trains: not listed as left out
DATASET_PLUMBING = {"shuffle_metadata", "cache_shuffle_delimiter", "online_captions"}
DIRECTORY_KEYS = ("path", "num_repeats", "caption_prefix", "control_path", "mask_path", "default_mask_file", "shuffle_tags",
                  "cache_shuffle_num", "skip_empty_caption")
# a directory's own value of a run-wide setting: said when it differs from the dataset's
RUN_WIDE = ("resolutions", "enable_ar_bucket", "min_ar", "max_ar", "num_ar_buckets", "ar_buckets", "frame_buckets", "size_buckets")


def find_dataset(name: str, base_dir: Path | None, readable: list[Path] | None) -> tuple[Path | None, Path | None]:
    """(the dataset TOML, the folder relative paths start from) or (None, None)."""
    path = Path(name).expanduser()
    if path.is_absolute():
        return (path, Path.cwd()) if path.is_file() else (None, None)
    roots = [base_dir, base_dir.parent, base_dir.parent.parent] if base_dir is not None else [Path.cwd()]
    for root in dict.fromkeys(roots):
        if (root / path).is_file() and may_read(root / path, readable):
            return root / path, root
    return None, None


def dataset_settings(name: str, base_dir: Path | None, out: dict[str, Any], notes: list[str], info: FamilyInfo,
                     readable: list[Path] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The concepts of the dataset TOML `name` and its run-wide settings into `out`; the keys left out."""
    path, root = find_dataset(name, base_dir, readable)
    if path is None:
        where = f" (looked for beside the config and in the two folders above it: {base_dir})" if base_dir is not None else ""
        notes.append(f"dataset {name}: not found{where}; add its folders as concepts")
        return [], []
    data = read_json(path, "dataset")
    r = Section("dataset", data)
    r.plumbing = DATASET_PLUMBING | {"directory"}
    sizes = _resolutions(r.get("resolutions"), "dataset.resolutions")
    if sizes:
        out["resolution"] = ",".join(str(s - s % 8) for s in sizes)
        if len(sizes) > 1:
            notes.append(f"dataset.resolutions {sizes}: diffusion-pipe trains every image at each of them in an epoch; here each "
                         "step trains at one of them")
    bucketing = r.flag("enable_ar_bucket")
    out["aspect_ratio_bucketing"] = bucketing
    shape = [r.get(key) for key in ("ar_buckets", "min_ar", "max_ar", "num_ar_buckets")]
    if bucketing and any(v is not None for v in shape):
        notes.append("dataset.min_ar / max_ar / num_ar_buckets / ar_buckets: here the buckets are this trainer's (9 aspect ratios up "
                     "to 4:1, or Bucket step's)")
    if r.get("size_buckets"):
        notes.append("dataset.size_buckets: here the sizes come from Resolution and the aspect ratio buckets")
    frames = [int(f) for f in r.get("frame_buckets") or [] if isinstance(f, (int, float)) and int(f) > 1]
    if frames and info.frame_step:
        out["frames"] = str(max(frames))
        if len(frames) > 1:
            notes.append(f"dataset.frame_buckets {sorted(frames)}: here a clip trains with at most {max(frames)} frames (a shorter "
                         "clip with the frames it has)")
    if r.get("subsample_ratio"):
        r.used.discard("subsample_ratio")
    concepts, left = [], []
    for number, item in enumerate(data.get("directory") or []):
        concept = _directory(Section(f"dataset.directory[{number}]", item), r, root, notes, info, readable)
        if concept is not None:
            concepts.append(concept)
            left += concept.pop("_left")
    if not concepts:
        notes.append(f"dataset {name}: no [[directory]] with a path; add its folders as concepts")
    return concepts, [*r.left(), *left]


def _directory(d: Section, top: Section, root: Path | None, notes: list[str], info: FamilyInfo,
               readable: list[Path] | None) -> dict[str, Any] | None:
    folder = str(d.get("path") or "").strip()
    if not folder:
        return None
    where = d.name

    def value(key: str, default: Any = None) -> Any:  # the directory's, then the dataset's (diffusion-pipe's order)
        own = d.get(key)
        return own if own is not None else top.get(key, default)

    path = Path(folder).expanduser()
    if not path.is_absolute() and root is not None:
        path = root / path
    repeats = value("num_repeats", 1)
    if not isinstance(repeats, (int, float)) or isinstance(repeats, bool) or repeats <= 0:
        raise ConfigError(f"{where}.num_repeats: {repeats!r} is not a number of repeats above 0 (diffusion-pipe dataset)")
    text: dict[str, Any] = {"caption_prefix": str(value("caption_prefix", "") or "")}
    shuffle = int(value("cache_shuffle_num", 0) or 0)
    if value("shuffle_tags", False) or shuffle > 0:
        text["enable_tag_shuffling"] = True
        notes.append(f"{where}: diffusion-pipe shuffles the tags once when it caches (cache_shuffle_num: that many shuffled copies, "
                     "each an item of the epoch); here they are shuffled anew each time an image is shown")
    concept: dict[str, Any] = {"name": path.name or folder, "path": str(path), "balancing": float(repeats), "text": text, "image": {}}
    control = d.get("control_path")
    if control and info.control_image:
        concept["image"]["control_folder"] = str(root / control if root is not None and not Path(control).is_absolute() else control)
    elif control:
        notes.append(f"{where}.control_path: this model type reads no control images; not carried over")
    if d.get("mask_path") or d.get("default_mask_file") or top.get("mask_path"):
        notes.append(f"{where}.mask_path: here a mask is `<image>-masklabel.png` beside each image (white trains); put them there "
                     "and turn on Training → Masked training")
    if value("skip_empty_caption", True) and may_read(path, readable) and (bare := _uncaptioned(path)):
        notes.append(f"{where}: {bare} images have no caption file, which diffusion-pipe leaves out (skip_empty_caption, its "
                     "default); here they train with an empty caption: caption them, or move them out")
    for key in RUN_WIDE:
        if key in d.data and d.data[key] != top.data.get(key):
            d.used.add(key)
            notes.append(f"{where}.{key}: a directory's own {key} is the run's here ({top.data.get(key)!r})")
    concept["_left"] = d.left()
    return concept


def _uncaptioned(folder: Path) -> int:
    """Media files in `folder` (not its subfolders, as diffusion-pipe reads it) without a `.txt` caption."""
    try:
        files = [p for p in folder.iterdir() if p.is_file()]
    except OSError:
        return 0
    stems = {p.stem for p in files if p.suffix.lower() == ".txt"}
    media = IMAGE_EXTENSIONS + VIDEO_EXTENSIONS
    return sum(1 for p in files if p.suffix.lower() in media and p.stem not in stems)


def _resolutions(value: Any, field: str) -> list[int]:
    """diffusion-pipe's `resolutions`: sides of square areas, or [w, h] pairs (their area's side)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{field}: {value!r} is not a list of sizes (diffusion-pipe reads e.g. resolutions = [512])")
    sizes = []
    for item in value:
        try:
            side = int(round((float(item[0]) * float(item[1])) ** 0.5)) if isinstance(item, list) else int(float(item))
        except (TypeError, ValueError, IndexError):
            raise ConfigError(f"{field}: {item!r} is not a size (diffusion-pipe dataset)") from None
        if side < 64:
            raise ConfigError(f"{field}: {side} is smaller than 64 px (diffusion-pipe dataset)")
        sizes.append(side)
    return sorted(set(sizes))
