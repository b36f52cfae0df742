"""The kohya LoRA layer names of families whose layers keep diffusers' module paths, but for
those ComfyUI names its own way (models/comfy_lora_names.py)."""

from __future__ import annotations

from collections.abc import Mapping

from ot_gradio.models.common import base_module


class IdentityLoraNames:
    """`lora_module_names` for families whose kohya LoRA names are diffusers' own module paths,
    except the layers `comfy_lora_names` (a function of models/comfy_lora_names.py) names as ComfyUI does."""

    comfy_lora_names: str | None = None

    def lora_module_names(self) -> dict[str, dict[str, str]]:
        """Identity renames for kohya LoRA files (the `_`-joined names cannot be split back by rule)."""
        from ot_gradio.models.key_layout import layer_paths

        paths = {part: layer_paths(base_module(getattr(self, part))) for part in ("transformer", "text_encoder")}
        return comfy_lora_module_names(self.comfy_lora_names, paths, identity=True)


def comfy_lora_module_names(rule: str | None, paths: Mapping[str, list[str]], identity: bool = False) -> dict[str, dict[str, str]]:
    """The family's kohya renames: identity (if asked) overlaid with ComfyUI's names by `rule`."""
    from ot_gradio.models import comfy_lora_names

    names = {part: ({p: p for p in ps} if identity else {}) for part, ps in paths.items()}
    for part, table in (getattr(comfy_lora_names, rule)(paths) if rule else {}).items():
        names.setdefault(part, {}).update(table)
    return {part: table for part, table in names.items() if table}
