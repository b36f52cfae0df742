"""An ai-toolkit job's datasets, samples and saving, for config/aitoolkit_import.py: its reader of
a section's values (what is read counts as carried over) and the parts of the job that are data
rather than training settings."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .family_info import FamilyInfo
from .json_file import may_read
from .metadata_file import metadata_folder
from .validation import ConfigError

# values that say how ai-toolkit runs, not what it trains, per section: not listed as left out
PLUMBING = {
    "process": {"type", "device", "sqlite_db_path", "performance_log_every", "logging", "training_folder", "trigger_word"},
    "model": {"low_vram", "compile", "block_compile", "compile_mode", "attn_masking", "te_device", "vae_device"},
    "save": {"push_to_hub", "hf_repo_id", "hf_private", "save_format"},
    "train": {"cache_text_embeddings", "xformers", "sdp", "attention_backend", "performance_log_every", "noise_scheduler"},
    "sample": {"sampler", "sample_start_step", "format", "ext"},
    "datasets": {"cache_latents_to_disk", "cache_latents", "num_workers", "prefetch_factor", "cache_latents_num_workers",
                 "mask_min_value", "type"},
}
DTYPES = {"float16": "FLOAT_16", "fp16": "FLOAT_16", "bf16": "BFLOAT_16", "bfloat16": "BFLOAT_16", "float32": "FLOAT_32",
          "fp32": "FLOAT_32", "float": "FLOAT_32"}


class Section:
    """One section's values; what is read counts as carried over."""

    origin = "ai-toolkit config"  # said in a message about a value

    def __init__(self, name: str, data: Any, plumbing: str = ""):
        self.name, self.data, self.used = name, data if isinstance(data, dict) else {}, set()
        self.plumbing = PLUMBING.get(plumbing or name, set())

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        value = self.data.get(key)
        return default if value is None else value

    def number(self, key: str, default: float | None = None, kind: type = float) -> Any:
        value = self.get(key)
        if value is None or value == "":
            return default
        try:  # YAML 1.1 reads 1e-4 (no dot) as text: ai-toolkit's loader as a number
            number = float(value)
            if number != number or abs(number) == float("inf") or isinstance(value, bool):
                raise ValueError
            return kind(number) if kind is int else kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{self.name}.{key}: {value!r} is not a number ({self.origin})") from None

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)

    def at_default(self, key: str, default: Any) -> None:
        """Reads `key` where it holds ai-toolkit's default (its page saves it for every job); another value is listed."""
        if self.data.get(key, default) == default:
            self.used.add(key)

    def left(self) -> list[str]:
        return [f"{self.name}.{k}" for k, v in self.data.items()
                if k not in self.used and k not in self.plumbing and v not in (None, "", False, [], {})]


def save(r: Section, out: dict[str, Any], job_name: str, folder: str) -> None:
    """The LoRA at `training_folder/<name>/<name>.safetensors`, its precision, how often it is saved
    and how many saves are kept."""
    name = re.sub(r"[^\w.\-]+", "_", job_name).strip("._") or "lora"
    out["output_model_destination"] = str(Path(folder or "output") / name / f"{name}.safetensors")
    out["output_dtype"] = DTYPES.get(str(r.get("dtype") or "float16").lower(), "FLOAT_16")
    out.update(save_every=r.number("save_every", 1000, int), save_every_unit="STEP")
    keep = r.number("max_step_saves_to_keep", 5, int)
    if keep > 0:
        out["save_keep_last"] = keep


def datasets(items: Any, out: dict[str, Any], notes: list[str], trigger: str, info: FamilyInfo,
             readable: list[Path] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each dataset a concept; what they share (caption dropout, resolutions, frames) the run's. A
    dataset given as a JSON file of whole image paths and their captions (its `dataset_path`) is a
    concept in their folder, the file its Captions file (`readable`: where it may be read)."""
    concepts, left, sizes, frames, rates = [], [], [], [], set()
    video_sets: list[tuple[int, bool, float]] = []  # (dataset, shrink_video_to_frames, fps) of each video dataset
    alpha_floors: list[float] = []  # the mask_min_value of each dataset whose alpha channel is its mask
    for number, item in enumerate(items if isinstance(items, list) else []):
        r = Section(f"datasets[{number}]", item, "datasets")
        folder = str(r.get("folder_path") or r.get("dataset_path") or "").strip()
        if not folder:
            notes.append(f"datasets[{number}] names no folder_path: not carried over")
            continue
        listed = folder if folder.lower().endswith(".json") else ""  # {"<image path>": {"caption": ...}} (sd-scripts' form)
        if listed and not (folder := metadata_folder(Path(listed).expanduser(), readable) or ""):
            notes.append(f"datasets[{number}]: {listed} could not be read here for its images' folder; add that folder as a "
                         "concept, with the file as its Captions file")
            continue
        extension = "." + str(r.get("caption_ext") or "txt").lstrip(".").lower()
        if extension not in (".txt", ".caption"):
            notes.append(f"datasets[{number}].caption_ext '{extension}': here captions are read from .txt, else .caption files")
        reg = r.flag("is_reg")
        word = "" if reg else str(r.get("trigger_word") or trigger or "").strip()  # ai-toolkit adds none to regularisation images
        text: dict[str, Any] = {"default_caption": str(r.get("default_caption") or ""), "trigger_word": word,
                                "caption_lines": "WHOLE",  # ai-toolkit reads a caption file whole
                                "enable_tag_shuffling": r.flag("shuffle_tokens"), "keep_tags_count": r.number("keep_tokens", 0, int)}
        if r.number("token_dropout_rate", 0.0):
            text.update(tag_dropout_enable=True, tag_dropout_mode="RANDOM", tag_dropout_probability=r.number("token_dropout_rate"))
            if word and not text["keep_tags_count"]:
                notes.append(f"datasets[{number}].token_dropout_rate: ai-toolkit adds the trigger word after dropping tokens; here "
                             "before, so it may be dropped (Keep tags 1 keeps it where it leads the caption)")
        repeats = max(1, r.number("num_repeats", 1, int))
        flip = r.flag("flip_x")
        if flip:  # ai-toolkit adds a flipped copy of each image: twice the images an epoch
            repeats *= 2
        if r.flag("flip_y"):
            notes.append(f"datasets[{number}].flip_y: here images are flipped horizontally only")
        if listed:  # the images it names, in their folder and its subfolders, with its captions
            text["captions_file"] = listed
            if r.flag("use_short_captions"):
                notes.append(f"datasets[{number}].use_short_captions: here each image's caption, not its caption_short")
        # its subfolders too, as ai-toolkit walks them (but for its generated `_controls` folders, said)
        concepts.append({"name": ("reg: " if reg else "") + (Path(folder).name or folder), "path": folder, "balancing": float(repeats),
                         "text": text, "image": {"enable_random_flip": flip}, "include_subdirectories": True})
        if not listed and _has_controls(Path(folder).expanduser(), readable):
            notes.append(f"datasets[{number}]: {folder} holds a _controls folder (ai-toolkit's generated control images, which "
                         "it does not train); here subfolders train, so move it out of the dataset folder")
        rates.add(r.number("caption_dropout_rate", 0.0))
        size = r.get("resolution")
        for value in size if isinstance(size, list) else [size if size is not None else 512]:
            try:
                sizes.append(int(float(value)))
            except (TypeError, ValueError):
                raise ConfigError(f"datasets[{number}].resolution: {value!r} is not a size (ai-toolkit config)") from None
        # a video model's image dataset: its images alone there (ai-toolkit's is_video: num_frames > 1 or auto_frame_count)
        if info.frame_step and r.number("num_frames", 1, int) <= 1 and not r.data.get("auto_frame_count"):
            concepts[-1]["image"]["media"] = "IMAGES"
        if r.number("num_frames", 1, int) > 1:
            frames.append(r.number("num_frames", 1, int))
            video_sets.append((number, r.flag("shrink_video_to_frames", True), r.number("fps", 24.0)))
            # its default: num_frames spread over each whole clip
            concepts[-1]["image"]["clip_spread"] = video_sets[-1][1]
        if reg:
            notes.append(f"datasets[{number}].is_reg: ai-toolkit trains a regularisation batch every other step; here it is a "
                         "concept of its own, shown as often as its images and Balancing say")
        if r.number("network_weight", 1.0) != 1.0:
            r.used.discard("network_weight")  # the LoRA's strength while this dataset trains: listed
        control = r.get("control_path")
        control = control[0] if isinstance(control, list) and len(control) == 1 else control
        if isinstance(control, str) and control.strip() and info.control_image:  # the source images, named as the edited ones
            concepts[-1]["image"]["control_folder"] = control.strip()
        elif control:
            notes.append(f"datasets[{number}].control_path: one folder of source images is read here (an image-editing model's "
                         "Control image folder); more than one, or for this model type, is not carried over")
        for key in ("mask_path", "control_path_1", "control_path_2", "control_path_3", "inpaint_path"):
            if r.get(key):
                notes.append(f"datasets[{number}].{key}: here a mask is `<image>-masklabel.png` beside each image, and one "
                             "control image a concept's (its Control image folder); put them there")
        if r.flag("alpha_mask"):  # its alpha channel as the loss's mask, transparent areas at mask_min_value
            concepts[-1]["image"]["alpha_mask"] = True
            alpha_floors.append(r.number("mask_min_value", 0.0))
        r.get("shrink_video_to_frames")
        r.get("fps")
        r.at_default("controls", [])
        left += r.left()
    if alpha_floors:  # ai-toolkit's masked loss: the mask, from mask_min_value up, scaled to a mean of 1 in each batch
        out.update(masked_training=True, unmasked_probability=0.0, unmasked_weight=min(alpha_floors), normalize_masked_area_loss=True)
        if len(set(alpha_floors)) > 1:
            notes.append(f"datasets' mask_min_value {sorted(set(alpha_floors))}: one Unmasked weight here, {min(alpha_floors):g}")
    rate = max(rates) if rates else 0.0
    out["caption_dropout_probability"] = rate  # ai-toolkit empties the whole caption, for every text encoder at once
    if rate and trigger:
        notes.append(f"caption_dropout_rate {rate:g}: ai-toolkit keeps the trigger word in a dropped caption; here the caption is "
                     "emptied whole")
    if len(rates) > 1:
        notes.append(f"caption_dropout_rate: the datasets' {sorted(rates)} are one rate here, {rate:g}")
    if sizes:
        if any(s < 64 for s in sizes):
            raise ConfigError(f"datasets: resolution {min(sizes)} is smaller than 64 px (ai-toolkit config)")
        out["resolution"] = ",".join(str(s - s % 8) for s in sorted(set(sizes)))
    if frames and info.frame_step:
        out["frames"] = str(max(frames))
        _clip_windows(video_sets, out, notes)
    return concepts, left


def _has_controls(folder: Path, readable: list[Path] | None) -> bool:
    """Whether ai-toolkit's `_controls` folder is in `folder` or its (non-hidden) subfolders."""
    if not may_read(folder, readable):
        return False
    for _, dirs, _ in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if "_controls" in dirs:
            return True
    return False


def _clip_windows(video_sets: list[tuple[int, bool, float]], out: dict[str, Any], notes: list[str]) -> None:
    """How ai-toolkit takes a clip's num_frames: spread over the whole clip (shrink_video_to_frames,
    its default: the concept's Spread frames over the clip), or at `fps` from a random start (its
    random window: Random clip window here)."""
    rates = sorted({fps for _, shrink, fps in video_sets if not shrink})
    if rates:  # its random window of frames at fps
        out.update(random_clip_window=True, frame_rate=float(rates[0]))
        if len(rates) > 1:
            notes.append(f"datasets' fps {rates}: one Clip frame rate here, {rates[0]:g}")


def samples(r: Section, out: dict[str, Any], trigger: str, job_name: str, info: FamilyInfo, every_scale: int) -> list[str]:
    """The sample prompts with ai-toolkit's defaults (512 x 512, guidance 7, 20 steps, seed 0,
    every 100 steps), `walk_seed` adding one per prompt, `[trigger]` replaced; a sample's `ctrl_img`
    the image it edits or starts from, where the model reads one."""
    if not r.data:
        return []
    neg = r.get("neg")
    defaults = {"negative_prompt": "" if neg in (None, False) else str(neg), "diffusion_steps": r.number("sample_steps", 20, int),
                "cfg_scale": r.number("guidance_scale", 7.0), "width": r.number("width", 512, int), "height": r.number("height", 512, int)}
    seed, walk, frames = r.number("seed", 0, int), r.flag("walk_seed"), r.number("num_frames", 1, int)
    items = r.get("samples") or [{"prompt": p} for p in r.get("prompts") or []]
    found, left = [], []
    for number, item in enumerate(items if isinstance(items, list) else []):
        item = Section(f"sample.samples[{number}]", item if isinstance(item, dict) else {"prompt": str(item)})
        prompt = str(item.get("prompt") or "").replace("[trigger]", trigger).replace("[name]", job_name).strip()
        if not prompt:
            continue
        sample = {**defaults, "prompt": prompt, "seed": item.number("seed", seed + number if walk else seed, int), "random_seed": False}
        for key, ours in (("width", "width"), ("height", "height"), ("sample_steps", "diffusion_steps")):
            if item.data.get(key) not in (None, ""):
                sample[ours] = item.number(key, None, int)
        if item.data.get("guidance_scale") not in (None, ""):
            sample["cfg_scale"] = item.number("guidance_scale")
        if item.get("neg") not in (None, False):
            sample["negative_prompt"] = str(item.data["neg"])
        sample["width"], sample["height"] = sample["width"] - sample["width"] % 8, sample["height"] - sample["height"] % 8
        if min(sample["width"], sample["height"]) < 64:
            raise ConfigError(f"sample.samples[{number}]: {sample['width']} x {sample['height']} is smaller than 64 px (ai-toolkit config)")
        count = item.number("num_frames", frames, int)
        if info.frame_step and count > 1:
            sample["frames"] = count
        image = item.get("ctrl_img") or item.get("ctrl_img_1")
        if image and info.reads_sample_image:
            sample["control_image"] = str(image)
        elif image:
            item.used.discard("ctrl_img")
            item.used.discard("ctrl_img_1")
        item.get("fps")
        item.at_default("network_multiplier", 1)
        item.at_default("ctrl_idx", 0)
        left += item.left()
        found.append(sample)
    if found:
        out["samples"] = found
    if out.get("sample_after") != 0:
        out.update(sample_after=max(1, r.number("sample_every", 100, int) // every_scale), sample_after_unit="STEP")
    for key in ("fps", "num_frames", "walk_seed"):
        r.get(key)
    r.at_default("network_multiplier", 1)
    r.at_default("guidance_rescale", 0.0)
    return left
