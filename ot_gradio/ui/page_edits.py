"""The page's edit handlers: a field's edit, the edit log, "Use this" in the file browser, the
optimizer switch and its defaults (a mixin of `page.Page`).

Each takes the session's config (a gr.State) and returns it edited, saved to the workspace, with
what the edit changes on the page (the learning-rate chart, the memory table, which fields show).
They read the page's components from `Page`: `fields`, `config_state`, `edit_log`,
`edits_applied`, `lr_plot`, `memory`, `memory_estimate`, `browser`, `concepts`, and its
`autosave`, `visibility` and `populate`."""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr

from ..config.presets import base_model_after_type_change
from ..secrets import SECRET_KEYS, without_tokens
from . import edit_log
from .form import config_from_values
from .memory_estimate import PROMPT as ESTIMATE_PROMPT
from .memory_estimate import stale
from .training_tab import lr_frame, memory_markdown
from .visibility import method_after_type_change, method_choices


class EditHandlers:
    def on_edit(self, values: dict, evt: gr.EventData = None) -> dict | Any:
        """The field that fired the event, applied to the session's config. Only that one: while a
        page loads, the change event of the first text box it fills in carries every other field
        still at its built-in default (FINE_TUNE, cuda, 3e-06...), and applying them all saved
        those over the workspace's config. Without an event (a test, "Use this"): every value."""
        target = getattr(evt, "target", None)
        field = self._by_id.get(getattr(target, "_id", None)) or self._by_elem.get(getattr(target, "elem_id", None))
        if target is not None and field is None:  # not a field of the form: never apply the others' values
            return gr.skip()
        fields = {field.path: field} if field is not None else self.fields
        config = config_from_values(fields, values, values[self.config_state])
        switched = base = None
        if config.get("model_type") != values[self.config_state].get("model_type"):
            switched = method_after_type_change(config.get("model_type"), config.get("training_method"))
            if switched:  # the new model type lacks the method: the first it offers, said in one line
                gr.Info(f"Training method: {config.get('training_method')} is not available for {config.get('model_type')}; "
                        f"switched to {switched}.")
                config = {**config, "training_method": switched}
            base = base_model_after_type_change(values[self.config_state].get("model_type"), config.get("model_type"),
                                                config.get("base_model_name"))
            if base:  # the old type's default base model would only load as the wrong family
                gr.Info(f"Base model: {config.get('base_model_name') or 'empty'} was the default of "
                        f"{values[self.config_state].get('model_type')}; set to {base}, the default of {config.get('model_type')}.")
                config = {**config, "base_model_name": base}
        if field is not None and config == values[self.config_state]:
            # the page filling the field in (a load, a preset): nothing to save or redraw (an empty
            # dict is not "no update" to Gradio: it fails the event with a toast on the page)
            return gr.skip()
        out = self._edited(values[self.config_state], config)
        if switched:  # the dropdown's value changes with its choices, in the same update
            out[self.fields["training_method"].component] = gr.update(choices=method_choices(config["model_type"], switched), value=switched)
        if base:
            out[self.fields["base_model_name"].component] = gr.update(value=base)
        return out

    def _edited(self, before: dict[str, Any], config: dict[str, Any]) -> dict:
        """An edited config saved, and what it changes on the page."""
        self.autosave(config)
        typed = any((config.get("secrets") or {}).get(key) for key in SECRET_KEYS)
        if typed:  # stored (or removed) now: the field empties and says so, and no later save repeats it
            config = without_tokens(config)
        out = {self.config_state: config, self.lr_plot: lr_frame(config), self.memory: memory_markdown(config), **self.visibility(config)}
        if typed:
            out.update(self.token_fields())
        if stale(before, config):  # another model's "fits" must not stay on screen
            out[self.memory_estimate.output] = ESTIMATE_PROMPT
        return out

    def on_edit_log(self, values: dict) -> dict | Any:
        """The edit log's new entries applied to the session's config, oldest first: each the one
        field that made it (ui/edit_log.py). The page filling fields in (a load, a preset) logs the
        values the config already has: nothing to save or redraw then."""
        new = edit_log.pending(values[self.edit_log], values[self.edits_applied])
        if not new:
            return gr.skip()
        before = values[self.config_state]
        config = self._apply_log(before, new)
        done = {self.edits_applied: new[-1][0]}
        return done if config == before else {**self._edited(before, config), **done}

    def _apply_log(self, config: dict[str, Any], entries: list) -> dict[str, Any]:
        for _, path, value, *_ in entries:
            if path in self.fields and path not in ("model_type", "training_method", "optimizer.optimizer"):
                config = config_from_values({path: self.fields[path]}, {self.fields[path].component: value}, config)
        return config

    def _form_config(self, values: dict) -> dict[str, Any]:
        """The config the form shows right now: the session's, the fields' values among `values`
        (tests pass them), then the edits still on their way (the log's entries not yet applied)."""
        config = config_from_values(self.fields, values, values[self.config_state])
        return self._apply_log(config, edit_log.pending(values.get(self.edit_log), values.get(self.edits_applied)))

    def on_browsed(self, values: dict) -> dict:
        """After "Use this" in the file browser: the edit of the field it filled in."""
        if values[self.browser.target].startswith("concept-"):
            return {self.config_state: self.concepts.edit(values[self.config_state], values[self.concepts.selector], values)}
        chosen = [f for f in self.fields.values() if f.browser is not None and f.browser.elem_id == values[self.browser.target]]
        if not chosen:
            return gr.skip()
        return self.on_edit(values, gr.EventData(chosen[0].component, None))

    def on_optimizer(self, values: dict) -> dict:
        """Switching optimizer keeps the old one's settings and restores the new one's last ones."""
        from ..config.optimizer import optimizer_param_defaults  # noqa: PLC0415

        config = copy.deepcopy(values[self.config_state])
        old = config.get("optimizer", {})
        remembered = config.setdefault("optimizer_defaults", {})
        if old.get("optimizer"):
            remembered[old["optimizer"]] = old
        new_name = values[self.fields["optimizer.optimizer"].component]
        base = remembered.get(new_name) or {**{k: None for k in old}, **optimizer_param_defaults(new_name)}
        config["optimizer"] = {**old, **{k: v for k, v in base.items() if k in old}, "optimizer": new_name}
        self.autosave(config)
        return self.populate(config)

    def on_load_defaults(self, config: dict[str, Any]) -> dict:
        from ..config.optimizer import optimizer_param_defaults  # noqa: PLC0415

        config = copy.deepcopy(config)
        name = config["optimizer"]["optimizer"]
        config["optimizer"] = {**config["optimizer"], **{k: v for k, v in optimizer_param_defaults(name).items() if k in config["optimizer"]}}
        self.autosave(config)
        return self.populate(config)
