"""Concepts tab: a list with add / clone / remove / enable, each concept's settings, and its
statistics (images, captions, masks, sizes, aspect buckets; for a video model type also clips,
their frames at the run's sampling and their length; for an image-editing model type the
(image, `-control` image) pairs and the images without a control image). Torch-free: uses the data scan (PyAV)."""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from ..config.concept import ConceptConfig
from . import edit_log
from .charts import bucket_chart
from .form import Field, build_fields, config_from_values, edit_event, schema_fields, values_from_config
from .page_limits import concept_file_problems
from .uploads import forget_uploads
from .visibility import applies, conditional_fields

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..data.buckets import Bucketing

GROUPS = (("General", ""), ("Image augmentation", "image."), ("Text", "text."))
UPLOAD_NOTE = ("From this computer into the machine that trains: images with their `.txt` (or kohya's `.caption`) captions (and masks; "
               "or the folder's `captions.json` / `metadata.jsonl`), or a .zip of the folder. They go in the workspace's `datasets/<concept name>` folder, which becomes "
               "this concept's *Folder*.")


def concept_choices(concepts: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(f"{i + 1}. {c.get('name') or c.get('path') or '(unnamed)'}{'' if c.get('enabled', True) else ' (off)'}", i) for i, c in enumerate(concepts)]


def _shown_folder(folder: Path, workspace: Path) -> str:
    """The folder as the note names it: inside the workspace, relative to it."""
    try:
        return str(folder.resolve().relative_to(Path(workspace).resolve()))
    except ValueError:
        return str(folder)


def run_frame_sampling(config: dict[str, Any]):
    """The run's frame sampling for a video model type (None: an image family); a ValueError
    naming the field when Frames or the clip settings are not numbers."""
    from types import SimpleNamespace  # noqa: PLC0415

    from ..config.families import family_info  # noqa: PLC0415
    from ..data.video import run_sampling  # noqa: PLC0415

    info = family_info(config.get("model_type", ""))
    settings = SimpleNamespace(**{k: config[k] for k in ("frames", "frame_rate", "clip_start") if k in config})
    try:
        return run_sampling(settings, info.frame_step if info else None)
    except ValueError:
        raise ValueError("Frames, Clip frame rate or Clip start (training tab, Video clips) is not a number; set e.g. 25, 24 and 0") from None


def _seconds(total: float) -> str:
    return f"{total:.1f} s" if total < 60 else f"{int(total // 60)} min {total % 60:.0f} s"


def _clips_hint(concept: dict[str, Any]) -> str:
    """For an image model type: whether the folder holds clips, which only a video model type reads."""
    from ..data.scan import list_image_files  # noqa: PLC0415
    from ..data.video import is_video_name  # noqa: PLC0415

    folder = Path(str(concept.get("path") or "")).expanduser()
    try:
        clips = folder.is_dir() and any(is_video_name(p.name) for p in list_image_files(folder, bool(concept.get("include_subdirectories")), clips=True))
    except OSError:
        return ""
    return " It holds video clips: set Model type (Model tab) to a video model such as WAN_2_1 to train on them." if clips else ""


def concept_stats(concept: dict[str, Any], resolution: str, bucketing: Bucketing, sampling=None, control: bool = False,
                  depth: bool = False, condlabel: bool = False, masked: bool = False) -> tuple[str, list[tuple[str, int]]]:
    """Markdown statistics and (bucket, count) rows for one concept, bucketed as the run buckets
    (`bucketing`: Bucketing.from_config with the model type's step); with a video model type's
    frame `sampling` (run_frame_sampling) its clips are counted beside the images; with `control`
    (an image-editing model type) the pairs, and the images without a control image, named; with
    `depth` (a depth model type) how many images have their depth map beside them; with `condlabel`
    (an inpainting model with custom_conditioning_image) how many have a `-condlabel` image. With
    `masked` (masked training) and the concept's random mask rotate and crop, an image with a mask
    is bucketed by the cut around its mask, as the run's first variation cuts it (planning.py)."""
    from ..config.resolution import parse_resolutions  # noqa: PLC0415
    from ..data.errors import DataError  # noqa: PLC0415
    from ..data.scan import scan_concept  # noqa: PLC0415

    try:
        scan = scan_concept(ConceptConfig(**concept), sampling, control, depth, condlabel)
    except (DataError, ValueError, OSError) as err:
        return f"**Cannot read this concept:** {err}{_clips_hint(concept) if sampling is None else ''}", []
    items = scan.items
    if not items:
        return "No images found.", []
    image = concept.get("image") or {}
    if image.get("enable_resolution_override"):  # the concept's own resolution, as the run reads it
        resolution = str(image.get("resolution_override") or resolution)
    try:
        target = parse_resolutions(resolution)[0]  # a lone "WxH" stays a fixed size (config/resolution.FixedSize)
        cut = _rotate_crop_sizes(concept, scan, parse_resolutions(resolution), masked)
        buckets = Counter(bucketing.assign(*cut.get(n, (i.width, i.height)), target) for n, i in enumerate(items))
    except ValueError as err:  # a resolution or bucket step the run would refuse too
        return f"**Cannot bucket this concept:** {err}", []
    sizes = sorted((i.width * i.height, i.width, i.height) for i in items)
    clips = [i for i in items if i.sampling is not None]
    captioned = len(items) - len(scan.uncaptioned)
    if control:
        unpaired = len(scan.unpaired)
        head = (f"**{scan.pair_count} pair{'s' * (scan.pair_count != 1)}**, {unpaired} image{'s' * (unpaired != 1)} without a control "
                "image (`<name>-control.<ext>`; "
                f"skipped), {captioned} with captions, {len(scan.uncaptioned)} without, {scan.mask_count} masks")
    elif sampling is None:
        alpha = f" ({scan.alpha_mask_count} from their alpha channel: Alpha as mask)" if scan.alpha_mask_count else ""
        head = f"**{len(items)} images**, {captioned} with captions, {len(scan.uncaptioned)} without, {scan.mask_count} masks{alpha}"
    else:
        head = (f"**{len(clips)} clips, {len(items) - len(clips)} images** (trained as one frame), "
                f"{captioned} with captions, {len(scan.uncaptioned)} without")
    lines = [head]
    if scan.media_left:
        kind = str(image.get("media") or "ALL")
        lines.append(f"{scan.media_left} {'images' if kind == 'CLIPS' else 'clips'} of the folder are left out (Files trained: {kind})")
    if depth:
        lines.append(f"{scan.depth_count} images with a depth map beside them (`<name>-depth.<ext>`), "
                     f"{len(items) - scan.depth_count} estimated (the model's depth estimator)")
    if scan.transparent and not scan.alpha_mask_count:
        lines.append(f"{len(scan.transparent)} images have transparent pixels; they train on a white background (with Masked "
                     "training, Image augmentation → Alpha as mask makes their alpha channel their mask)")
    if scan.several_lines:
        lines.append(f"{scan.several_lines} caption files hold several lines: each line is a caption of its own, one drawn "
                     "per epoch (OneTrainer's rule), so a paragraph split over lines trains in pieces; Text augmentation → "
                     "Caption file lines reads them as kohya (FIRST) or diffusion-pipe (WHOLE) does")
    unmatched = f"; {scan.index_unmatched} of its entries name no image here" if scan.index_unmatched else ""
    if scan.caption_index and str((concept.get("text") or {}).get("captions_file") or "").strip():
        left = f"; {scan.named_files_left} files of the folder it does not name are left out" if scan.named_files_left else ""
        lines.append(f"{scan.from_index} images captioned by its Captions file `{scan.caption_index[0]}`, which names the images "
                     f"that train (caption files beside them are not read{left}{unmatched})")
    elif scan.caption_index:
        lines.append(f"{scan.from_index} images captioned by the folder's {' and '.join(f'`{n}`' for n in scan.caption_index)} "
                     f"(a caption file beside an image wins{unmatched})")
    if scan.two_caption_files:
        lines.append(f"{len(scan.two_caption_files)} images have both a `.txt` and a kohya `.caption` file: the `.txt` is read")
    if scan.kohya_folders:
        lines.append("**kohya folder:** " + scan.kohya_folders.split(": ", 1)[1])
    if cut:
        lines.append(f"{len(cut)} images bucketed by the cut around their mask (Random mask rotate and crop; each image "
                     "variation and epoch cuts anew, so the buckets below are the first variation's)")
    if condlabel:
        labelled = sum(1 for item in items if item.condlabel_path is not None)
        lines.append(f"{labelled} images with a conditioning image beside them (`<name>-condlabel.<ext>`), "
                     f"{len(items) - labelled} conditioned on their masked image")
    if clips:
        rate = "spread over each clip" if clips[0].sampling.spread else f"{sampling.fps:g} fps"  # (Spread frames over the clip)
        lines.append(f"clips: {sum(i.frames for i in clips)} frames in all at {sampling.frames} frames, {rate}"
                     f"{f' from {sampling.start:g} s' if sampling.start else ''} (the run's Frames); "
                     f"{_seconds(sum(i.duration for i in clips))} of video in all")
    lines.append(f"sizes from {sizes[0][1]}x{sizes[0][2]} to {sizes[-1][1]}x{sizes[-1][2]}")
    if scan.unpaired:
        lines.append("**without a control image:** " + ", ".join(p.name for p in scan.unpaired[:20])
                     + (f" and {len(scan.unpaired) - 20} more" if len(scan.unpaired) > 20 else ""))
    if scan.skipped:
        lines.append("**skipped:** " + ", ".join(f"{s.path.name} ({s.reason})" for s in scan.skipped[:20]))
    rows = [(f"{bw}x{bh}", n) for (bh, bw), n in sorted(buckets.items())]
    return "\n\n".join(lines), rows


def _rotate_crop_sizes(concept: dict[str, Any], scan, resolutions, masked: bool) -> dict[int, tuple[int, int]]:
    """{item index: (width, height) of its rotate-and-crop cut} for the images with a mask, when the
    run cuts them (masked training and the concept's option); empty otherwise."""
    from ..data.planning import PreparedConcept  # noqa: PLC0415

    prepared = PreparedConcept(config=ConceptConfig(**concept), scan=scan, resolutions=resolutions, masked=masked)
    if not prepared.mask_augment.rotate_crop:
        return {}
    draws = {n: prepared.cached_mask_draw(n, 0) for n, item in enumerate(scan.items) if item.mask_path is not None}
    return {n: prepared.size(n, draw) for n, draw in draws.items() if draw is not None and draw.box is not None}


def _make_demo_data(concept: dict[str, Any]) -> None:
    """The demo preset's concept folder (`.../demo-data/shapes`) is drawn when a run starts; its
    statistics draw it too, so a new user's first look at the Concepts tab shows the demo's images,
    not a missing folder. A folder that exists is left as it is."""
    from ..data.demo import ensure_demo_dataset, is_demo_folder  # noqa: PLC0415  (PIL only)

    path = Path(str(concept.get("path") or "")).expanduser()
    if is_demo_folder(path) and not path.exists():
        with contextlib.suppress(OSError):  # the statistics then say the folder cannot be read
            ensure_demo_dataset(path)


class ConceptsTab:
    def __init__(self, workspace: Path | None = None, roots: Callable[[], list[Path]] | None = None):
        self.workspace = Path(workspace) if workspace is not None else Path.cwd()
        self.roots = roots  # the page's folders: a text file a concept names elsewhere is not read (None: any)
        infos = schema_fields("concepts[].")
        self.fields: dict[str, Field] = {}
        with gr.Row(elem_classes="ot-tools"):
            self.selector = gr.Dropdown(label="Concept", choices=[], value=None, interactive=True, elem_id="concept-select", scale=3)
            self.add_button = gr.Button("Add", elem_id="concept-add", scale=0)
            self.clone = gr.Button("Clone", elem_id="concept-clone", scale=0)
            self.remove_button = gr.Button("Remove", variant="stop", elem_id="concept-remove", scale=0)
        # with no concept there are no fields to edit (an edit would belong to no concept): a note instead
        self.empty = gr.Markdown("**No concept yet.** Press **Add** for one: a folder of training images and their captions.",
                                 visible=False, elem_id="concept-none")
        self.groups: list[gr.Accordion] = []
        for title, prefix in GROUPS:
            group = [i for i in infos if i.path.startswith("concepts[]." + prefix) and (prefix or i.path.count(".") == 1)]
            with gr.Accordion(title, open=not prefix) as accordion, gr.Column(elem_classes="ot-grid"):  # 2-3 fields a line on a wide screen
                for path, f in build_fields(group, "concept").items():
                    self.fields[path[len("concepts[]."):]] = f
            if not prefix:
                with accordion:
                    self._build_upload()
            self.groups.append(accordion)
        with gr.Accordion("Statistics", open=True) as accordion:
            self.groups.append(accordion)
            self.refresh = gr.Button("Refresh statistics", elem_id="concept-stats-refresh")
            self.stats = gr.Markdown("")
            self.buckets = gr.BarPlot(x="bucket", y="images", title="Aspect buckets", height=220, elem_id="concept-buckets")
        self.outputs = [self.selector, *(f.component for f in self.fields.values()), self.empty, self.upload_note, *self.groups]
        # the fields' edits, logged in the browser with the concept selected (ui/edit_log.py)
        self.log, self.applied = edit_log.build("concept-edit-log")
        self.inputs = [self.selector, self.log, self.applied]  # what Start reads of this tab
        self.autosave = lambda config: None

    def _build_upload(self) -> None:
        """Images, captions and .zip archives sent from the browser into the concept's folder
        (tools/dataset_upload.py): how a share link's or Colab's user gets a dataset there."""
        from ..config.media_files import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS  # noqa: PLC0415

        with gr.Row(elem_classes="ot-upload"):  # on a phone the note goes under the button (page.CSS)
            self.upload_button = gr.UploadButton(
                "Upload images…", file_count="multiple", file_types=[*IMAGE_EXTENSIONS, *VIDEO_EXTENSIONS, ".txt", ".caption", ".zip"],
                elem_id="concept-upload", scale=0, min_width=200)
            self.upload_note = gr.Markdown(UPLOAD_NOTE, elem_id="concept-upload-note")

    def upload(self, config: dict[str, Any], index: int | None, log: str | None, applied: int | None,
               files: list[str] | None) -> tuple[dict[str, Any], int | None, str, dict[str, Any]]:
        """Adds uploaded `files` to the selected concept's upload folder and makes it the concept's
        folder. Returns (config, the edit log's applied count, the note, the folder fields' new
        values by key). The log's pending edits are applied first: a folder typed just before is
        replaced, not restored by its edit afterwards."""
        from ..tools.dataset_upload import UploadError, add_uploads, summary, upload_folder  # noqa: PLC0415

        new = edit_log.pending(log, applied)
        config, applied = self.apply_log(config, new), (new[-1][0] if new else applied)
        if new:  # applied here, so saved here (the edit handler will not apply them again)
            self.autosave(config)
        concepts = config.get("concepts", [])
        if index is None or not (0 <= index < len(concepts)):
            return config, applied, "Add a concept first (**Add**), then upload its images.", {}
        if not files:
            return config, applied, "No file arrived.", {}
        concept = concepts[index]
        try:
            folder = upload_folder(self.workspace, str(concept.get("path") or ""), str(concept.get("name") or ""))
            existed = folder.exists()
            result = add_uploads([Path(f) for f in files], folder)
        except UploadError as err:
            return config, applied, f"**Nothing was added:** {err}", {}
        except OSError as err:
            return config, applied, f"**The upload failed:** {err}. The concept's folder is unchanged.", {}
        finally:
            forget_uploads(files)
        shown = _shown_folder(folder, self.workspace)
        if not result.written and not result.same:
            if not existed:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            return config, applied, summary(result, shown) + "\n\nThe concept's folder is unchanged.", {}
        config = copy.deepcopy(config)
        changed = {"path": str(folder)}
        if result.in_subfolders:
            changed["include_subdirectories"] = True
        config["concepts"][index] = {**concepts[index], **changed}
        self.autosave(config)
        note = summary(result, shown)
        if result.in_subfolders and not concept.get("include_subdirectories"):
            note += "\n\nSome images are in subfolders: *Include subfolders* is now on."
        return config, applied, note, changed

    def show(self, config: dict[str, Any], index: int | None) -> dict:
        concepts = config.get("concepts", [])
        if index is None or not (0 <= index < len(concepts)):
            index = 0 if concepts else None
        values = values_from_config(self.fields, concepts[index]) if index is not None else {}
        for key, field in self.fields.items():  # a field that means nothing for the model type (the control image folder)
            if f"concepts[].{key}" in conditional_fields() and field.component in values:
                values[field.component] = gr.update(value=values[field.component], visible=applies(f"concepts[].{key}", config))
        return {self.selector: gr.update(choices=concept_choices(concepts), value=index), **values,
                self.empty: gr.update(visible=index is None), self.upload_note: UPLOAD_NOTE, **{group: gr.update(visible=index is not None) for group in self.groups}}

    def apply(self, config: dict[str, Any], values: dict) -> dict[str, Any]:
        """The config with the selected concept as the form shows it: the fields' values among
        `values` (tests pass them), then the logged edits not yet applied."""
        index = values.get(self.selector)
        concepts = config.get("concepts", [])
        if index is not None and 0 <= index < len(concepts):
            config = copy.deepcopy(config)
            config["concepts"][index] = config_from_values(self.fields, values, concepts[index])
        return self.apply_log(config, edit_log.pending(values.get(self.log), values.get(self.applied)))

    def apply_log(self, config: dict[str, Any], entries: list) -> dict[str, Any]:
        """Logged edits `(seq, field, value, concept index)`, each to the concept it was made on."""
        for _, key, value, *index in entries:
            concepts = config.get("concepts", [])
            if key in self.fields and index and isinstance(index[0], int) and 0 <= index[0] < len(concepts):
                config = copy.deepcopy(config)
                field = self.fields[key]
                config["concepts"][index[0]] = config_from_values({key: field}, {field.component: value}, concepts[index[0]])
        return config

    # --- handlers: plain values in, (config, selected index) out -------------------------------
    def edit(self, config: dict[str, Any], index: int | None, values: dict, only: list[str] | None = None) -> dict[str, Any]:
        """The concept at `index` with the form's values: of the fields named in `only`, else of all."""
        config = copy.deepcopy(config)
        concepts = config.setdefault("concepts", [])
        if index is None or not (0 <= index < len(concepts)):
            return config
        fields = self.fields if only is None else {key: self.fields[key] for key in only}
        concepts[index] = config_from_values(fields, values, concepts[index])
        self.autosave(config)
        return config

    def add(self, config: dict[str, Any], index: int | None, clone: bool = False) -> tuple[dict[str, Any], int]:
        config = copy.deepcopy(config)
        concepts = config.setdefault("concepts", [])
        if clone and index is not None and 0 <= index < len(concepts):
            new = copy.deepcopy(concepts[index])
            new["name"] = (new.get("name") or "concept") + " copy"
        else:
            new = ConceptConfig(name=f"concept {len(concepts) + 1}").model_dump(mode="json")
        concepts.append(new)
        self.autosave(config)
        return config, len(concepts) - 1

    def remove(self, config: dict[str, Any], index: int | None) -> tuple[dict[str, Any], int | None]:
        config = copy.deepcopy(config)
        concepts = config.setdefault("concepts", [])
        if index is not None and 0 <= index < len(concepts):
            concepts.pop(index)
        self.autosave(config)
        return config, (min(index, len(concepts) - 1) if concepts and index is not None else None)

    def statistics(self, config: dict[str, Any], index: int | None):
        concepts = config.get("concepts", [])
        if index is None or not (0 <= index < len(concepts)):
            return "Select a concept.", None
        if (roots := getattr(self, "roots", None)) is not None and (refused := concept_file_problems(concepts[index], roots())):
            return "**Cannot read this concept:** " + "; ".join(refused), None
        _make_demo_data(concepts[index])
        import pandas as pd  # noqa: PLC0415

        try:
            sampling = run_frame_sampling(config)
        except ValueError as err:
            return f"**Cannot count clips:** {err}", None
        from ..config.families import family_info  # noqa: PLC0415
        from ..data.buckets import Bucketing  # noqa: PLC0415

        info = family_info(config.get("model_type", ""))
        bucketing = Bucketing.from_config(config, info.bucket_step if info else None)
        text, rows = concept_stats(concepts[index], config.get("resolution", "512"), bucketing, sampling,
                                   control=bool(info and info.control_image), depth=bool(info and info.depth_maps),
                                   condlabel=bool(info and info.inpainting and config.get("custom_conditioning_image")),
                                   masked=bool(config.get("masked_training")))
        return text, bucket_chart(pd.DataFrame(rows, columns=["bucket", "images"]))

    def wire(self, config_state: gr.State, autosave) -> None:
        self.autosave = autosave
        outputs = self.outputs
        show = self.show

        def edit(values: dict) -> dict:
            new = edit_log.pending(values[self.log], values[self.applied])
            if not new:
                return gr.skip()
            old = values[config_state]
            config = self.apply_log(old, new)
            done = {self.applied: new[-1][0]}
            if config == old:  # the page filling the fields in (a concept shown): nothing to save
                return done
            self.autosave(config)
            # a renamed concept is renamed in the selector too (its choices are the names)
            choices = concept_choices(config.get("concepts", []))
            same = choices == concept_choices(old.get("concepts", []))
            return {config_state: config, self.selector: gr.update() if same else gr.update(choices=choices), **done}

        self.selector.input(show, [config_state, self.selector], outputs)
        # Each field's edit is logged in the browser with the selected concept (no server round
        # trip); one handler applies the log's new entries. "multiple": an edit made while the
        # previous one is saved runs after it, so none is dropped.
        for key, f in self.fields.items():
            edit_event(f.component)(None, [f.component, self.selector], self.log, js=edit_log.relay_js(key, "concepts", indexed=True),
                                    queue=False, trigger_mode="multiple", show_progress="hidden")
        self.log.change(edit, {config_state, self.log, self.applied}, [config_state, self.selector, self.applied],
                        trigger_mode="multiple", show_progress="hidden", show_progress_on=[self.selector])
        # One handler per button, returning the config with the selector's new choices *and*
        # value: setting the value first (to an index the old choices lack) made gradio refuse it
        # ("Value: 2 is not in the list of choices") and mark every field of the tab as failed.
        listed = [config_state, *outputs]

        def after(config: dict[str, Any], index: int | None) -> dict:
            return {config_state: config, **show(config, index)}

        self.add_button.click(lambda c, i: after(*self.add(c, i, False)), [config_state, self.selector], listed)
        self.clone.click(lambda c, i: after(*self.add(c, i, True)), [config_state, self.selector], listed)
        self.remove_button.click(lambda c, i: after(*self.remove(c, i)), [config_state, self.selector], listed)
        self.refresh.click(self.statistics, [config_state, self.selector], [self.stats, self.buckets])

        def upload(config: dict[str, Any], index: int | None, log: str | None, applied: int | None, files) -> dict:
            config, applied, note, changed = self.upload(config, index, log, applied, files)
            out = {config_state: config, self.applied: applied, self.upload_note: note, self.upload_button: None,
                   **{self.fields[key].component: value for key, value in changed.items()}}
            if changed:
                out[self.stats], out[self.buckets] = self.statistics(config, index)
            return out

        changeable = [self.fields["path"].component, self.fields["include_subdirectories"].component]
        self.upload_button.upload(upload, [config_state, self.selector, self.log, self.applied, self.upload_button],
                                  [config_state, self.applied, self.upload_note, self.upload_button, *changeable, self.stats, self.buckets])
