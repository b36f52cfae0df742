"""The page's config files: a preset, Load, Import, Save and Export, and the folders the page may
read and write (a mixin of `page.Page`).

Every path the page reads or writes goes through `confined` (ui/paths.py: symlinks followed,
inside the workspace or the launcher's folders); a concept folder widens nothing (it is
training's). They read `workspace`, `extra_roots`, and `autosave` and `loaded` from `Page`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gradio as gr

from ..config.io import ConfigError, config_to_dict, load_config, read_json
from ..config.presets import list_presets
from .paths import PathRefused, allowed_roots
from .paths import check as confine
from .state import preset_config, save_ui_choice


class ConfigFiles:
    def roots(self, config: dict[str, Any] | None = None) -> list[Path]:
        """Folders the page may list, read and write: the workspace and the launcher's roots,
        fixed at start-up. `config` (the form's) adds nothing: a concept folder is training's."""
        return allowed_roots(self.workspace, self.extra_roots)

    def confined(self, field: str, path: str, roots: list[Path]) -> Path:
        """`path` resolved (symlinks followed) if inside `roots`; else a gr.Error naming the path
        and the folders allowed. paths.check is the one confinement check of the page."""
        try:
            return confine(path, roots)
        except PathRefused as err:
            raise gr.Error(f"{field}: {err}") from None

    def write_roots(self) -> list[Path]:
        """Where the page writes config files: the same roots (never a hidden or secret file)."""
        return self.roots()

    def on_preset(self, name: str, current: dict[str, Any] | None = None) -> dict:
        """The preset over the defaults; the concepts and sample prompts on screen (`current`)
        are kept unless the preset brings its own (a preset is settings, the images are the user's)."""
        if not name:
            raise gr.Error("Choose a preset first.")
        from ..config.presets import PRESETS_DIR, resolve_preset_path  # noqa: PLC0415

        found = resolve_preset_path(name)
        if found is None:
            raise gr.Error(f"Preset: {name!r} not found (available: {', '.join(list_presets()) or 'none'})")
        self.confined("Preset", str(found), [PRESETS_DIR])
        config = preset_config(name, self.workspace)
        from ..config.presets import load_preset  # noqa: PLC0415

        overlay = load_preset(name)
        current, demo_dropped = self._without_demo(name, current or {})
        kept = [key for key in ("concepts", "samples") if key not in overlay and current.get(key)]
        config.update({key: copy.deepcopy(current[key]) for key in kept})
        replaced = [key for key in ("concepts", "samples") if key in overlay and current.get(key) not in (None, [], overlay[key])]
        self.autosave(config)
        save_ui_choice(self.workspace, preset=name)
        gr.Info(f"Preset {name} loaded" + (f"; your {' and '.join(kept)} are kept" if kept else "")
                + (f"; its {' and '.join(replaced)} replace yours" if replaced else "")
                + (f"; the demo's {' and '.join(demo_dropped)} are left out: add your own on the Concepts tab" if demo_dropped else "")
                + ".")
        return self.loaded(config)

    def _without_demo(self, name: str, current: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """`current` without the demo preset's own concept (its shapes) and sample, when another
        preset is loaded over the demo the page opens with: they must not train into a real LoRA."""
        if name == "demo":
            return current, []
        demo = preset_config("demo", self.workspace)
        demo_paths = {str(Path(c.get("path", ""))) for c in demo.get("concepts") or []}
        out, dropped = dict(current), []
        concepts = [c for c in current.get("concepts") or [] if str(Path(str(c.get("path", "")))) not in demo_paths]
        if len(concepts) < len(current.get("concepts") or []):
            out["concepts"], dropped = concepts, ["concept"]
        samples = [s for s in current.get("samples") or [] if s not in (demo.get("samples") or [])]
        if len(samples) < len(current.get("samples") or []):
            out["samples"], dropped = samples, [*dropped, "sample"]
        return out, dropped

    def read_any(self, path: str | Path, shown: str | None = None) -> dict[str, Any]:
        """A config file already confined by the caller; `shown`: its name in messages (an upload's
        own name, not gradio's folder for it)."""
        p = Path(path)
        if not p.is_file():
            raise gr.Error(f"Config file: {p} does not exist.")
        try:
            # an import reads the files it names (a OneTrainer concepts file) only in these folders
            loaded = load_config(read_json(p), base_dir=p.parent, source=shown or str(p), readable=[p.parent, *self.roots()])
        except ConfigError as err:
            raise gr.Error(f"Config file {p.name}: {err}") from None
        for warning in loaded.warnings:
            gr.Warning(warning)
        return config_to_dict(loaded.config)

    def on_load(self, path: str, config: dict[str, Any] | None = None) -> dict:
        """Reads a config file inside the page's folders (those of `config`, the one on screen)."""
        if not str(path or "").strip():
            raise gr.Error("Config file: enter the path of a config JSON to load.")
        config = self.read_any(self.confined("Config file", path, self.roots(config or {})))
        return self.file_loaded(config, config_path=path.strip())

    def on_upload(self, file) -> dict:
        """An imported file: gradio puts uploads in its upload folder; nothing else is read."""
        from gradio.utils import get_upload_folder  # noqa: PLC0415

        name = file if isinstance(file, str) else getattr(file, "name", "")
        upload_root = Path(get_upload_folder()).resolve()
        config = self.read_any(self.confined("Import file", str(name or ""), [upload_root, *self.roots()]), Path(str(name or "")).name)
        return self.file_loaded(config)

    def file_loaded(self, config: dict[str, Any], **choice: str) -> dict:
        """A config read from a file is the form's: saved, shown, and the Preset box emptied (it
        named the preset the form held before)."""
        self.autosave(config)
        save_ui_choice(self.workspace, preset="", **choice)
        return {**self.loaded(config), self.preset: None}

    def on_save(self, path: str, config: dict[str, Any]) -> None:
        """Writes the config as JSON, only to a .json file inside the workspace or the launcher's
        folders (never over a dotfile, a key or a script elsewhere)."""
        if not str(path or "").strip():
            raise gr.Error("Config file: enter a path to save to.")
        target = self.confined("Config file", path, self.write_roots())
        if target.suffix.lower() != ".json" or target.is_dir():
            raise gr.Error(f"Config file: {path.strip()} must name a .json file (e.g. {self.workspace / 'configs' / 'my-config.json'}).")
        from ..fsutil import atomic_write_json  # noqa: PLC0415

        try:
            atomic_write_json(target, config, indent=2)
        except OSError as err:
            raise gr.Error(f"Config file: could not write {target}: {err.strerror or err}") from None
        save_ui_choice(self.workspace, config_path=path.strip())
        gr.Info(f"Saved {target}")

    def on_export(self, config: dict[str, Any]) -> str:
        from ..fsutil import atomic_write_json  # noqa: PLC0415

        out = self.workspace / "exports" / "config.json"
        atomic_write_json(out, config, indent=2)
        return str(out)
