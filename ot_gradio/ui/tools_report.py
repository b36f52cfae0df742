"""Tools > Dataset report: the page's concepts as training will see them (see tools/report.py)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..tools.report import bucket_rows, to_markdown
from .charts import bucket_chart
from .job_panel import JobPanel


def bucket_frame(report: dict[str, Any] | None):
    import pandas as pd  # noqa: PLC0415

    rows = bucket_rows(report) if report else []
    return pd.DataFrame(rows, columns=["bucket", "concept", "images"])


class ReportTool:
    def __init__(self, ctx):
        self.ctx = ctx
        gr.Markdown("What training will see, per enabled concept of this config: images, captions and masks found and missing, "
                    "unreadable files by name, the aspect buckets, and the images that will never be trained because their "
                    "bucket cannot fill a batch.")
        with gr.Row():
            self.resolution = gr.Textbox(label="Resolution", info="Resolution(s) to bucket at, e.g. 512 or 384,448,512. Empty: the config's.",
                                         elem_id="report-resolution")
            self.batch_size = gr.Number(label="Batch size", value=0, precision=0, minimum=0,
                                        info="Images per step. 0: the config's.", elem_id="report-batch")
            self.run = gr.Button("Run report", variant="primary", scale=0, elem_id="report-run")
        self.panel = JobPanel(ctx.jobs, "report")
        self.summary = gr.Markdown("", elem_id="report-summary")
        self.chart = gr.BarPlot(bucket_frame(None), x="bucket", y="images", color="concept", title="Images per aspect bucket (W×H)",
                                height=260, elem_id="report-chart")
        self.panel.wire(self.render, [self.summary, self.chart])
        self.run.click(self.start, [ctx.config_state, self.resolution, self.batch_size], self.panel.launch_outputs)

    def start(self, config: dict[str, Any], resolution: str, batch_size: float | None) -> tuple:
        concepts = [c for c in (config or {}).get("concepts") or [] if c.get("enabled", True)]
        if not concepts:
            return self.panel.refused("no enabled concept: add a concept folder in the Concepts tab first")
        for i, concept in enumerate(concepts):
            try:
                self.ctx.path(f"concepts[{i}].path", str(concept.get("path") or ""), config)
            except ValueError as err:
                return self.panel.refused(str(err))
        params = {"config": config, "resolution": (resolution or "").strip(), "batch_size": int(batch_size or 0)}
        return self.panel.launch("report", params)

    def render(self, result: dict[str, Any] | None) -> tuple:
        if not result:
            return "", bucket_frame(None)
        return to_markdown(result), bucket_chart(bucket_frame(result))
