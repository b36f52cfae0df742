"""What the page and its HTTP API refuse in a config that `python -m ot_gradio train` takes on the
machine. The page is reached through a share link: it writes only inside the folders it may use
(ui/paths.py: the workspace, the start folder, `--browse-root` folders; never a hidden file or
`secrets.json`), and runs no code a config names. So a config from the page must

- save its runs, caches and model inside those folders (`workspace_dir`, `cache_dir`,
  `output_model_destination`, an absolute `debug_dir`): a model written over a file elsewhere
  (a `.pth` file in site-packages runs its `import` lines at every Python start) is refused;
- read the text files a run copies into its folder only from there: a concept's prompt file and
  its special tags file (debug mode writes each caption beside the run, which the page serves);
- read a sample's images (base image, mask, control image) only from there: a sample starts
  from them, and the page shows it;
- name a CUSTOM scheduler of torch, transformers or diffusers only: building another module's
  class runs that module's code (`torch.hub.load` fetches and runs any repository's).

Concept folders (images) may lie elsewhere, as the README says: training reads them, the page
does not open them; but not with debug mode on, which writes the images it trains on into the
run's folder. Torch-free: the page's process checks a config as a dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data.captions import beside_concept
from .paths import PathRefused, check

SCHEDULER_MODULES = ("torch.optim.lr_scheduler", "transformers.optimization", "transformers", "diffusers.optimization")
WRITTEN = ("workspace_dir", "cache_dir", "output_model_destination", "huggingface_cache_dir", "quantization.cache_dir")
SAMPLE_FILES = ("base_image_path", "mask_image_path", "control_image")
CLI = "train it on the machine with `python -m ot_gradio train --config FILE`"


def _scheduler_name(path: str) -> bool:
    """A class of torch.optim.lr_scheduler (a capitalised name), or a get_..._schedule... function
    (or AdafactorSchedule) of transformers.optimization, transformers or diffusers.optimization:
    the worker refuses anything else too (training/scheduler_classes.py)."""
    module, _, name = path.strip().rpartition(".")
    if module not in SCHEDULER_MODULES or not name.isidentifier():
        return False
    if module == "torch.optim.lr_scheduler":
        return name[:1].isupper()
    return (name.startswith("get_") and "schedule" in name) or name == "AdafactorSchedule"


def page_problems(config: dict[str, Any], roots: list[Path]) -> list[str]:
    """The problems of a (validated) config that only the page and the HTTP API refuse."""
    out = []
    if str(config.get("learning_rate_scheduler") or "") == "CUSTOM":
        path = str(config.get("custom_learning_rate_scheduler") or "").strip()
        if path and not _scheduler_name(path):
            out.append(f"custom_learning_rate_scheduler: {path[:200]} is not a scheduler of torch.optim.lr_scheduler, "
                       "transformers.optimization or diffusers.optimization; the page takes only those, since building a "
                       f"class of another module runs that module's code. Choose one of them, or {CLI}")
    for field in WRITTEN:
        section, _, key = field.rpartition(".")
        value = str((config.get(section) or {} if section else config).get(key) or "").strip()
        if value and (problem := _outside(value, roots)):
            out.append(f"{field}: {problem}")
    debug = str(config.get("debug_dir") or "").strip()
    if config.get("debug_mode") and debug and Path(debug).expanduser().is_absolute() and (problem := _outside(debug, roots)):
        out.append(f"debug_dir: {problem}")  # (a relative one stays inside the run's folder: training/debug_output.py)
    for i, concept in enumerate(config.get("concepts") or []):
        out += concept_file_problems(concept or {}, roots, f"concepts[{i}].")
        if config.get("debug_mode") and concept.get("enabled", True) and str(concept.get("path") or "").strip() and (
                problem := _outside(str(concept["path"]), roots)):
            out.append(f"concepts[{i}].path: with debug mode on (it writes the images it trains on beside the run), {problem}")
    for i, sample in enumerate(config.get("samples") or []):
        for field in SAMPLE_FILES:
            value = str((sample or {}).get(field) or "").strip()
            if value and (problem := _outside(value, roots)):
                out.append(f"samples[{i}].{field}: {problem}")
    return out


def concept_file_problems(concept: dict[str, Any], roots: list[Path], prefix: str = "") -> list[str]:
    """The text files a concept names (its prompt file, Captions file, special-tags file) that lie
    outside the page's folders: the page reads none of them (a run's checks and the Concepts tab's
    statistics would answer for their words)."""
    out = []
    text = concept.get("text") or {}
    folder = Path(str(concept.get("path") or "")).expanduser()
    if str(text.get("prompt_source") or "") == "concept" and (prompt := str(text.get("prompt_path") or "").strip()):
        if problem := _outside(str(beside_concept(prompt, folder)), roots):
            out.append(f"{prefix}text.prompt_path: {problem}")
    if str(text.get("prompt_source") or "sample") == "sample" and (named := str(text.get("captions_file") or "").strip()):
        if problem := _outside(str(beside_concept(named, folder)), roots):
            out.append(f"{prefix}text.captions_file: {problem}")
    special = str(text.get("tag_dropout_special_tags") or "").strip()
    if special.lower().endswith((".txt", ".csv")) and (problem := _outside(str(beside_concept(special, folder)), roots)):
        out.append(f"{prefix}text.tag_dropout_special_tags: {problem}")
    return out


def _outside(value: str, roots: list[Path]) -> str | None:
    try:
        check(value, roots)
    except PathRefused as err:
        return f"{err} (from the page; or {CLI})"
    return None
