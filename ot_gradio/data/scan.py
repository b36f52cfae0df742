"""Concept scanning: which files of a concept folder are training images, with captions and masks.

Only reads. Every candidate image is decoded once here, so an unreadable file is reported before
training (one warning naming it) instead of crashing a step hours later. Hidden files and folders
(names starting with a dot, e.g. macOS ``._photo.jpg`` companions) are ignored like other
non-image files. For a video family (``sampling`` given) clips are training items too: each is
probed by decoding the frames it would train with (data/video.py), and images train as one-frame
videos.
"""

from __future__ import annotations

import logging
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config.media_files import UNREAD_IMAGE_EXTENSIONS, kohya_repeats
from .caption_index import CaptionIndex, read_caption_index, read_captions_file
from .captions import beside_concept, caption_lines, caption_path, read_captions, read_text
from .errors import DataError
from .images import (
    CONDLABEL_SUFFIX,
    CONTROL_SUFFIX,
    DEPTH_SUFFIX,
    IMAGE_EXTENSIONS,
    companion_path_for,
    is_condlabel_name,
    is_control_name,
    is_depth_name,
    is_image_name,
    is_mask_name,
    load_depth,
    load_mask,
    load_rgb,
    load_rgb_noting_transparency,
    mask_path_for,
)
from .video import VIDEO_EXTENSIONS, ClipError, FrameSampling, is_video_name, probe_clip

log = logging.getLogger(__name__)

# Decoding dominates a scan and PIL releases the GIL while decoding; a few threads keep the
# peak memory (one decoded image per thread) modest.
_DECODE_THREADS = min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class ImageItem:
    """One training image as found on disk; size is after EXIF orientation."""

    path: Path  # absolute, symlinks resolved
    relpath: str  # inside the concept folder, '/'-separated
    width: int
    height: int
    file_size: int
    mtime_ns: int
    captions: tuple[str, ...]
    mask_path: Path | None = None  # its `-masklabel` file, or with `mask_from_alpha` the image itself
    mask_from_alpha: bool = False  # Alpha as mask: the image's alpha channel is its mask (images.load_alpha)
    control_path: Path | None = None  # an image-conditioned family's `<stem>-control` image (FamilyInfo.control_image)
    depth_path: Path | None = None  # a depth model's `<stem>-depth` map (FamilyInfo.depth_maps; None: estimated)
    condlabel_path: Path | None = None  # an inpainting model's `<stem>-condlabel` image (custom_conditioning_image)
    frames: int = 0  # 0: an image of an image family; else the frames it trains with (an image: 1)
    sampling: FrameSampling | None = None  # how a clip's frames are read (None: an image)
    duration: float = 0.0  # a clip's length in seconds, from its container (0: an image, or unknown)
    slack: float = 0.0  # seconds a clip's window of `frames` frames can start later (the random clip window)


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str


@dataclass
class ConceptScan:
    name: str
    folder: Path
    items: list[ImageItem]
    skipped: list[SkippedFile] = field(default_factory=list)
    uncaptioned: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    unpaired: list[Path] = field(default_factory=list)  # images without their control image (skipped)
    transparent: list[Path] = field(default_factory=list)  # images with transparent pixels: they train on white
    two_caption_files: list[Path] = field(default_factory=list)  # images with a .txt and a kohya .caption: the .txt is read
    several_lines: int = 0  # caption files with more than one caption (line)
    from_index: int = 0  # images captioned by the folder's caption index (captions.json, metadata.jsonl)
    caption_index: list[str] = field(default_factory=list)  # the index files read
    named_files_left: int = 0  # files of the folder its Captions file does not name (not trained)
    media_left: int = 0  # files of the other kind than its Files trained (IMAGES / CLIPS) keeps (not trained)
    index_unmatched: int = 0  # their entries that name no image read
    kohya_folders: str | None = None  # what its `<repeats>_<name>` folders would mean in kohya (kohya_folder_warning)

    @property
    def mask_count(self) -> int:
        return sum(1 for item in self.items if item.mask_path is not None)

    @property
    def alpha_mask_count(self) -> int:
        return sum(1 for item in self.items if item.mask_from_alpha)

    @property
    def pair_count(self) -> int:
        return sum(1 for item in self.items if item.control_path is not None)

    @property
    def depth_count(self) -> int:
        return sum(1 for item in self.items if item.depth_path is not None)


def concept_label(concept: object) -> str:
    name = str(getattr(concept, "name", "") or "").strip()
    return name or Path(str(getattr(concept, "path", "") or "?")).name or "?"


def is_regular_file(path: Path) -> bool:
    """A plain file (a link to one counts). A pipe, socket or device named like an image would
    block or never end when read, so it is no image."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def list_image_files(folder: Path, recursive: bool, skipped: list[SkippedFile] | None = None, clips: bool = False,
                     control: bool = False, depth: bool = False, unread: list[Path] | None = None) -> list[Path]:
    """Image files (not masks nor `-condlabel` images; with ``control`` not `-control` images, with ``depth`` not `-depth`
    maps either) under ``folder``,
    and clips with ``clips``, sorted by their '/'-separated relative path. Names of images that
    are no plain file (a pipe called fifo.png) go to ``skipped``; pictures in a format that is not read
    (UNREAD_IMAGE_EXTENSIONS: .jxl, .psd, ...) to ``unread``."""
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for name in files:
            wanted = is_image_name(name) or (clips and is_video_name(name))
            companion = (control and is_control_name(name)) or (depth and is_depth_name(name))
            if unread is not None and not name.startswith(".") and Path(name).suffix.lower() in UNREAD_IMAGE_EXTENSIONS:
                unread.append(Path(root) / name)
            if name.startswith(".") or not wanted or is_mask_name(name) or is_condlabel_name(name) or companion:
                continue
            path = Path(root) / name
            if not is_regular_file(path):
                log.warning("Skipping %s: not a regular file (a pipe, socket, device or broken link)", path)
                if skipped is not None:
                    skipped.append(SkippedFile(path, "not a regular file (a pipe, socket, device or broken link)"))
                continue
            found.append((path.relative_to(folder).as_posix(), path))
    found.sort(key=lambda pair: pair[0])
    return [path for _, path in found]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _resolve_prompt_file(concept: object, folder: Path) -> Path:
    raw = str(getattr(concept.text, "prompt_path", "") or "").strip()
    label = concept_label(concept)
    if not raw:
        raise DataError(f"Concept '{label}': prompt source is 'concept' but no prompt file is set")
    path = beside_concept(raw, folder)
    if not path.is_file():
        raise DataError(f"Concept '{label}': prompt file '{raw}' does not exist")
    return path


def scan_concept(concept: object, sampling: FrameSampling | None = None, control: bool = False, depth: bool = False,
                 condlabel: bool = False) -> ConceptScan:
    """Scan one concept (a ``ConceptConfig``). Raises DataError if it has no usable image.
    ``sampling``: the run trains a video family; clips are items too, read this way.
    ``control``: an image-conditioned family; each image trains with its `<stem>-control` image,
    an image without one is skipped (one warning names them all), none with one is a DataError.
    ``depth``: a depth model; an image's `<stem>-depth` map is its depth map (one without is estimated).
    ``condlabel``: an inpainting model with custom_conditioning_image; an image's `<stem>-condlabel`
    image is its conditioning image (one without keeps the masked image)."""
    label = concept_label(concept)
    raw_path = str(getattr(concept, "path", "") or "").strip()
    if not raw_path:
        raise DataError(f"Concept '{label}': no folder is set")
    folder = Path(raw_path).expanduser()
    if not folder.is_dir():
        raise DataError(f"Concept '{label}': folder '{folder}' does not exist or is not a folder")
    not_files: list[SkippedFile] = []
    unread: list[Path] = []
    files = list_image_files(folder, bool(getattr(concept, "include_subdirectories", False)), not_files, sampling is not None, control,
                             depth, unread)
    unread_note = _unread_note(unread)
    files, other_kind = _media_files(files, concept, sampling is not None)
    if not files and other_kind:
        raise DataError(f"Concept '{label}': no {_MEDIA[_media(concept)]} in folder '{folder}' (Files trained is "
                        f"{_media(concept)}; its {other_kind} other files are left out)")
    if not files:
        kinds = ", ".join(ext.lstrip(".") for ext in IMAGE_EXTENSIONS + (VIDEO_EXTENSIONS if sampling else ()))
        raise DataError(f"Concept '{label}': no {'images or clips' if sampling else 'images'} ({kinds}) in folder '{folder}'"
                        + (f"; {unread_note}" if unread_note else ""))

    scan = ConceptScan(name=label, folder=folder.resolve(), items=[], skipped=not_files)
    index = concept_caption_index(concept, folder)
    files, unnamed = _named_files(files, index, folder)
    scan.named_files_left = unnamed
    if unnamed:
        shared = f" ({index.shared} of them named by an entry another file took: one file an entry)" if index.shared else ""
        _warn(scan, f"Concept '{label}': {unnamed} of the folder's {'files' if sampling else 'images'} are not named in its "
                    f"Captions file {index.files[0]}{shared} and are left out, as kohya's fine-tuning leaves them out")
    scan.media_left = other_kind
    if other_kind:
        _warn(scan, f"Concept '{label}': its {other_kind} {'images' if _media(concept) == 'CLIPS' else 'clips'} are left out "
                    f"(Files trained: {_media(concept)})")
    control_folder = _control_folder(concept, label) if control else None
    if unread_note:
        _warn(scan, f"Concept '{label}': {unread_note}")
    for skip in not_files:
        scan.warnings.append(f"Skipping {skip.path}: {skip.reason}")
    source = str(getattr(concept.text, "prompt_source", "sample"))
    default = default_caption(concept)
    joined = caption_lines_rule(concept)
    scan.caption_index = index.files if index else []
    alpha_masks = bool(getattr(getattr(concept, "image", None), "alpha_mask", False))
    shared: tuple[str, ...] = ()
    if source == "concept":
        prompt_file = _resolve_prompt_file(concept, folder)
        shared, warning = read_captions(prompt_file)
        if warning:
            _warn(scan, warning)
        if not shared:
            _warn(scan, f"Concept '{label}': prompt file '{prompt_file}' has no captions; training with empty captions")
            shared = ("",)

    spread = sampling is not None and bool(getattr(getattr(concept, "image", None), "clip_spread", False))
    with ThreadPoolExecutor(max_workers=_DECODE_THREADS) as pool:
        probes = list(pool.map(lambda path: _probe(path, sampling, spread), files))
    for path, (size, transparent, error, clip_sampling) in zip(files, probes, strict=True):
        clip = sampling is not None and is_video_name(path.name)
        if size is None:
            scan.skipped.append(SkippedFile(path, error))
            _warn(scan, f"Skipping {'clip' if clip else 'unreadable image'} {path}: {error}")
            continue
        width, height, frames, duration, slack = size
        if clip and frames < sampling.frames:
            _warn(scan, f"Clip {path} is short: it trains with {frames} of the {sampling.frames} frames set (Frames)"
                        + (" (it has fewer frames to spread)" if spread else ""))
        control_path = None
        if control:  # beside the image as `<name>-control`, or in the concept's control image folder under the image's name
            control_path = _companion_for(path, CONTROL_SUFFIX, "control image", load_rgb, scan, (width, height),
                                          control_folder / path.relative_to(folder) if control_folder else None)
        if control and control_path is None:
            scan.unpaired.append(path)
            continue
        stat = path.stat()
        captions = _captions_for(path, source, shared, scan, default, joined, index, folder, _spaces(concept))
        mask = _mask_for(path, scan, (width, height))  # a clip's mask holds for each of its frames
        alpha = bool(mask is None and transparent and alpha_masks and not clip)  # Alpha as mask: its own alpha channel
        resolved = path.resolve()
        scan.items.append(
            ImageItem(
                path=resolved,
                relpath=path.relative_to(folder).as_posix(),
                width=width,
                height=height,
                file_size=stat.st_size,
                mtime_ns=stat.st_mtime_ns,
                captions=captions,
                mask_path=resolved if alpha else mask,
                mask_from_alpha=alpha,
                control_path=control_path,
                depth_path=_companion_for(path, DEPTH_SUFFIX, "depth map", load_depth, scan, (width, height)) if depth else None,
                condlabel_path=_companion_for(path, CONDLABEL_SUFFIX, "conditioning image", load_rgb, scan, (width, height))
                if condlabel else None,
                frames=frames,
                sampling=clip_sampling if clip else None,
                duration=duration,
                slack=slack,
            )
        )
        if transparent:
            scan.transparent.append(path)

    if scan.unpaired:
        names = ", ".join(p.name for p in scan.unpaired[:10]) + (f" and {len(scan.unpaired) - 10} more" if len(scan.unpaired) > 10 else "")
        where = (f"named as it in the control image folder '{control_folder}'" if control_folder
                 else "(`<name>-control.png` beside `<name>.png`)")
        if not scan.items:
            raise DataError(f"Concept '{label}': no image in folder '{folder}' has its control image {where}; this model type "
                            f"trains on such pairs ({names})")
        _warn(scan, f"Concept '{label}': {len(scan.unpaired)} image(s) without a control image {where} are skipped: {names}")
    if not scan.items:
        raise DataError(f"Concept '{label}': none of the {len(files)} {'files' if sampling else 'images'} in folder '{folder}' could be read")
    if scan.uncaptioned:
        _warn(scan, f"Concept '{label}': {len(scan.uncaptioned)} image(s) have no caption text; they train with an empty caption")
    if index is not None and (unmatched := index.unmatched()):
        scan.index_unmatched = unmatched
        _warn(scan, f"Concept '{label}': {unmatched} entries of {', '.join(index.files)} name no image read here (a name "
                    "spelt otherwise, a file moved, or a subfolder not included)")
    if scan.two_caption_files:
        _warn(scan, f"Concept '{label}': {len(scan.two_caption_files)} image(s) have both a .txt and a kohya .caption file; "
                    f"the .txt is read (e.g. {scan.two_caption_files[0].name}), the .caption ignored")
    scan.kohya_folders = kohya_folder_warning(concept, folder, [item.path for item in scan.items], scan.uncaptioned)
    if scan.kohya_folders:
        _warn(scan, scan.kohya_folders)
    return scan


def kohya_folder_warning(concept: object, folder: Path, images: list[Path], uncaptioned: list[Path]) -> str | None:
    """Folders named as kohya's `<repeats>_<name>` are: kohya trains each image <repeats> times an
    epoch and captions those without a caption file with <name>; here Balancing sets the repeats
    and such images train uncaptioned. Said while Balancing is its default (1, REPEATS)."""
    if (str(getattr(concept, "balancing_strategy", "REPEATS")) != "REPEATS"
            or float(getattr(concept, "balancing", 1.0)) != 1.0):
        return None
    root = folder.resolve()
    named: dict[Path, tuple[int, str]] = {}
    for image in images:
        parent = Path(image).resolve().parent
        if parent not in named and (parent == root or root in parent.parents) and (found := kohya_repeats(parent.name)) and found[0]:
            named[parent] = found
    if not named:
        return None
    label = concept_label(concept)
    bare = {Path(p).resolve().parent for p in uncaptioned}
    if len(named) == 1:
        (where, (repeats, name)), = named.items()
        text = (f"Concept '{label}': folder '{where.name}' is named as kohya's `<repeats>_<name>` folders are; here each "
                f"image trains Balancing times an epoch (now 1), not {repeats}: set Concepts → Balancing to {repeats} to "
                "train it as kohya would")
    else:
        listed = ", ".join(f"'{p.name}'" for p in sorted(named)[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        text = (f"Concept '{label}': its folders {listed} are named as kohya's `<repeats>_<name>` folders are; here each "
                "image trains Balancing times an epoch (now 1), whatever its folder: make each folder its own concept "
                "with its repeats as Balancing to train them as kohya would")
    if bare & set(named):
        text += (f"; and kohya captions an image without a caption file with its folder's name ('{named[min(bare & set(named))][1]}'), "
                 "which trains here with an empty caption: set Concepts → Caption without a file to it, or write the captions "
                 "(Tools → Captions)")
    return text


def _probe(path: Path, sampling: FrameSampling | None, spread: bool = False
           ) -> tuple[tuple[int, int, int, float, float] | None, bool, str, FrameSampling | None]:
    """((width, height, frames, seconds, slack), transparent, '', the clip's sampling) for a
    readable image or clip (frames: 0 for an image of an image family; seconds and slack: 0 for an
    image; transparent: an image with transparent pixels; `spread`: the clip's frames spread over
    it), (None, False, reason, None) otherwise."""
    try:
        if sampling is not None and is_video_name(path.name):
            own = replace(sampling, spread=True, random_window=False) if spread else sampling
            info = probe_clip(path, own)
            return (info.width, info.height, info.frames, info.duration, info.slack), False, "", own
        img, transparent = load_rgb_noting_transparency(path)
        with img:
            return (*img.size, 0 if sampling is None else 1, 0.0, 0.0), transparent, "", None
    except Exception as exc:  # anything PIL or PyAV raises means the file cannot be trained on
        return None, False, str(exc) if isinstance(exc, ClipError) else _reason(exc), None


def concept_captions(concept: object, clips: bool = False, control: bool = False, depth: bool = False) -> list[tuple[str, ...]]:
    """Each training item's captions as a run reads them (its prompt source), without opening an
    image: for the checks before Start. A DataError when the folder or prompt file is missing."""
    folder = Path(str(getattr(concept, "path", "") or "").strip()).expanduser()
    if not folder.is_dir():
        raise DataError(f"Concept '{concept_label(concept)}': folder '{folder}' does not exist or is not a folder")
    files = list_image_files(folder, bool(getattr(concept, "include_subdirectories", False)), clips=clips, control=control, depth=depth)
    files = _media_files(files, concept, clips)[0]
    source = str(getattr(concept.text, "prompt_source", "sample"))
    shared = read_captions(_resolve_prompt_file(concept, folder))[0] if source == "concept" else ()
    scratch = ConceptScan(name=concept_label(concept), folder=folder, items=[])  # (its warnings: the run says them)
    default = default_caption(concept)
    joined = caption_lines_rule(concept)
    index = concept_caption_index(concept, folder)
    files = _named_files(files, index, folder)[0]
    return [_captions_for(path, source, shared, scratch, default, joined, index, folder, _spaces(concept)) for path in files]


def concept_caption_index(concept: object, folder: Path) -> CaptionIndex | None:
    """With prompt source 'sample', the concept's Captions file, else its folder's caption index
    files (captions.json, metadata.jsonl / .csv); None for none. A DataError for a Captions file
    that is missing or cannot be read."""
    if str(getattr(concept.text, "prompt_source", "sample")) != "sample":
        return None
    named = str(getattr(concept.text, "captions_file", "") or "").strip()
    if not named:
        return read_caption_index(folder, bool(getattr(concept, "include_subdirectories", False)))
    path = beside_concept(named, folder)
    if not path.is_file():
        raise DataError(f"Concept '{concept_label(concept)}': Captions file '{named}' does not exist; set the file holding "
                        "the captions, or clear the field")
    return read_captions_file(path, folder, str(getattr(concept.text, "tag_delimiter", "") or ","),
                              caption_lines_rule(concept) == "EACH")


def check_captions_file(concept: object, clips: bool = False) -> None:
    """The checks before Start: a DataError when the concept's Captions file cannot be read or names
    none of its folder's files (no image is opened)."""
    folder = Path(str(getattr(concept, "path", "") or "").strip()).expanduser()
    index = concept_caption_index(concept, folder)
    files = list_image_files(folder, bool(getattr(concept, "include_subdirectories", False)), clips=clips)
    _named_files(_media_files(files, concept, clips)[0], index, folder)


_MEDIA = {"ALL": "images or clips", "IMAGES": "images", "CLIPS": "clips"}


def _media(concept: object) -> str:
    """The concept's Files trained: ALL, IMAGES or CLIPS."""
    kind = str(getattr(getattr(concept, "image", None), "media", "ALL") or "ALL").upper()
    return kind if kind in _MEDIA else "ALL"


def _media_files(files: list[Path], concept: object, clips: bool) -> tuple[list[Path], int]:
    """A video family's concept's files of the kind it trains (its Files trained), and how many
    of the other kind are left out; an image family's (no clips listed) as they are."""
    kind = _media(concept)
    if not clips or kind == "ALL":
        return files, 0
    kept = [path for path in files if is_video_name(path.name) == (kind == "CLIPS")]
    return kept, len(files) - len(kept)


def _named_files(files: list[Path], index: CaptionIndex | None, folder: Path) -> tuple[list[Path], int]:
    """The files a concept trains with its Captions file: those it names (sd-scripts' fine-tuning
    trains only its metadata's images), and how many are left out; an entry names one image (a name
    without its extension, of both a.jpg and a.png: the first), as sd-scripts registers an entry
    once. A DataError when it names none."""
    if index is None or not index.named:
        return files, 0
    named, taken, shared = [], set(), 0
    for path in files:
        if (key := index.key(path.relative_to(folder).as_posix())) is not None and key not in taken:
            taken.add(key)
            named.append(path)
        elif key is not None:
            shared += 1
    index.shared = shared
    if not named:
        raise DataError(f"Captions file {index.files[0]} names none of the {len(files)} files in folder '{folder}' (names are "
                        "read from the concept folder, or whole paths inside it); set the folder its images are in")
    return named, len(files) - len(named)


def default_caption(concept: object) -> str:
    """The concept's caption for an image without a caption file (kohya's class tokens); '' for none."""
    return str(getattr(concept.text, "default_caption", "") or "").strip()


def _spaces(concept: object) -> bool:
    """Underscores as spaces: a file name's underscores read as spaces (prompt source 'filename')."""
    return bool(getattr(getattr(concept, "text", None), "filename_spaces", False))


def caption_lines_rule(concept: object) -> str:
    """The concept's Caption file lines: EACH (a caption a line), FIRST or WHOLE."""
    rule = str(getattr(getattr(concept, "text", None), "caption_lines", "EACH") or "EACH").upper()
    return rule if rule in ("EACH", "FIRST", "WHOLE") else "EACH"


def _captions_for(path: Path, source: str, shared: tuple[str, ...], scan: ConceptScan, default: str = "",
                  lines_rule: str = "EACH", index: CaptionIndex | None = None, folder: Path | None = None,
                  spaces: bool = False) -> tuple[str, ...]:
    """The item's captions by its prompt source; with 'sample', its caption file, else the folder's
    caption index (captions.json, metadata.jsonl), else `default` (kohya's class tokens: an empty
    caption file stays empty, as there); several lines (or an index's several captions) read by
    `lines_rule` (EACH: a caption a line; FIRST: the first; WHOLE: one, joined); with 'filename',
    the file name (`spaces`: its underscores as spaces)."""
    if source == "concept":
        return shared
    if source == "filename":
        return (path.stem.replace("_", " ") if spaces else path.stem,)
    caption_file = caption_path(path)
    lines: tuple[str, ...] = ()
    listed = index.get(path.relative_to(folder).as_posix()) if index is not None and folder is not None else None
    # captions of their own, as the index's tools keep them (WHOLE: a file's lines): where there is no caption file, or
    # always from a Captions file (sd-scripts' fine-tuning reads no caption file; an empty entry trains uncaptioned)
    if listed is not None and (index.named or (listed and not caption_file.is_file())):
        if not listed:
            scan.uncaptioned.append(path)
            return ("",)
        scan.from_index += 1
        return listed[:1] if lines_rule == "FIRST" else listed
    if not caption_file.is_file() and default:
        return (default,)
    if caption_file.is_file():
        try:
            text, warning = read_text(caption_file)
            lines = caption_lines(text)
        except OSError as exc:
            text, warning = "", f"Cannot read caption {caption_file}: {_reason(exc)}"
        if warning:
            _warn(scan, warning)
        if caption_file.suffix == ".txt" and caption_file.with_suffix(".caption").is_file():
            scan.two_caption_files.append(caption_file)
        if lines_rule == "FIRST":  # sd-scripts: the file's first line, even a blank one
            first = text.splitlines()[0].strip() if text.strip() else ""
            lines = (first,) if first else ()
        elif lines_rule == "WHOLE" and len(lines) > 1:  # the file as read there (`f.read().strip()`), its line breaks kept
            lines = (text.strip(),)
        scan.several_lines += len(lines) > 1
    if not lines:
        scan.uncaptioned.append(path)
        return ("",)
    return lines


def _readable_size(found: Path, load, what: str, scan: ConceptScan) -> tuple[int, int] | None:
    """The size of the image's companion file `found` (a mask, a control image, a depth map) as
    `load` opens it; None, said in a warning, when it cannot be read."""
    try:
        with load(found) as img:
            return img.size
    except Exception as exc:
        _warn(scan, f"Ignoring unreadable {what} {found}: {_reason(exc)}")
        return None


def _mask_for(path: Path, scan: ConceptScan, image_size: tuple[int, int]) -> Path | None:
    mask = mask_path_for(path)
    size = _readable_size(mask, load_mask, "mask", scan) if mask.is_file() else None
    if size is None:
        return None
    if size != image_size:
        _warn(
            scan,
            f"Mask {mask} is {size[0]}x{size[1]} but its image is {image_size[0]}x{image_size[1]}; it is stretched to "
            "the image. Repaint it at the image's size if the masked area looks shifted.",
        )
    return mask.resolve()


def _control_folder(concept: object, label: str) -> Path | None:
    """The concept's control image folder (`image.control_folder`), None when blank; DataError for one that is no folder."""
    raw = str(getattr(getattr(concept, "image", None), "control_folder", "") or "").strip()
    if not raw:
        return None
    folder = Path(raw).expanduser()
    if not folder.is_dir():
        raise DataError(f"Concept '{label}': control image folder '{folder}' does not exist or is not a folder "
                        "(concepts[].image.control_folder)")
    return folder


def _companion_for(path: Path, suffix: str, what: str, load, scan: ConceptScan, image_size: tuple[int, int],
                   elsewhere: Path | None = None) -> Path | None:
    """The image's readable `<stem><suffix>` file (a control image, a depth map; None: none, or
    unreadable, said in a warning), or with `elsewhere` (the image's place in another folder) the
    image of that name there, any image extension; one of another shape is stretched onto its
    image's, which a warning says."""
    found = companion_path_for(path, suffix) if elsewhere is None else companion_path_for(elsewhere, "")
    size = None if found is None else _readable_size(found, load, what, scan)
    if size is None:
        return None
    if abs(size[0] * image_size[1] - size[1] * image_size[0]) > 0.01 * size[1] * image_size[1]:
        _warn(scan, f"{what.capitalize()} {found} is {size[0]}x{size[1]} but its image is {image_size[0]}x{image_size[1]}; it is "
                    "stretched to the image's shape. Crop it like the image if the pair should line up.")
    return found.resolve()


def _unread_note(unread: list[Path]) -> str:
    """'2 .jxl, 1 .psd file(s) are in a format that is not read (IMG_1.jxl, ...); convert them to PNG or JPG' ('' for none)."""
    if not unread:
        return ""
    counts: dict[str, int] = {}
    for path in unread:
        counts[path.suffix.lower()] = counts.get(path.suffix.lower(), 0) + 1
    kinds = ", ".join(f"{n} {ext}" for ext, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    names = ", ".join(p.name for p in sorted(unread)[:5]) + (", ..." if len(unread) > 5 else "")
    return f"{kinds} file(s) are in a format that is not read ({names}); convert them to PNG or JPG to train on them"


def _warn(scan: ConceptScan, message: str) -> None:
    log.warning(message)
    scan.warnings.append(message)
