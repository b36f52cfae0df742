"""A diffusion-pipe dataset TOML (its main config's `dataset = '...'`), for config/dpipe_import.py:
`resolutions` (sides of square areas, each a pass over the data), `enable_ar_bucket` (off: every
image cropped square, its default), `frame_buckets` and each `[[directory]]` a concept (`path`,
`num_repeats`, `caption_prefix`, `control_path`), read as diffusion-pipe reads them.

diffusion-pipe opens every path as given, so a relative one is relative to the folder it runs in,
its repository's root; a config's folder is seldom that. Relative paths are looked up from the
main config's folder and the two above it (`examples/x.toml` in the root, `configs/wan/x.toml`),
the dataset's folders also from the dataset TOML's (`roots`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import jsontext
from .aitoolkit_data import Section
from .family_info import FamilyInfo
from .json_file import may_read, read_json
from .media_files import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from .validation import ConfigError

# how diffusion-pipe caches and shuffles, not what it trains: not listed as left out
DATASET_PLUMBING = {"shuffle_metadata", "cache_shuffle_delimiter", "online_captions", "directory"}
# a directory's own value of a run-wide setting: said when it differs from the dataset's
RUN_WIDE = ("resolutions", "enable_ar_bucket", "min_ar", "max_ar", "num_ar_buckets", "ar_buckets", "frame_buckets", "size_buckets")


class DpSection(Section):
    """A diffusion-pipe table: a value set to 0 is listed when not carried over (its `mod_lr = 0`
    freezes those layers there)."""

    origin = "diffusion-pipe config"

    def left(self) -> list[str]:
        return [f"{self.name}.{k}".lstrip(".") for k, v in self.data.items()
                if k not in self.used and k not in self.plumbing and v is not None and v is not False and v not in ("", [], {})]


def config_roots(base_dir: str | Path | None) -> list[Path]:
    """Where diffusion-pipe may have run, for a relative path of a config in `base_dir`."""
    if base_dir is None:
        return [Path.cwd()]
    base = Path(base_dir).expanduser().absolute()
    return list(dict.fromkeys([base, base.parent, base.parent.parent]))


def resolve(value: str, roots: list[Path], readable: list[Path] | None = None) -> str:
    """A path as diffusion-pipe opens it: as given when absolute, else under the first of `roots`
    that holds it, among the folders the import may read (the first root when none does, so a
    missing path is named as such, never taken for a hub id)."""
    path = Path(value).expanduser()
    if path.is_absolute() or not value:
        return value
    found = next((root / path for root in roots if may_read(root / path, readable) and (root / path).exists()), roots[0] / path)
    return str(found)


def read_dataset(name: str, roots: list[Path], readable: list[Path] | None, notes: list[str],
                 expect: type | tuple[type, ...] = dict) -> tuple[Any, list[Path]]:
    """The dataset file `name` (a TOML table; SimpleTuner's: a JSON list, `expect`) and the folders
    its relative paths are looked up in; (None, roots) with a note when it cannot be read."""
    path = Path(resolve(name, roots, readable))
    if not (path.is_file() and may_read(path, readable)):
        notes.append(f"dataset {name}: not found (looked for from {roots[0]} and the folders above it); add its folders as concepts")
        return None, roots
    try:
        data = read_json(path, "dataset", expect=expect)
    except ConfigError as err:
        notes.append(f"{err}: add its folders as concepts")
        return None, roots
    # the root it was found in is where diffusion-pipe runs: first for the other relative paths
    found = [root for root in roots if not Path(name).is_absolute() and (root / Path(name).expanduser()) == path][:1]
    return data, list(dict.fromkeys([*found, *roots, path.parent, path.parent.parent]))


def dataset_settings(data: dict[str, Any], roots: list[Path], out: dict[str, Any], notes: list[str], info: FamilyInfo,
                     readable: list[Path] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The dataset TOML's concepts, and its run-wide settings into `out`; the keys left out."""
    r = DpSection("dataset", data)
    r.plumbing = DATASET_PLUMBING
    sizes = _resolutions(r.get("resolutions"), "dataset.resolutions")
    if sizes:
        out["resolution"] = ",".join(str(s - s % 8) for s in sizes)
    out["aspect_ratio_bucketing"] = bucketing = r.flag("enable_ar_bucket")
    shape = [r.get(key) for key in ("ar_buckets", "min_ar", "max_ar", "num_ar_buckets")]
    if bucketing and any(v is not None for v in shape):
        notes.append("dataset.min_ar / max_ar / num_ar_buckets / ar_buckets: here the buckets are this trainer's (9 aspect ratios up "
                     "to 4:1, or Bucket step's)")
    if r.get("size_buckets"):
        notes.append("dataset.size_buckets: here the sizes come from Resolution and the aspect ratio buckets")
    frames = [int(f) for f in r.get("frame_buckets") or [] if isinstance(f, (int, float)) and int(f) > 1]
    if info.frame_step and frames:
        out["frames"] = str(max(frames))
        notes.append(f"dataset.frame_buckets {sorted({1, *frames})}: here a clip trains with at most {max(frames)} frames, a shorter "
                     "one with the frames it has (diffusion-pipe puts each clip in the longest bucket it fills and leaves out "
                     "one too short for all)")
    elif info.frame_step:
        notes.append("dataset.frame_buckets: none above 1, so diffusion-pipe trains no clip (only images); here clips train too, "
                     f"with at most Frames ({out.get('frames', 25)}) frames")
    # diffusion-pipe's epoch shows every item at each resolution, each of its shuffled caption copies
    passes = max(1, len(sizes))
    concepts, left, multiplied = [], [], passes > 1
    for number, item in enumerate(data.get("directory") or []):
        concept = _directory(DpSection(f"dataset.directory[{number}]", item), r, roots, notes, info, readable)
        if concept is not None:
            copies = concept.pop("_copies")
            multiplied |= copies > 1
            concept["balancing"] *= passes * copies
            concepts.append(concept)
            left += concept.pop("_left")
    if multiplied:
        notes.append(f"dataset: diffusion-pipe's epoch shows each image at each of its {passes} resolutions (and once per shuffled "
                     "caption copy); here each step trains at one of them, so each concept's Balancing is multiplied to keep the "
                     "epoch as long")
    if not concepts:
        notes.append("dataset: no [[directory]] with a path; add its folders as concepts")
    return concepts, [*r.left(), *left]


def _directory(d: DpSection, top: Section, roots: list[Path], notes: list[str], info: FamilyInfo,
               readable: list[Path] | None) -> dict[str, Any] | None:
    folder = str(d.get("path") or "").strip()
    if not folder:
        return None
    where = d.name

    def value(key: str, default: Any = None) -> Any:  # the directory's, then the dataset's (diffusion-pipe's order)
        own = d.get(key)
        return own if own is not None else top.get(key, default)

    path = Path(resolve(folder, roots, readable))
    repeats = value("num_repeats", 1)
    if not isinstance(repeats, (int, float)) or isinstance(repeats, bool) or repeats <= 0:
        raise ConfigError(f"{where}.num_repeats: {repeats!r} is not a number of repeats above 0 (diffusion-pipe dataset)")
    text: dict[str, Any] = {"caption_prefix": str(value("caption_prefix", "") or ""), "caption_lines": "WHOLE"}  # a file is one caption
    shuffle = int(value("cache_shuffle_num", 0) or 0)
    if value("shuffle_tags", False) or shuffle > 0:
        text.update(enable_tag_shuffling=True, keep_tags_count=0)  # diffusion-pipe shuffles every tag, the prefix added after
        notes.append(f"{where}: diffusion-pipe shuffles the tags once, when it caches (cache_shuffle_num: that many shuffled "
                     "copies); here they are shuffled anew each time an image is shown")
    # diffusion-pipe fits (scales and centre-crops) each image to its size
    concept: dict[str, Any] = {"name": path.name or folder, "path": str(path), "balancing": float(repeats), "text": text,
                               "image": {"enable_crop_jitter": False}, "_copies": max(1, shuffle)}
    control = d.get("control_path")
    if control and info.control_image:
        concept["image"]["control_folder"] = resolve(str(control), roots, readable)
    elif control:
        notes.append(f"{where}.control_path: this model type reads no control images; not carried over")
    if d.get("mask_path") or d.get("default_mask_file") or top.get("mask_path"):
        notes.append(f"{where}.mask_path: here a mask is `<image>-masklabel.png` beside each image (white trains); put them there "
                     "and turn on Training → Masked training")
    if may_read(path, readable):
        _captions(path, where, bool(value("skip_empty_caption", True)), notes)
    for key in RUN_WIDE:
        if key in d.data and d.data[key] != top.data.get(key):
            d.used.add(key)
            notes.append(f"{where}.{key}: a directory's own {key} is the run's here ({top.data.get(key)!r})")
    concept["_left"] = d.left()
    return concept


def _captions(folder: Path, where: str, skip_empty: bool, notes: list[str]) -> None:
    """What diffusion-pipe reads differently in `folder` (not its subfolders, as it reads it): its
    `captions.json` beside .txt files (there it replaces them; here a .txt wins), an image's several
    captions there (each trained every epoch; here one each time), media without a caption (left
    out there). (A .txt of several lines is one caption there: Caption file lines WHOLE.)"""
    try:
        files = [p for p in folder.iterdir() if p.is_file()]
    except OSError:
        return
    texts = [p for p in files if p.suffix.lower() == ".txt"]
    media = [p for p in files if p.suffix.lower() in IMAGE_EXTENSIONS + VIDEO_EXTENSIONS]
    index = folder / "captions.json"
    if index.is_file():
        try:
            listed = jsontext.loads(index.read_text(encoding="utf-8-sig"))
            listed = listed if isinstance(listed, dict) else {}
        except (OSError, ValueError):
            listed = {}  # (the run names an unreadable one)
        if texts:
            notes.append(f"{where}: its captions.json replaces the .txt files there; here a .txt file beside an image wins, "
                         "captions.json captions the others")
        if any(isinstance(v, list) and len(v) > 1 for v in listed.values()):
            notes.append(f"{where}: diffusion-pipe trains each of an image's captions in captions.json every epoch; here one "
                         "of them is drawn each time the image is shown (raise the concept's Balancing to show it as often)")
        bare = sum(1 for p in media if p.name not in listed)
        what = "no entry in captions.json"
    else:
        stems = {p.stem for p in texts}
        bare = sum(1 for p in media if p.stem not in stems)
        what = "no caption file"
    if bare and skip_empty:
        notes.append(f"{where}: {bare} images have {what}, which diffusion-pipe leaves out (skip_empty_caption, its "
                     "default); here they train with an empty caption: caption them, or move them out")


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
