"""Tools > Video: clips or images from long videos into a concept folder (tools/video_extract.py),
in a worker process through a JobPanel. The form is checked here first (paths inside the page's
folders, times and numbers), so a typo is named before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from ..tools.jobs import JobError
from ..tools.video_download import HEIGHTS
from ..tools.video_download import options_from as download_options
from ..tools.video_extract import options_from
from .job_panel import JobPanel
from .tools_tab import ToolInputError, ToolsContext, launch_checked

MODE_CHOICES = [("Clips, for video models (Wan, HunyuanVideo, LTX-2)", "clips"), ("Images, for image models", "images")]
SHOWN = 24  # outputs shown in the gallery
HEIGHT_CHOICES = [(f"{h}p", h) for h in HEIGHTS] + [("the best there is", 0)]


class VideoTool:
    def __init__(self, ctx: ToolsContext):
        self.ctx = ctx
        gr.Markdown("Training data from long videos: split into clips at the cuts, or take frames as images, into a concept's "
                    "folder. New files are numbered after those already there: nothing is overwritten.")
        folders = ctx.concept_folders(ctx.config)
        self._download_form()
        with gr.Row(elem_classes="ot-wrap"):  # a phone: one field a line (page.CSS)
            self.source = gr.Textbox(label="Video", scale=3, elem_id="video-source",
                                     info="a video file or a folder of them (.mp4, .webm, .mov, .mkv...)")
            self.recursive = gr.Checkbox(label="Include subfolders", value=False, elem_id="video-recursive")
        with gr.Row(elem_classes="ot-wrap"):
            self.output = gr.Dropdown(label="Output folder", choices=folders, value=folders[0] if folders else "", allow_custom_value=True,
                                      scale=3, elem_id="video-output", info="a concept folder, or type a path (made if missing)")
            self.subfolders = gr.Checkbox(label="A folder per video", value=False, elem_id="video-subfolders")
        with gr.Row(elem_classes="ot-wrap"):
            self.mode = gr.Radio(MODE_CHOICES, value="clips", label="Make", elem_id="video-mode")
            self.start = gr.Textbox(label="From", placeholder="0:00", elem_id="video-start",
                                    info="seconds, m:ss or h:mm:ss; empty: the beginning")
            self.end = gr.Textbox(label="To", placeholder="the end", elem_id="video-end", info="empty: the end")
        with gr.Row(visible=True, elem_classes="ot-wrap") as self.clip_row:
            self.max_seconds = gr.Number(label="Max clip length (s)", value=5, minimum=0.5, elem_id="video-max-seconds",
                                         info="a longer scene is split into equal clips no longer than this")
            self.split_cuts = gr.Checkbox(label="Split at cuts", value=True, elem_id="video-split-cuts",
                                          info="no clip runs across a cut; pieces under 0.5 s are left out")
            self.fps = gr.Number(label="Frame rate", value=0, minimum=0, elem_id="video-fps", info="frames a second; 0: the video's")
        with gr.Row(visible=False, elem_classes="ot-wrap") as self.image_row:
            self.per_second = gr.Number(label="Images per second", value=1, minimum=0.01, elem_id="video-per-second",
                                        info="taken at jittered times")
            self.blur_drop = gr.Slider(0, 0.95, value=0.2, step=0.05, label="Blurriest left out", elem_id="video-blur-drop",
                                       info="the fraction of the frames taken with the least detail")
        with gr.Row(elem_classes="ot-wrap"):
            self.borders = gr.Checkbox(label="Remove black borders", value=False, elem_id="video-borders",
                                       info="letterbox and pillarbox bars")
            self.crop = gr.Slider(0, 0.5, value=0, step=0.05, label="Crop variation", elem_id="video-crop",
                                  info="each output cut to an aspect ratio up to this far from the video's; 0: whole frame")
            self.seed = gr.Number(label="Seed", value=42, precision=0, minimum=0, elem_id="video-seed")
            self.start_button = gr.Button("Start", variant="primary", scale=0, elem_id="video-start-button")
        self.summary = gr.Markdown("", elem_id="video-summary")
        self.gallery = gr.Gallery(interactive=False, label="Made (the first)", columns=6, height=320, elem_id="video-gallery")
        self.panel = JobPanel(ctx.jobs, "video", self.render_result, [self.summary, self.gallery])
        self.panel.wire()
        self.download_panel.wire(self.render_download, [self.download_summary, self.source])
        self.download_button.click(self.on_download, self.download_inputs, self.download_panel.launch_outputs)
        self.mode.change(lambda mode: (gr.update(visible=mode == "clips"), gr.update(visible=mode == "images")), self.mode,
                         [self.clip_row, self.image_row], show_progress="hidden")
        self.inputs = {self.source, self.recursive, self.output, self.subfolders, self.mode, self.start, self.end, self.max_seconds,
                       self.split_cuts, self.fps, self.per_second, self.blur_drop, self.borders, self.crop, self.seed, ctx.config_state}
        self.start_button.click(self.on_start, self.inputs, self.panel.launch_outputs)
        ctx.config_state.change(lambda config, current: gr.update(choices=ctx.concept_folders(config), value=current),
                                [ctx.config_state, self.output], [self.output], show_progress="hidden")

    def _download_form(self) -> None:
        """Download: videos from their links with yt-dlp (tools/video_download.py); when done, the
        folder becomes the Video field's, ready to cut."""
        with gr.Accordion("Download videos from links (yt-dlp)", open=False, elem_id="video-download"):
            with gr.Row(elem_classes="ot-wrap"):
                self.links = gr.Textbox(label="Links", lines=3, scale=3, elem_id="video-links",
                                        placeholder="https://www.youtube.com/watch?v=...",
                                        info="one a line: a video, a playlist or a channel on YouTube, Vimeo, Twitch, Instagram "
                                             "and the other sites yt-dlp knows, or a video file's address")
                self.download_folder = gr.Textbox(label="Download folder", value="videos", elem_id="video-download-folder",
                                                  info="made if missing; not a concept's folder, where the long videos would "
                                                       "train too")
            with gr.Row(elem_classes="ot-wrap"):
                self.max_height = gr.Dropdown(HEIGHT_CHOICES, value=1080, label="Highest picture", elem_id="video-max-height",
                                              info="the best video stream up to this height, H.264 first among equals; "
                                                   "no sound (the trainer reads none)")
                self.playlist = gr.Checkbox(label="Whole playlist", value=False, elem_id="video-playlist",
                                            info="a video's link that names a playlist too (&list=): take the playlist")
                self.max_videos = gr.Number(label="Most videos a link", value=25, precision=0, minimum=0,
                                            elem_id="video-max-videos", info="a playlist's or a channel's first ones; 0: all")
                self.download_button = gr.Button("Download", variant="primary", scale=0, elem_id="video-download-button")
            self.cookies = gr.Textbox(label="Cookies file", elem_id="video-cookies",
                                      info="optional: a cookies.txt (Netscape format) exported from your browser while signed "
                                           "in, for videos behind a login (age-restricted, members-only, Instagram) or when "
                                           "YouTube asks a rented server to sign in; read, never changed")
            self.download_summary = gr.Markdown("", elem_id="video-download-summary")
            self.download_panel = JobPanel(self.ctx.jobs, "video-download")
        self.download_inputs = {self.links, self.download_folder, self.max_height, self.playlist, self.max_videos,
                                self.cookies, self.ctx.config_state}

    def download_params(self, values: dict[Any, Any]) -> dict[str, Any]:
        """Download form -> job params: the links checked and the folder inside the page's folders."""
        config = values.get(self.ctx.config_state) or {}
        folder = str(values.get(self.download_folder) or "").strip()
        if not folder:
            raise ToolInputError("Download folder: empty; type the folder the videos go to")
        out = self.ctx.path("Download folder", folder, config)
        if out.exists() and not out.is_dir():
            raise ToolInputError(f"Download folder: '{folder}' is a file")
        params = {"links": str(values.get(self.links) or ""), "output": str(out), "max_height": values.get(self.max_height),
                  "playlist": bool(values.get(self.playlist)), "max_videos": values.get(self.max_videos)}
        if cookies := str(values.get(self.cookies) or "").strip():  # a file inside the page's folders
            params["cookies"] = str(self.ctx.file("Cookies file", cookies, config))
        for number, concept in enumerate((config or {}).get("concepts") or [], start=1):
            if str(concept.get("path") or "").strip() and Path(str(concept["path"])).expanduser().resolve() == out.resolve():
                params["concept"] = str(concept.get("name") or f"Concept {number}")  # said with the result
                break
        try:
            download_options(params)
        except JobError as err:
            raise ToolInputError(str(err)) from None
        return params

    def on_download(self, values: dict[Any, Any]) -> tuple:
        return launch_checked(self.download_panel, "video-download", lambda: self.download_params(values))

    @staticmethod
    def render_download(result: dict[str, Any] | None) -> tuple:
        if not result:
            return "", gr.update()
        got, already = result.get("downloaded") or [], result.get("already") or []
        lines = [f"**{len(got)} video{'s' if len(got) != 1 else ''} downloaded** into `{result['output']}`"
                 + (f", {len(already)} already there" if already else "") + (" (cancelled)" if result.get("cancelled") else "")]
        lines += [f"- `{Path(p).name}`" for p in (got + already)[:SHOWN]]
        if result.get("skipped"):
            lines.append(f"- {result['skipped']} link(s) with nothing to download (a live stream, an empty playlist)")
        lines += [f"- failed: {f['link']}: {f['reason']}" for f in (result.get("failed") or [])[:20]]
        if result.get("concept"):
            lines.append(f"- this is concept '{result['concept']}''s folder: a video model trains on each video as it is (only "
                         "its first frames); to cut them into clips, download them into another folder")
        if got or already:
            lines.append("\nThe folder is now the *Video* below: choose what to make and press Start.")
        return "\n".join(lines), (gr.update(value=result["output"]) if got or already else gr.update())

    def params(self, values: dict[Any, Any]) -> dict[str, Any]:
        """Form values -> job params, every path checked against the page's folders; a ToolInputError names the field."""
        config = values.get(self.ctx.config_state) or {}
        source = str(values.get(self.source) or "").strip()
        if not source:
            raise ToolInputError("Video: empty; give a video file or a folder of videos")
        output = str(values.get(self.output) or "").strip()
        if not output:
            raise ToolInputError("Output folder: empty; choose a concept's folder or type one")
        out = self.ctx.path("Output folder", output, config)  # made if missing (inside the page's folders)
        if out.exists() and not out.is_dir():
            raise ToolInputError(f"Output folder: '{output}' is a file")
        params = {
            "source": str(self.ctx.file("Video", source, config)), "output": str(out), "recursive": bool(values.get(self.recursive)),
            "subfolders": bool(values.get(self.subfolders)), "mode": values.get(self.mode) or "clips",
            "start": values.get(self.start) or "", "end": values.get(self.end) or "", "max_seconds": values.get(self.max_seconds),
            "split_cuts": bool(values.get(self.split_cuts)), "fps": values.get(self.fps), "per_second": values.get(self.per_second),
            "blur_drop": values.get(self.blur_drop), "remove_borders": bool(values.get(self.borders)),
            "crop_variation": values.get(self.crop), "seed": values.get(self.seed),
        }
        try:
            options_from(params)
        except JobError as err:
            raise ToolInputError(str(err)) from None
        return params

    def on_start(self, values: dict[Any, Any]) -> tuple:
        return launch_checked(self.panel, "video", lambda: self.params(values))

    @staticmethod
    def render_result(result: dict[str, Any] | None) -> tuple:
        if not result:
            return "", gr.update()
        what = "clips" if result.get("mode") == "clips" else "images"
        lines = [f"**{result['written']} {what}** from {result['videos']} video{'s' if result['videos'] != 1 else ''} "
                 f"into `{result['output']}`" + (" (cancelled)" if result.get("cancelled") else "")]
        if result.get("mode") == "clips":
            lines.append(f"- cuts found: {result['cuts']}; pieces under 0.5 s left out: {result['left_out_short']}")
        else:
            lines.append(f"- blurriest left out: {result['left_out_blurry']}")
        lines += [f"- could not read `{Path(f['file']).name}`: {f['reason']}" for f in (result.get("failed") or [])[:20]]
        if result.get("inside_output"):
            names = ", ".join(f"`{Path(p).name}`" for p in result["inside_output"][:5])
            lines.append(f"- {names} {'is' if len(result['inside_output']) == 1 else 'are'} in the output folder too: a video model "
                         "would train on it as one more clip (its first frames); move it out of the concept's folder")
        shown = [(path, Path(path).name) for path in (result.get("files") or [])[:SHOWN]]
        return "\n".join(lines), gr.update(value=shown)
