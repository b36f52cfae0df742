"""A progress bar, status line and Cancel button for one heavy tool's jobs.

A tool's button handler calls `panel.launch(name, params)` and returns its values to
`panel.launch_outputs`; a timer then polls the job's events and, when it ends, hands the result
to the tool's `render_result(result) -> tuple` for its own outputs. The job id lives in a
gr.State, so a skipped tick loses nothing (every poll rebuilds the state from the events)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from ..runner.jobs import JobState, JobSupervisor


def job_bar(state: JobState | None) -> str:
    if state is None:
        return ""
    pct = 100.0 * state.fraction
    label = html.escape(state.progress_message or state.status)
    counted = (f"{state.done}/{state.total}" if state.per == 1 else
               f"{state.done / state.per:.3g}/{state.total / state.per:.3g}")  # a download: 1.5/2 links
    return (f'<div class="ot-bar"><span>{label}</span><progress max="100" value="{pct:.1f}"></progress> '
            f"{counted}</div>")


def job_status(state: JobState | None) -> str:
    if state is None:
        return ""
    lines = [f"**{state.status}** {state.message}".strip()]
    if state.log:
        lines.append("\n".join(f"- {line}" for line in state.log[-10:]))
    return "\n\n".join(lines)


class JobPanel:
    def __init__(self, jobs: JobSupervisor, key: str, render_result: Callable[[dict[str, Any] | None], Sequence[Any]] | None = None,
                 result_outputs: Sequence[gr.components.Component] = ()):
        self.jobs = jobs
        self.render_result = render_result
        self.result_outputs = list(result_outputs)
        self.job_id = gr.State("")
        with gr.Row():
            self.bar = gr.HTML("", elem_id=f"{key}-job-bar")
            self.cancel = gr.Button("Cancel", visible=False, scale=0, elem_id=f"{key}-job-cancel")
        self.status = gr.Markdown("", elem_id=f"{key}-job-status")
        self.timer = gr.Timer(1.0, active=False)
        self.launch_outputs = [self.job_id, self.bar, self.status, self.cancel, self.timer]

    def wire(self, render_result: Callable[[dict[str, Any] | None], Sequence[Any]] | None = None,
             result_outputs: Sequence[gr.components.Component] = ()) -> None:
        """Call once the tool's result outputs exist (given here or to the constructor)."""
        if render_result is not None:
            self.render_result, self.result_outputs = render_result, list(result_outputs)
        outputs = [self.bar, self.status, self.cancel, self.timer, *self.result_outputs]
        self.timer.tick(self.poll, [self.job_id], outputs, show_progress="hidden")
        self.cancel.click(self.cancel_job, [self.job_id], [self.status])

    def launch(self, name: str, params: dict[str, Any]) -> tuple:
        job = self.jobs.start(name, params)
        state = JobState(job.run_id, name=name)
        return job.run_id, job_bar(state), f"**starting** {name}", gr.update(visible=True), gr.Timer(active=True)

    def refused(self, message: str) -> tuple:
        """What `launch` returns when the form is not valid: nothing starts."""
        return "", "", f"**not started** {message}", gr.update(visible=False), gr.Timer(active=False)

    def poll(self, job_id: str) -> tuple:
        if not job_id:
            return ("", "", gr.update(visible=False), gr.Timer(active=False), *[gr.update() for _ in self.result_outputs])
        state = self.jobs.state(self.jobs.get(job_id))
        if not state.finished:
            return (job_bar(state), job_status(state), gr.update(visible=True), gr.Timer(active=True),
                    *[gr.update() for _ in self.result_outputs])
        results = tuple(self.render_result(state.result)) if self.render_result else ()
        return (job_bar(state), job_status(state), gr.update(visible=False), gr.Timer(active=False), *results)

    def cancel_job(self, job_id: str) -> str:
        if not job_id:
            return "no job running"
        return f"**{self.jobs.cancel(self.jobs.get(job_id))}**"
