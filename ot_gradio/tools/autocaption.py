"""Automatic captions: BLIP and BLIP-2 (transformers), the WD14 tagger (onnxruntime), and chat
vision-language models (JoyCaption, Qwen2.5-VL: vlm_caption.py).

Runs as the "autocaption" job (a worker process for the page, inline for the command line).
Decisions, after OneTrainer's captioning tools:
- A caption is ``<stem>.txt`` next to its image; it is written through the caption editor's
  `write_caption`, so every write is atomic and the previous caption is kept in
  ``.ot_captions/backup/`` (the same place the editor keeps its backups).
- Modes: "replace" writes every image's caption, "missing" only images without a (non-empty)
  caption, "add" appends the new caption as one more line (a caption file holds one caption per
  line and training picks one line per epoch, under the concept's Caption file lines EACH, the
  default; FIRST reads only the first line, WHOLE the file as one caption).
- For BLIP/BLIP-2 the initial caption is the prompt the model continues; for WD14 it is put in
  front of the tags. Prefix and postfix are then glued on as typed (the user owns spaces/commas).
- WD14 follows OneTrainer: the top rating tag, then character tags, then general tags, each
  sorted by confidence, underscores as spaces, parentheses NOT escaped (captions are for
  training, not for A1111 prompts). Kaomoji tags of <= 3 characters keep their underscores
  (kohya's rule: ``^_^`` is not ``^ ^``). Images are padded to a white square first (the tagger
  was trained on padded images; OneTrainer's plain resize squashes them).
- Heavy imports (torch, transformers, onnxruntime) happen only when a captioner loads.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ..data.captions import caption_lines, read_text
from ..data.scan import list_image_files
from .caption_models import CAPTIONERS, Captioner, hub_offline, looks_local, not_found, option, pick_device, register, weights_source
from .captions import caption_file, index_captions, write_caption
from .jobs import Job, JobError

MODES = ("replace", "missing", "add")
__all__ = ["CAPTIONERS", "MODES", "looks_local", "run_job"]


class TransformersCaptioner(Captioner):
    """BLIP and BLIP-2: an image processor + tokenizer and a generate()-ing model."""

    model_class = ""

    def load(self, path: str, device: str) -> None:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        source, cached_only = weights_source(self, path)
        self.target = device
        self.dtype = torch.float16 if device.startswith("cuda") else torch.float32
        try:
            self.processor = transformers.AutoProcessor.from_pretrained(source, **cached_only)
            model_cls = getattr(transformers, self.model_class)
            self.model = model_cls.from_pretrained(source, dtype=self.dtype, **cached_only)
        except Exception as err:  # noqa: BLE001 - offline, unknown id, an incomplete or foreign folder: the same advice
            raise not_found(self, path, err) from None
        self.model.to(device).eval()

    def caption(self, images: list[Any], initial: str, names: list[str] | None = None) -> list[str]:
        import torch  # noqa: PLC0415

        out = []
        for image in images:
            kwargs = {"text": initial} if initial else {}
            inputs = self.processor(images=image, return_tensors="pt", **kwargs).to(self.target)
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
            with torch.no_grad():
                tokens = self.model.generate(**inputs, max_new_tokens=int(option(self.options, "max_new_tokens", 40)),
                                             num_beams=int(option(self.options, "num_beams", 1)))
            out.append(continue_prompt(self.processor, inputs.get("input_ids"), tokens[0], initial))
        return out


def continue_prompt(processor: Any, input_ids: Any, tokens: Any, initial: str) -> str:
    """The initial caption as typed plus what the model generated after it.

    Both models return the prompt tokens in front of the new ones, lower-cased by BLIP's
    tokenizer; the typed prompt is kept and only the continuation is taken from the output."""
    text = processor.decode(tokens, skip_special_tokens=True)
    if not initial or input_ids is None:
        return text.strip()
    prompt = processor.decode(input_ids[0], skip_special_tokens=True)
    if not text.startswith(prompt):
        return text.strip()
    return (initial + text[len(prompt):]).strip()


@register("blip")
class BlipCaptioner(TransformersCaptioner):
    label = "BLIP"
    default_path = "Salesforce/blip-image-captioning-large"
    model_class = "BlipForConditionalGeneration"


@register("blip2")
class Blip2Captioner(TransformersCaptioner):
    label = "BLIP-2"
    default_path = "Salesforce/blip2-opt-2.7b"
    model_class = "Blip2ForConditionalGeneration"


@register("wd14")
class WD14Captioner(Captioner):
    """SmilingWolf's WD tagger: an ONNX classifier over Danbooru tags (selected_tags.csv)."""

    label = "WD14"
    default_path = "SmilingWolf/wd-v1-4-vit-tagger-v2"
    download_hint = "model.onnx selected_tags.csv "
    FILES = ("model.onnx", "selected_tags.csv")

    def device(self, device: str) -> str:
        """onnxruntime, not torch, decides whether the GPU is usable (keeps torch out of this job)."""
        import onnxruntime  # noqa: PLC0415

        return pick_device(device, "CUDAExecutionProvider" in onnxruntime.get_available_providers())

    def files(self, path: str) -> tuple[str, str]:
        local = Path(path).expanduser()
        if local.is_file() and local.suffix.lower() == ".onnx":  # the model file itself: its tags lie next to it
            local = local.parent
        if local.is_dir():
            missing = [name for name in self.FILES if not (local / name).is_file()]
            if missing:
                raise JobError(f"WD14: folder '{path}' has no {' and no '.join(missing)}. Download them with "
                               f"`hf download {self.default_path} {' '.join(self.FILES)} --local-dir '{path}'`")
            return str(local / self.FILES[0]), str(local / self.FILES[1])
        if looks_local(path):
            raise not_found(self, path)
        from huggingface_hub import hf_hub_download  # noqa: PLC0415

        cached_only = hub_offline()
        try:
            return (hf_hub_download(path, self.FILES[0], local_files_only=cached_only),
                    hf_hub_download(path, self.FILES[1], local_files_only=cached_only))
        except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated: all end in the same advice
            raise not_found(self, path, err) from None

    def load(self, path: str, device: str) -> None:
        import onnxruntime  # noqa: PLC0415

        model_file, tags_file = self.files(path)
        providers = ["CPUExecutionProvider"]
        if device.startswith("cuda") and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        try:
            self.session = onnxruntime.InferenceSession(model_file, providers=providers)
        except Exception as err:  # noqa: BLE001 - a corrupt or partial download
            raise JobError(f"WD14: '{model_file}' is not a loadable ONNX model ({err}); download it again") from None
        self.read_tags(tags_file)
        shape = self.session.get_inputs()[0].shape  # [batch, height, width, 3]
        self.size = shape[1] if isinstance(shape[1], int) and shape[1] > 0 else 448

    def read_tags(self, tags_file: str) -> None:
        self.names: list[str] = []
        self.categories: list[str] = []
        with open(tags_file, newline="", encoding="utf-8") as file:
            for row in csv.DictReader(file):
                self.names.append(row["name"])
                self.categories.append(str(row["category"]).strip())
        if not self.names:
            raise JobError(f"WD14: '{tags_file}' holds no tags; download selected_tags.csv again")

    def prepare(self, image: Any) -> Any:
        """Pad to a white square, resize, BGR float32 0..255 (what the tagger was trained on)."""
        import numpy as np  # noqa: PLC0415
        from PIL import Image  # noqa: PLC0415

        side = max(image.size)
        square = Image.new("RGB", (side, side), (255, 255, 255))
        square.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
        square = square.resize((self.size, self.size), Image.BICUBIC)
        return np.asarray(square, dtype=np.float32)[:, :, ::-1]

    def caption(self, images: list[Any], initial: str, names: list[str] | None = None) -> list[str]:
        import numpy as np  # noqa: PLC0415

        batch = np.stack([self.prepare(image) for image in images])
        entry = self.session.get_inputs()[0].name
        probs = self.session.run([self.session.get_outputs()[0].name], {entry: batch})[0]
        tags = [self.tags_of(row) for row in probs]
        lead = initial.strip().rstrip(",").strip()
        return [", ".join(([lead] if lead else []) + row) for row in tags]

    def tags_of(self, probs: Any) -> list[str]:
        general = option(self.options, "general_threshold", 0.35)
        character = option(self.options, "character_threshold", 0.85)
        picked = list(zip(self.names, self.categories, (float(p) for p in probs), strict=False))
        ratings = [(p, n) for n, c, p in picked if c == "9"]
        chars = sorted(((p, n) for n, c, p in picked if c == "4" and p > character), reverse=True)
        gens = sorted(((p, n) for n, c, p in picked if c == "0" and p > general), reverse=True)
        out = [max(ratings)[1]] if ratings and self.options.get("rating_tag", True) else []
        return [tag_text(n) for n in out + [n for _, n in chars] + [n for _, n in gens]]


def tag_text(name: str) -> str:
    return name.replace("_", " ") if len(name) > 3 else name


# --- the job ---------------------------------------------------------------------------------
def _existing(image: Path, indexed: dict[str, str], folder: Path) -> tuple[str, ...]:
    """The image's captions as training reads them: its caption file's lines, else those of the
    folder's captions.json / metadata.jsonl (tools/captions.py's `index_captions`)."""
    path = caption_file(image)
    if path.is_file():
        return caption_lines(read_text(path)[0])
    return caption_lines(indexed.get(image.relative_to(folder).as_posix(), ""))


def new_text(image: Path, caption: str, mode: str, existing: tuple[str, ...] = ()) -> str:
    """The caption file's new content for `mode` ("add" keeps the old captions, adds one)."""
    if mode == "add" and existing:
        lines = list(existing)
        return "\n".join(lines + ([caption] if caption not in lines else []))
    return caption


def check_params(params: dict[str, Any]) -> tuple[Path, str, str, str]:
    folder = Path(str(params.get("folder") or "")).expanduser()
    if not str(params.get("folder") or "").strip() or not folder.is_dir():
        raise JobError(f"folder: '{params.get('folder') or ''}' is not an existing folder; give the folder of your images")
    model = str(params.get("model") or "blip").strip().lower()
    if model not in CAPTIONERS:
        raise JobError(f"model: '{model}' is not one of {', '.join(CAPTIONERS)}")
    mode = str(params.get("mode") or "missing").strip().lower()
    if mode not in MODES:
        raise JobError(f"mode: '{mode}' is not one of {', '.join(MODES)}")
    path = str(params.get("model_path") or "").strip() or CAPTIONERS[model].default_path
    return folder.resolve(), model, mode, path


def run_job(params: dict[str, Any], job: Job) -> dict[str, Any]:
    """Caption a folder's images and clips (a clip by its middle frame); returns counts and the
    names of the files that failed."""
    from ..data.images import load_rgb  # noqa: PLC0415
    from ..data.video import is_video_name, middle_frame  # noqa: PLC0415

    folder, model, mode, path = check_params(params)
    images = list_image_files(folder, bool(params.get("include_subfolders")), clips=True)
    if not images:
        raise JobError(f"folder: no images in '{folder}'" + ("" if params.get("include_subfolders") else " (subfolders not included)"))
    indexed = index_captions(folder, bool(params.get("include_subfolders")))
    todo = [image for image in images if not (mode == "missing" and _existing(image, indexed, folder))]
    skipped = len(images) - len(todo)
    result: dict[str, Any] = {"folder": str(folder), "model": model, "mode": mode, "total": len(images), "written": 0,
                              "skipped": skipped, "failed": 0, "failed_files": [], "cancelled": False}
    if todo:
        captioner = CAPTIONERS[model](params)
        job.progress(0, len(todo), f"loading {captioner.label} from {path}")
        captioner.load(path, captioner.device(str(params.get("device") or "auto")))
        job.log(f"{captioner.label} loaded from {path}")
        initial = str(params.get("initial_caption") or "")
        prefix, postfix = str(params.get("prefix") or ""), str(params.get("postfix") or "")
        for done, image in enumerate(todo):
            if job.cancelled():
                result["cancelled"] = True
                break
            name = image.relative_to(folder).as_posix()
            job.progress(done, len(todo), name)
            try:
                picture = middle_frame(image) if is_video_name(image.name) else load_rgb(image)
                caption = (prefix + captioner.caption([picture], initial, names=[name])[0] + postfix).strip()
                write_caption(image, new_text(image, caption, mode, _existing(image, indexed, folder)))
                result["written"] += 1
            except Exception as err:  # noqa: BLE001 - one bad image (unreadable, odd size, locked caption) must not stop the rest
                result["failed"] += 1
                result["failed_files"].append(name)
                job.log(f"{name}: {type(err).__name__}: {err}")
        job.progress(result["written"] + result["failed"], len(todo), "cancelled" if result["cancelled"] else "done")
    result["message"] = summary(result)
    return result


def summary(result: dict[str, Any]) -> str:
    text = f"{result['written']} captions written, {result['skipped']} skipped, {result['failed']} failed"
    if result.get("cancelled"):
        text += " (cancelled; the captions written are kept)"
    if result.get("failed_files"):
        shown = ", ".join(result["failed_files"][:10])
        text += f": {shown}" + (" ..." if len(result["failed_files"]) > 10 else "")
    return text


from . import vlm_caption  # noqa: E402, F401  (registers JoyCaption and Qwen2.5-VL after these; imports nothing heavy)
