"""The page: top bar, the run bar, OneTrainer's tabs built from the config schema, and the Run tab.

Gradio only: no torch, diffusers or trainer imports. Handlers take and return whole config
dicts (kept in a gr.State and in the workspace, so a reload loses nothing); training runs in a
worker process through the supervisor. The handlers are methods of `Page`, so tests call them
directly with the values the page would send. The edit handlers are in page_edits.py, the config
files' (preset, Load, Import, Save, Export) in page_files.py."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gradio as gr

from ..config.doctor import check as doctor_check
from ..config.families import FAMILIES
from ..config.fields import iter_fields
from ..config.include_parts import is_left_out, left_out_settings
from ..config.io import ConfigError, config_to_dict, load_config
from ..config.optimizer import optimizer_keys
from ..config.presets import list_presets
from ..config.schema import TrainConfig
from ..runner.jobs import JobSupervisor
from ..runner.queue import RunQueue, SupervisorBackend
from ..runner.startcheck import concept_folder_problems, start_problems
from ..runner.supervisor import Supervisor
from ..runner.tensorboard import TensorBoard, settings
from ..secrets import SECRET_KEYS, read_secrets, store_config_token, without_tokens
from . import edit_log
from .api import API_NAMES, QueueApi, register_api
from .browser import BrowserPanel
from .concepts import ConceptsTab
from .form import Field, build_fields, edit_event, make_component, schema_fields, values_from_config
from .guide import GUIDE_CSS, TABS_ID, build_guide
from .layout import COLUMNS, OPTIMIZER_SETTINGS, TAB_TITLES, group_open, group_paths
from .memory_estimate import PROMPT as ESTIMATE_PROMPT
from .memory_estimate import MemoryEstimate  # the planner's estimate, in a child process
from .monitor import REFUSED, Monitor
from .page_edits import EditHandlers
from .page_files import ConfigFiles
from .page_limits import page_problems
from .paths import PathRefused, check
from .problems import problems_markdown, rechecked
from .queue_panel import QueuePanel
from .samples import SamplesTab, to_rows
from .state import UI_CONFIG, load_ui_choices, load_ui_config, save_ui_config
from .tools_tab import ToolsContext, build_tools
from .training_tab import lr_frame, memory_markdown
from .uploads import DELETE_CACHE, bound_uploads
from .visibility import (
    LEFT_OUT_NOTE,
    TAB_METHODS,
    attention_choices,
    conditional_fields,
    left_out_fields,
    method_choices,
    method_fields,
    method_tabs_js,
    model_parts,
    part_field_shown,
    part_of,
    shown_now,
    shown_parts,
    tab_order,
    tab_shown,
    transformer_weight_dtype_choices,
)

TOP_FIELDS = ("model_type", "training_method")
TOKEN_CLEAR = "-"  # typed into a token's field: the stored token is removed (left empty, it is kept)
TOKEN_STORED = f"A token is stored (never shown). Type a new one to replace it, {TOKEN_CLEAR} to remove it"
TABS = tuple((title, tab) for tab, title in TAB_TITLES.items() if tab != "concepts")  # the schema's tabs; Concepts is built on its own
DENOISERS = {info.denoiser for info in FAMILIES.values()}  # their accordions start open
CSS = (".ot-bar{display:flex;gap:.5em;align-items:center}.ot-bar progress{flex:1;height:1em}"
       # fields in 2-3 columns on wide screens, one on a phone (a grid item is at least 270 px wide)
       ".ot-grid{display:grid!important;grid-template-columns:repeat(auto-fill,minmax(min(100%,270px),1fr));gap:var(--layout-gap);"
       "align-items:start}.ot-grid>*{min-width:0!important}"
       ".ot-cols{display:block!important;columns:225px;column-gap:var(--layout-gap)}"
       ".ot-cols>*{break-inside:avoid;margin-bottom:var(--layout-gap)!important;width:100%}"
       ".ot-cols>.ot-wide{column-span:all}.ot-cols .ot-grid{gap:8px}"  # the denoiser's settings across the whole width (ui/layout.py)
       ".ot-grid>.form{display:contents!important}"  # gradio wraps runs of fields in one .form: its fields are the grid's items
       # a path and its Browse: two cells, but one in a narrow accordion's one-column grid (spanning two
       # there would add a column and push the field out of its box)
       "@media (min-width:700px){.ot-grid>.row:has(button[id$=-browse]){grid-column:span 2}"
       ".ot-cols>:not(.ot-wide) .ot-grid>.row:has(button[id$=-browse]){grid-column:auto}}"
       ".row:has(>button[id$=-browse]):has(>.form:empty){display:none!important}"  # a hidden path field takes its Browse along
       # the run bar stays in view on every tab
       "#ot-run-bar{position:sticky;top:0;z-index:50}.ot-run-row{flex-wrap:wrap!important;align-items:center}"
       ".ot-run-text{flex:1 1 240px!important;min-width:0!important}.ot-wrap{flex-wrap:wrap!important}"
       "#ot-run-bar-extra:empty{display:none}"
       "#ot-run-bar-extra{flex:0 0 auto!important;width:auto!important;flex-wrap:nowrap!important;align-items:center}"  # the queue's
       "#queue-add{white-space:nowrap;background:var(--background-fill-primary)!important;"  # a button, not a label, on the grey bar
       "border:1px solid var(--border-color-primary)!important}"
       "#queue-add:hover{border-color:var(--color-accent)!important}#queue-length{flex:0 0 9.5em!important;width:9.5em!important;min-width:0!important;white-space:nowrap}"  # length, whole
       "#ot-run-bar [data-testid=status-tracker]{display:none!important}"
       ".ot-upload{flex-wrap:wrap!important;align-items:center}.ot-upload>#concept-upload-note{flex:1 1 280px!important;min-width:0!important}"  # no poll's timer ("0.6s") flashing in the bar's text
       "@media (max-width:600px){.gradio-container{padding:4px!important}#sample-gallery img{max-width:100%;height:auto}"
       # a phone: a refused Start's list is read whole, the bar then scrolls away with the page (sticky, it would cover
       # the form the fixes are made in); it sticks again once the list is gone
       "#problems code{white-space:normal;word-break:break-word}#ot-run-bar:has(#problems li){position:static!important}"
       "#f-model_type input{font-size:.85em}"
       ".ot-tools{flex-direction:row!important;flex-wrap:wrap!important}.ot-tools>*{flex:1 1 100%!important}"  # its buttons
       ".ot-tools>button{flex:1 1 40%!important;min-width:0!important}"  # two a line, not one
       ".ot-wrap,.ot-wrap>.form{flex-wrap:wrap!important}.ot-wrap>*,.ot-wrap>.form>*{flex:1 1 100%!important}}"  # a tool's row: one field a line  # and the longest model type is read whole
       "body{overflow-x:clip}.gradio-container{overflow:visible!important}"  # clip, not hidden: a scroll box stops the bar sticking
       # the tooltips under the labels: gradio's light grey on white (2.5:1) is hard to read; darker (7:1), and light on dark
       ".gradio-container{--block-info-text-color:var(--neutral-600)}.dark .gradio-container{--block-info-text-color:var(--neutral-400)}"
       + GUIDE_CSS)  # Start here's steps on a phone


def _no_panel(initial: dict[str, Any], infos: list) -> None:
    pass


def part_label(part: str) -> str:
    return next((f.label for f in iter_fields(TrainConfig) if f.path == part), "") or part


def validate(config: dict[str, Any], readable: list[Path] | None = None) -> tuple[dict[str, Any] | None, list[str], list[str]]:
    """(the validated config, problems by field, warnings). Nothing starts while problems exist.
    Every problem is listed at once: the schema's and the missing concept folders, or, for a valid
    config, the start checks `validate` and `train` run (runner/startcheck.py). `readable`: where
    an imported config's own files may be read (load_config), and where the page's own limits
    hold (page_limits.py): a config they refuse gets those problems alone, since the start checks
    read the files it names (a caption file's words must not answer a guess through them)."""
    try:
        loaded = load_config(copy.deepcopy(config), readable=readable)
    except ConfigError as err:
        schema = list(getattr(err, "errors", None) or [str(err)])
        listed = {s.split(":")[0] for s in schema}
        return None, schema + [f for f in concept_folder_problems(config) if f.split(":")[0] not in listed], []
    valid = config_to_dict(loaded.config)
    if readable is not None and (refused := page_problems(valid, readable)):
        return valid, refused, loaded.warnings
    return valid, start_problems(loaded.config, valid), loaded.warnings + doctor_check(loaded.config)


class Page(EditHandlers, ConfigFiles):
    def __init__(self, workspace: Path, roots: Iterable[str | os.PathLike] = ()):
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.extra_roots = [Path(r) for r in roots]
        self.supervisor = Supervisor(self.workspace)
        self.jobs = JobSupervisor(self.workspace)
        self.tensorboard = TensorBoard(self.workspace / "tensorboard.log")
        self._start_lock = threading.Lock()
        self.queue = RunQueue(self.workspace, SupervisorBackend(self.supervisor, self.workspace, self._start_lock, self._prepare_start))
        initial = load_ui_config(self.workspace)
        self.supervisor.watch(initial.get("workspace_dir") or self.workspace)
        self.fields: dict[str, Field] = {}
        self.tab_handles: dict[str, gr.Tab] = {}
        self.part_groups: dict[gr.Accordion, str] = {}  # accordion -> its model part
        self.left_out_notes: dict[gr.Markdown, str] = {}  # note -> its model part, shown while Include is off
        # a titled group some method or model type leaves empty (Timestep distribution, Video clips) -> its fields
        self.method_groups: dict[gr.Accordion, list[str]] = {}
        with gr.Blocks(title="ot_gradio", delete_cache=DELETE_CACHE) as self.blocks:
            self._build(initial)
            self._wire()
        # Every handler that writes the session's config runs one at a time: a field's edit and a
        # concept's (or a preset's) run at once each read the config before the other saved, and
        # the later write dropped the earlier edit. Gradio reads a State input when the event runs
        # (not when it was sent), so each sees the one before it. They take milliseconds.
        # So does each handler that reads the config with an edit log's applied count (Start, Add
        # to queue, the estimate): Gradio reads an event's inputs one by one, awaiting between
        # them, so an edit saved in between gave Start the config before it and the count after
        # it, and Start ran without the edit (a run started on the folder just replaced). And each
        # that fills fields in from the config (a concept shown): a field filled in is logged as an
        # edit, so one filled in from the config before an edit's save would undo the edit.
        counts = {self.edits_applied, self.concepts.applied}
        logged = {f.component for f in [*self.fields.values(), *self.concepts.fields.values()]}
        for fn in self.blocks.fns.values():
            reads = self.config_state in fn.inputs
            if fn.fn is not None and (self.config_state in fn.outputs or reads and (counts | logged) & {*fn.inputs, *fn.outputs}):
                fn.concurrency_id, fn.concurrency_limit = "config", 1
        bound_uploads(self.blocks)  # uploads: at most UPLOADS_TOTAL_BYTES kept (uploads.py)
        # The handlers are the page's, not an API: left public, gradio documents each of them
        # with its ~150 inputs inside every page load (11+ MB of HTML) and records their inputs
        # (the hub token among them) in the browser's run history.
        for fn in self.blocks.fns.values():
            fn.api_visibility = "private"
            if fn.api_name in API_NAMES:  # the documented HTTP API stays public (behind the guard)
                fn.api_visibility = "public"
        self.queue.start_thread()  # waiting entries continue after an app restart
        on, port, host, always = settings(initial)
        if on and always:  # 'always on': from the start, on every run of the workspace
            self.tensorboard.ensure(Path(initial.get("workspace_dir") or self.workspace) / "runs", port, host)

    # --- layout ---------------------------------------------------------------------------------
    def _build(self, initial: dict[str, Any]) -> None:
        fields = self.fields
        self.config_state = gr.State(initial)
        self.edit_log, self.edits_applied = edit_log.build()
        self.monitor = Monitor(self.workspace, self.supervisor, self.tensorboard)
        self.monitor.build_bar()  # first on the page: in view on every tab and on a phone, sticky when scrolling
        self.queue_panel = QueuePanel(self.queue, self._config_of, self.validate)
        self.queue_panel.build(self.monitor.bar_extra)
        gr.Markdown("# ot_gradio\nTrain LoRAs of diffusion models in the browser. Every field has a tooltip under its label.")
        with gr.Row():
            for path in TOP_FIELDS:
                info = next(f for f in schema_fields() if f.path == path)
                fields[path] = make_component(info)
            fields["training_method"].component.choices = [(m, m) for m in method_choices(initial.get("model_type"), initial.get("training_method"))]
            fields["model_type"].component.min_width = 300  # its own line on a phone: "STABLE_DIFFUSION_XL_10_BASE" whole
            self.preset = gr.Dropdown(list_presets(), value=None, label="Preset", info="Load a preset from presets/ over the defaults.", elem_id="preset")
        with gr.Row(elem_classes="ot-tools"):
            self.config_path = gr.Textbox(label="Config file", info="Path of a config to load (ours, or another trainer's: Start here names them), or to save ours to.", scale=3, elem_id="config-path")
            self.load_btn = gr.Button("Load", scale=0)
            self.save_btn = gr.Button("Save", scale=0)
            self.upload = gr.UploadButton("Import file", file_types=[".json", ".toml", ".yaml", ".yml", ".env"], scale=0)
            self.export = gr.DownloadButton("Export", scale=0)

        shown = shown_parts(initial.get("model_type"))
        method = initial.get("training_method")
        # what a tab shows besides its fields: after its groups (before its parts), and after all of them
        panels = {"model": self._memory_panel, "training": self._optimizer_panel}
        closing = {"sampling": self._samples_panel}
        with gr.Tabs(elem_id=TABS_ID) as self.tabs:
            with gr.Tab("Start here", id="start"):
                build_guide(self.tabs, self.config_state)
            for title, tab in TABS:
                with gr.Tab(title, id=tab, elem_id=f"tab-{tab}", visible=tab_shown(tab, method)) as handle:
                    self.tab_handles[tab] = handle
                    by_path = {f.path: f for f in schema_fields(tab=tab) if f.path not in TOP_FIELDS}
                    infos = [by_path[p] for p in tab_order(list(by_path))]
                    with gr.Column(elem_classes="ot-cols" if tab in COLUMNS else None):
                        plain = {f.path: f for f in infos if not part_of(f.path) and not f.path.startswith("optimizer.")}
                        for title, paths in group_paths(list(plain)):  # titled groups, 2-3 columns wide (ui/layout.py)
                            shown_group = not title or any(shown_now(p, initial) for p in paths)
                            with gr.Accordion(title, open=group_open(tab, title), elem_classes="ot-group", visible=shown_group) if title else contextlib.nullcontext() as group:
                                with gr.Column(elem_classes="ot-grid"):
                                    fields.update(build_fields([plain[p] for p in paths]))
                            if title and set(paths) & (set(method_fields()) | set(conditional_fields())):
                                self.method_groups[group] = paths
                        panels.get(tab, _no_panel)(initial, infos)
                        for part in model_parts():
                            part_infos = [f for f in infos if part_of(f.path) == part and part_field_shown(f.path)]
                            if part_infos:
                                with gr.Accordion(part_label(part), open=part in DENOISERS, visible=part in shown, elem_id=f"part-{part}",
                                                  elem_classes="ot-wide" if part in DENOISERS else None) as acc:
                                    with gr.Column(elem_classes="ot-grid"):
                                        fields.update(build_fields(part_infos))
                                    if left_out_settings(part):  # why its settings are gone while Include is off
                                        self.left_out_notes[gr.Markdown(LEFT_OUT_NOTE, visible=is_left_out(initial, part),
                                                                        elem_id=f"left-out-{part}")] = part
                                self.part_groups[acc] = part
                    closing.get(tab, _no_panel)(initial, infos)
            with gr.Tab("Concepts", id="concepts", elem_id="tab-concepts"):
                self.concepts = ConceptsTab(self.workspace, self.roots)
            with gr.Tab("Run", id="run", elem_id="tab-run"):
                self.monitor.build_run_tab()
                self.queue_panel.build_table()
            with gr.Tab("Tools", id="tools", elem_id="tab-tools") as tools_tab:
                self.tools = build_tools(ToolsContext(self.workspace, self.jobs, self.config_state, self.roots, initial), tools_tab)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as runs_tab:  # run history and comparison
                from .runs_tab import build_runs_tab  # noqa: PLC0415
                self.runs_tab = build_runs_tab(  # "Load this config" does what Load does, for a listed run's config
                    self.runs_workspace,
                    lambda path: [self.autosave(c := self.read_any(path)), self.populate(c)][1],
                    [self.config_state, *(f.component for f in self.fields.values()), self.samples.table, self.lr_plot, self.memory,
                     *self.part_groups, *self.left_out_notes, *self.method_groups, *self.tab_handles.values(), *self.concepts.outputs], runs_tab)
        self.browser = BrowserPanel()
        self.components = {f.component for f in fields.values()}
        # by block id: an event's target is the session's copy of a component once an update
        # changed its props (a field shown or hidden by the model type, the optimizer, the PEFT type)
        self._by_id = {f.component._id: f for f in fields.values()}
        # ...or by elem_id: a copy made by an update of its choices (the training method's) has an id of its own
        self._by_elem = {f.component.elem_id: f for f in fields.values() if f.component.elem_id}
        self.opt_fields = {p: f for p, f in fields.items() if p.startswith("optimizer.") and p != "optimizer.optimizer"}
        # the fields the rest of the config shows or hides: those with a condition of their own, the
        # settings one method ignores, those of a part left out of the run (visibility.shown_now)
        self.followed = {p: fields[p] for p in (*conditional_fields(), *method_fields(), *left_out_fields()) if p in fields}
        # the Concepts tab's fields that apply to some model types only (the control image folder)
        self.followed |= {f"concepts[].{k}": f for k, f in self.concepts.fields.items() if f"concepts[].{k}" in conditional_fields()}
        for path, f in self.followed.items():
            f.component.visible = shown_now(path, initial)
        self.all_outputs = [self.config_state, *self.components, self.samples.table, self.lr_plot, self.memory, self.memory_estimate.output,
                            *self._visibility_targets(), *self.concepts.outputs]
        self.edit_outputs = [self.config_state, self.lr_plot, self.memory, self.memory_estimate.output, *self._visibility_targets()]

    def _memory_panel(self, initial: dict[str, Any], infos: list) -> None:
        self.memory = gr.Markdown(memory_markdown(initial), elem_id="memory-table")
        self.memory_estimate = MemoryEstimate()
        self.memory_estimate.build()

    def _optimizer_panel(self, initial: dict[str, Any], infos: list) -> None:
        """The learning rate's chart, the optimizer and, closed, its own parameters."""
        fields = self.fields
        self.lr_plot = gr.LinePlot(lr_frame(initial), x="step", y="lr", title="Learning rate over the run", height=220, elem_id="lr-plot")
        with gr.Accordion("Optimizer", open=True, elem_id="optimizer-group"):
            with gr.Column(elem_classes="ot-grid"):
                fields.update(build_fields([f for f in infos if f.path == "optimizer.optimizer"]))
            # the optimizer's own parameters start closed, as behind OneTrainer's "..." button (ui/layout.py)
            with gr.Accordion(OPTIMIZER_SETTINGS, open=False, elem_id="optimizer-settings"):
                with gr.Column(elem_classes="ot-grid"):
                    fields.update(build_fields([f for f in infos if f.path.startswith("optimizer.") and f.path != "optimizer.optimizer"]))
                self.load_defaults = gr.Button("Load defaults", elem_id="optimizer-defaults")

    def _samples_panel(self, initial: dict[str, Any], infos: list) -> None:
        self.samples = SamplesTab()

    def _visibility_targets(self) -> list:
        return [*(f.component for f in self.opt_fields.values()), *(f.component for f in self.followed.values()), *self.part_groups,
                *(self.tab_handles[t] for t in TAB_METHODS if t in self.tab_handles), *self.left_out_notes,
                *self.method_groups, self.fields["training_method"].component, self.fields["transformer.weight_dtype"].component,
                self.fields["attention_mechanism"].component]

    def _wire(self) -> None:
        method = self.fields["training_method"].component
        model_type = self.fields["model_type"].component
        edited = {path: f for path, f in self.fields.items() if path not in ("optimizer.optimizer", "training_method", "model_type")}
        # Progress goes on one component, never on the outputs: Gradio's page keeps every component
        # that was ever an event's progress target (or input: ui/edit_log.py), and refreshes all of
        # them on each status message of any event (the run bar polls each second).
        quiet = {"show_progress": "hidden", "show_progress_on": [self.memory]}
        # Each field's edit appends its value to the edit log in the browser (no server round trip);
        # one server handler applies the log's new entries, in order, each edit the field that made
        # it ("multiple": an edit made while the previous one is being saved is queued, not dropped).
        for path, f in edited.items():
            edit_event(f.component)(None, [f.component], self.edit_log, js=edit_log.relay_js(path, "form"),
                                    queue=False, trigger_mode="multiple", show_progress="hidden")
        log_inputs = {self.config_state, self.edit_log, self.edits_applied}
        self.edit_log.change(self.on_edit_log, log_inputs, [*self.edit_outputs, self.edits_applied], trigger_mode="multiple", **quiet)
        # The training method on its own: a model type change can drop the method from its choices,
        # and the model type's second input event (a click fires two), queued with the old method
        # among its inputs, would be refused by Gradio (a value outside the choices)
        method.input(self.on_edit, {self.config_state, method}, self.edit_outputs, trigger_mode="multiple", **quiet)
        # Gradio shows a tab made visible again, but keeps the button of one hidden after the page
        # loaded (an empty LoRA tab under FINE_TUNE): the method's tabs' buttons follow the method
        method.change(None, method, None, js=method_tabs_js(), queue=False, show_progress="hidden")
        # The model type on its own too: its edit may also fill in the base model (the old type's
        # default becomes the new type's). Only this event writes that field: among the outputs of
        # every field's edit, a preset load (whose updates fire each text field's change) kept the
        # page busy for seconds
        model_type.input(self.on_edit, {self.config_state, model_type}, [*self.edit_outputs, self.fields["base_model_name"].component],
                         trigger_mode="multiple", **quiet)
        browsers = [f.browser for f in [*edited.values(), *self.concepts.fields.values()] if f.browser is not None]
        concept_inputs = {self.concepts.selector, *(f.component for f in self.concepts.fields.values())}
        self.browser.wire(browsers, self.config_state, self.roots,
                          then=(self.on_browsed, {self.browser.target, self.config_state, *(b.field for b in browsers), *concept_inputs},
                                self.edit_outputs))
        optimizer = self.fields["optimizer.optimizer"].component
        optimizer.input(self.on_optimizer, {self.config_state, optimizer}, self.all_outputs, show_progress_on=[optimizer])
        self.load_defaults.click(self.on_load_defaults, self.config_state, self.all_outputs, show_progress_on=[self.load_defaults])
        # select, not input: a Dropdown's input fires twice per click on an option (two loads, two
        # toasts) and again when Tab passes through it (a reload of the preset over the user's edits)
        # window.otConfigLoads counts the loads the page has shown (a preset, a file): until it
        # grows, a load is still on its way and overwrites what is typed meanwhile (the browser
        # tests wait for it; the server saving the load is not yet the page showing it)
        shown = "() => { window.otConfigLoads = (window.otConfigLoads || 0) + 1; }"
        self.preset.select(self.on_preset, [self.preset, self.config_state], self.all_outputs,
                           show_progress_on=[self.preset]).then(None, js=shown)
        self.load_btn.click(self.on_load, [self.config_path, self.config_state], [*self.all_outputs, self.preset],
                            show_progress_on=[self.load_btn]).then(None, js=shown)
        self.upload.upload(self.on_upload, self.upload, [*self.all_outputs, self.preset], show_progress_on=[self.upload]).then(None, js=shown)
        # Save and Export write the config Start would use: with the edits still on their way (a
        # value typed just before the click was missing from the file)
        form = {*log_inputs, *self.concepts.inputs}
        self.save_btn.click(lambda values: self.on_save(values[self.config_path], self._config_of(values)), {self.config_path, *form}, None)
        self.export.click(lambda values: self.on_export(self._config_of(values)), form, self.export)
        self.concepts.wire(self.config_state, self.autosave)
        self.samples.wire(self.config_state, self.autosave)
        self.monitor.wire()
        start_inputs = {*log_inputs, self.monitor.run_id, *self.concepts.inputs}
        self.monitor.start.click(self.on_start, start_inputs, [self.monitor.run_id, self.monitor.problems])
        # a refused Start's list follows the edits (a fixed problem leaves it), on any field's or concept's edit
        self.config_state.change(self.on_recheck, [self.config_state, self.monitor.problems], self.monitor.problems,
                                 trigger_mode="always_last", show_progress="hidden")
        self.memory_estimate.wire(self.on_estimate_memory, log_inputs)
        self.queue_panel.wire(start_inputs)
        register_api(QueueApi(self.queue, self.supervisor, self.validate))
        # window.otPageLoaded: the saved config is on the page (the browser tests wait for it; an
        # edit made before would be overwritten by the load)
        self.blocks.load(self.on_page_load, None, [*self.all_outputs, self.preset, self.config_path],
                         show_progress_on=[self.preset]).then(None, js="() => { window.otPageLoaded = true; }")

    # --- helpers --------------------------------------------------------------------------------

    def autosave(self, config: dict[str, Any]) -> None:
        save_ui_config(self.workspace, self._with_tokens(config))

    def token_fields(self) -> dict:
        """The token fields emptied, each saying whether a token is stored."""
        stored = read_secrets(self.workspace)
        return {self.fields[f"secrets.{key}"].component: gr.update(value="", placeholder=TOKEN_STORED if stored.get(key) else "")
                for key in SECRET_KEYS}

    def _with_tokens(self, config: dict[str, Any]) -> dict[str, Any]:
        """`config` (the form's) with the tokens it means: a token field left empty keeps the stored
        token (the page never shows it), TOKEN_CLEAR removes it, anything else replaces it."""
        section = config.get("secrets")
        if not isinstance(section, dict):
            return config
        stored = read_secrets(self.workspace)
        typed = {key: str(section.get(key) or "").strip() for key in SECRET_KEYS}
        tokens = {key: "" if text == TOKEN_CLEAR else text or stored.get(key, "") for key, text in typed.items()}
        return {**config, "secrets": {**section, **tokens}}

    def visibility(self, config: dict[str, Any]) -> dict:
        keys = set(optimizer_keys(config.get("optimizer", {}).get("optimizer", "ADAMW")))
        out: dict = {f.component: gr.update(visible=p.split(".", 1)[1] in keys) for p, f in self.opt_fields.items()}
        method, model_type = config.get("training_method"), config.get("model_type")
        out.update({f.component: gr.update(visible=shown_now(p, config)) for p, f in self.followed.items()})
        shown = shown_parts(model_type)
        out.update({acc: gr.update(visible=part in shown) for acc, part in self.part_groups.items()})
        out.update({note: gr.update(visible=is_left_out(config, part)) for note, part in self.left_out_notes.items()})
        out.update({self.tab_handles[t]: gr.update(visible=tab_shown(t, method)) for t in TAB_METHODS if t in self.tab_handles})
        out.update({acc: gr.update(visible=any(shown_now(p, config) for p in paths)) for acc, paths in self.method_groups.items()})
        # only the methods the model type offers (a value outside the choices is refused by gradio)
        out[self.fields["training_method"].component] = gr.update(choices=method_choices(model_type, method))
        weights = (config.get("transformer") or {}).get("weight_dtype")
        weight_dtype = self.fields["transformer.weight_dtype"].component  # GGUF for the families that read .gguf files
        out[weight_dtype] = {**out.get(weight_dtype, {}), **gr.update(choices=transformer_weight_dtype_choices(model_type, weights))}
        attention = self.fields["attention_mechanism"].component  # what reaches the model type's attention
        out[attention] = {**out.get(attention, {}), **gr.update(choices=attention_choices(model_type, config.get("attention_mechanism")))}
        return out

    def populate(self, config: dict[str, Any]) -> dict:
        # A stored token never goes to the browser (a password field only masks what it holds):
        # its field is empty and says one is stored; left empty, the token stays (_with_tokens)
        config = without_tokens(config)
        out = {self.config_state: config, **values_from_config(self.fields, config)}
        for comp, update in self.visibility(config).items():  # a field both shown or hidden and filled in
            out[comp] = {**update, "value": out[comp]} if comp in out else update
        out.update(self.token_fields())
        out[self.samples.table] = to_rows(config.get("samples", []))
        out[self.lr_plot] = lr_frame(config)
        out[self.memory] = memory_markdown(config)
        out.update(self.concepts.show(config, 0))
        return out

    def loaded(self, config: dict[str, Any]) -> dict:
        """populate() for a config loaded whole (a preset, a file): no estimate of the last model stays."""
        return {**self.populate(config), self.memory_estimate.output: ESTIMATE_PROMPT}

    def form_values(self, config: dict[str, Any], run_id: str = "") -> dict:
        """What the page sends for `config` (tests call handlers with it)."""
        shown = self.concepts.show(config, 0)
        selector = shown.pop(self.concepts.selector)
        concept_values = {f.component: shown[f.component] for f in self.concepts.fields.values() if f.component in shown}
        concept_values = {c: v.get("value") if isinstance(v, dict) else v for c, v in concept_values.items()}  # (a field shown or hidden)
        return {self.config_state: config, self.monitor.run_id: run_id, **values_from_config(self.fields, config),
                **concept_values, self.concepts.selector: selector.get("value") if isinstance(selector, dict) else selector}

    # --- handlers -------------------------------------------------------------------------------
    def on_page_load(self) -> dict:
        """The saved config, and the Preset and Config file last used (a reload emptied them)."""
        choices = load_ui_choices(self.workspace)
        first = not (self.workspace / UI_CONFIG).exists()  # a first visit: the form holds the demo preset, and says so
        preset = choices.get("preset") or ("demo" if first else None)
        preset = preset if preset in list_presets() else None
        return {**self.populate(load_ui_config(self.workspace)), self.preset: preset, self.config_path: choices.get("config_path", "")}

    def runs_workspace(self) -> Path:
        """The saved config's workspace folder, whose runs the Runs tab lists, opens and deletes,
        where it is inside the page's folders (a typed one elsewhere is not Start-checked yet), else the page's own."""
        saved = str(load_ui_config(self.workspace).get("workspace_dir") or "").strip()
        try:
            return check(saved, self.roots()) if saved else self.workspace
        except PathRefused:
            return self.workspace

    def validate(self, config: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str], list[str]]:
        """`validate` within the page's folders: with what only the page and its HTTP API refuse
        (ui/page_limits.py), checked there before the start checks."""
        return validate(config, self.roots())

    def on_recheck(self, config: dict[str, Any], shown: str):
        """The problem list again after an edit, while a refused Start's list is shown."""
        if rechecked(shown, []) is None:
            return gr.skip()
        return rechecked(shown, self.validate(config)[1], config)

    def on_estimate_memory(self, values: dict) -> dict:  # the config on the form, for the estimate (ui/memory_estimate.py)
        return self._with_tokens(self._form_config(values))

    def _config_of(self, values: dict) -> dict:
        """The config Start, Add to queue, Save and Export use, without tokens; a token typed just
        before (its save still on the way) is stored as the autosave stores it, in the workspace's
        secrets.json, where the run's worker reads it (a saved or exported file never holds one)."""
        return store_config_token(self._with_tokens(self.concepts.apply(self._form_config(values), values)), self.workspace)

    def _prepare_start(self, valid: dict) -> None:  # what Start does before starting
        from ..data.demo import ensure_demo_concepts  # noqa: PLC0415

        ensure_demo_concepts(load_config(copy.deepcopy(valid)).config)

    def on_start(self, values: dict) -> dict:
        """Builds the config from what the form shows right now (an edit still in flight
        cannot be lost), validates all of it, and only then starts the worker."""
        config = self._config_of(values)
        with self._start_lock:  # two quick clicks must not start two runs
            for run in self.supervisor.active_runs():  # said, not raised: a refusal is no error (no traceback in the log)
                gr.Warning(f"A run is already active ({run.run_id}); stop it first, or press Add to queue.")
                return {self.monitor.problems: gr.skip()}  # an empty dict is one value to gradio: its error toast
            valid, problems, warnings = self.validate(config)
            if problems:
                gr.Warning(f"{len(problems)} problem(s): nothing was started.")
                return {self.monitor.run_id: REFUSED, self.monitor.problems: problems_markdown(problems, config)}
            from ..data.demo import ensure_demo_concepts  # noqa: PLC0415

            ensure_demo_concepts(load_config(copy.deepcopy(valid)).config)
            from ..runner.outputs import claim_output, destination  # noqa: PLC0415

            queued = [destination(e["config"]) for e in self.queue.list() if e["state"] in ("waiting", "running")]
            valid, renamed = claim_output(valid, queued)  # never over an earlier or queued run's model
            notes = [renamed] if renamed else []
            warnings = [*warnings, *notes]
            run = self.supervisor.start(valid, workspace=valid.get("workspace_dir") or self.workspace,
                                        **({"notes": notes} if notes else {}))
        self.tensorboard.sync(valid, run.path, True)
        note = "\n".join(f"- {w}" for w in warnings)
        return {self.monitor.run_id: str(run.path), self.monitor.problems: (f"### Started with warnings\n{note}" if warnings else "")}


def build_page(workspace: Path, roots: Iterable[str | os.PathLike] = ()) -> gr.Blocks:
    return Page(workspace, roots).blocks
