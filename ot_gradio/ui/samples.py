"""Sampling tab: an editable table of sample prompts; and the run's samples as shown in the footer."""

from __future__ import annotations

import copy
import html
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..config.enums import NoiseScheduler
from ..config.parts import SampleConfig

COLUMNS = (
    ("enabled", "on", "bool"),
    ("prompt", "prompt", "str"),
    ("negative_prompt", "negative prompt", "str"),
    ("width", "width", "number"),
    ("height", "height", "number"),
    ("seed", "seed", "number"),
    ("diffusion_steps", "steps", "number"),
    ("cfg_scale", "CFG", "number"),
    ("noise_scheduler", "sampler", "str"),
    # the image an image-editing sample edits / an image-to-video sample starts from (a path; blank: the first training one)
    ("control_image", "control image", "str"),
)


def to_rows(samples: list[dict[str, Any]]) -> list[list[Any]]:
    default = SampleConfig().model_dump(mode="json")
    return [[s.get(key, default[key]) for key, _, _ in COLUMNS] for s in samples]


def from_rows(rows: Any, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows back to sample dicts, keeping fields the table does not show."""
    if hasattr(rows, "values"):  # a pandas DataFrame
        rows = rows.values.tolist()
    out = []
    for i, row in enumerate(rows or []):
        if not any(str(v).strip() for v in row[1:2]):
            continue  # a row without a prompt is an empty line
        sample = copy.deepcopy(previous[i]) if i < len(previous) else SampleConfig().model_dump(mode="json")
        for (key, _, kind), value in zip(COLUMNS, row, strict=False):
            if kind == "bool":
                value = value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes", "on")
            elif kind == "number":
                try:
                    value = float(value)
                    value = int(value) if value.is_integer() and key != "cfg_scale" else value
                except (TypeError, ValueError):
                    pass  # validation names the sample and the field
            sample[key] = value
        out.append(sample)
    return out


SAMPLES_CSS = (".ot-samples{display:flex;flex-wrap:wrap;gap:.75em;align-items:flex-start}"
               ".ot-samples figure{margin:0;max-width:100%}.ot-samples img,.ot-samples video{display:block;max-width:100%;height:auto}"
               ".ot-samples figcaption{font-size:.85em;max-width:max(12em,100%);overflow-wrap:anywhere}")


def samples_html(samples: list[tuple[str, str]], url: Callable[[str], str | None]) -> str:
    """The run's samples (path, "step N: prompt"), newest first, each at its own size (a 64 px
    sample stays 64 px, sharp; a large one shrinks to the width) with its step and prompt under
    it; a video family's .mp4 sample plays in place (muted, looping, with controls). `url` makes a
    sample's path a URL the page may load."""
    if not samples:
        return ""
    figures = []
    for path, caption in samples:
        src = url(path)
        if not src:
            continue
        if path.lower().endswith(".mp4"):
            shown = f'<video src="{html.escape(src)}" title="{html.escape(caption)}" controls muted loop autoplay playsinline preload="metadata"></video>'
        else:
            shown = f'<img src="{html.escape(src)}" alt="{html.escape(caption)}" loading="lazy">'
        figures.append(f"<figure>{shown}<figcaption>{html.escape(caption)}</figcaption></figure>")
    return f'<style>{SAMPLES_CSS}</style><div class="ot-samples">{"".join(figures)}</div>'


class SamplesTab:
    def __init__(self):
        gr.Markdown(
            "One row per sample prompt. Samplers: " + ", ".join(s.value for s in NoiseScheduler) +
            ". Use the model's native size (512 for SD 1.5); for embeddings put `<embedding>` in the prompt. "
            "*control image*: the path of the image a QWEN_IMAGE_EDIT sample edits, or that a WAN_2_1_I2V, WAN_2_2_I2V_A14B, "
            "WAN_2_2_TI2V_5B or LTX_2 sample starts from (an image or a clip's first frame); blank: the first training pair's / "
            "clip's (WAN_2_2_TI2V_5B and LTX_2: a text-to-video sample, unless Image-to-video share is 1)."
        )
        self.table = gr.Dataframe(
            headers=[label for _, label, _ in COLUMNS],
            datatype=[kind for _, _, kind in COLUMNS],
            column_count=(len(COLUMNS), "fixed"),
            row_count=(1, "dynamic"),
            interactive=True,
            label="Samples",
            elem_id="samples-table",
        )
        self.add = gr.Button("Add sample")

    def wire(self, config_state: gr.State, autosave) -> None:
        def edit(config: dict[str, Any], rows: Any):
            config = copy.deepcopy(config)
            config["samples"] = from_rows(rows, config.get("samples", []))
            autosave(config)
            return config

        def add(config: dict[str, Any]):
            config = copy.deepcopy(config)
            config.setdefault("samples", []).append(SampleConfig(prompt="a photo").model_dump(mode="json"))
            autosave(config)
            return config, to_rows(config["samples"])

        self.table.input(edit, [config_state, self.table], config_state)
        self.add.click(add, config_state, [config_state, self.table])
