"""What the page's charts need beyond their points: the order of the aspect-bucket bars and the
step axis of the run's charts (Gradio draws them with Vega-Lite, which otherwise sorts bucket
names as text and ticks a 3-step run at 0.5, 1.0, 1.5...)."""

from __future__ import annotations

from typing import Any

import gradio as gr

# A step axis spans at least this many steps. Vega-Lite ticks every 1, 2 or 5 x 10^k of the axis,
# about one tick per 40 px: an axis of 10 steps drawn 750 px wide was ticked every 0.5 step. From
# 50 steps a tick falls on a whole step up to ~70 ticks (a 2800 px chart). A shorter run's line
# ends before the axis does.
MIN_STEP_SPAN = 50


def bucket_order(names: list[str]) -> list[str]:
    """Bucket names "WxH" from the tallest to the widest (then by area): as text, "1024x512"
    came before "512x512" and a portrait bucket could sit between two landscape ones."""
    def key(name: str) -> tuple[float, int, str]:
        try:
            w, h = (int(v) for v in str(name).lower().replace("×", "x").split("x"))
            return (w / h, w * h, name)
        except ValueError:
            return (float("inf"), 0, name)
    return sorted(dict.fromkeys(names), key=key)


MIN_COUNT_SPAN = 5  # an image-count axis reaches at least this: whole-image ticks on a short chart


def bucket_chart(frame) -> Any:
    """A bucket bar chart's update: its rows, the bars in aspect order, the count axis from 0 (the
    chart's own axis started at the smallest count, so a bucket of one image drew no bar) to at
    least MIN_COUNT_SPAN images (not ticked 1.5, 2.5). No rows: the chart is cleared (None), never
    sent an empty frame: its columns have no numeric type then, and the chart kept the types it was
    first drawn with, so the next concept's buckets drew nothing until the page was reloaded."""
    if frame is None or not len(frame):
        return None
    tallest = int(frame.groupby("bucket")["images"].sum().max())  # the report stacks its concepts' bars
    return gr.update(value=frame, sort=bucket_order(list(frame["bucket"])), y_lim=[0, max(MIN_COUNT_SPAN, tallest)])


def step_span(last_step: float | None, total_steps: int | None) -> int:
    """The step axis' end: the run's whole length when known (the chart shows how far it got),
    never under MIN_STEP_SPAN steps."""
    return int(max(MIN_STEP_SPAN, total_steps or 0, last_step or 0))


def step_chart(frame, total_steps: int | None = None) -> Any:
    """A step chart's update (loss, learning rate): its points on an axis from 0 to `step_span`."""
    if frame is None or not len(frame):
        return frame
    return gr.update(value=frame, x_lim=[0, step_span(float(frame["step"].max()), total_steps)])
