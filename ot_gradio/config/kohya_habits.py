"""What a kohya_ss / sd-scripts user types into our config that means something else here: said
before the run (config/doctor.check), with the setting that does what they meant. (A kohya_ss
config file itself is converted: config/kohya_import.py.)"""

from __future__ import annotations

import re
from typing import Any

from .kohya_import import SAMPLE_FIELDS
from .parts import SampleConfig

# kohya's sample prompt options, each with the label of the sample field that holds it here
SAMPLE_OPTIONS = {o: SampleConfig.model_fields[f].json_schema_extra["label"] for o, (f, _) in SAMPLE_FIELDS.items()}
_OPTION = re.compile(rf"(?:^|\s)--([{''.join(SAMPLE_FIELDS)}])(?=\s|$)")


def kohya_warnings(config: Any) -> list[str]:
    return [w for w in (_resolution_warning(config.resolution), _sample_option_warning(config.samples)) if w]


def _resolution_warning(resolution: str) -> str | None:
    """kohya's `--resolution 512,768` is one size, 512 wide and 768 high; here a comma list is
    several sizes (OneTrainer's multi-resolution training)."""
    parts = [p.strip() for p in str(resolution).split(",") if p.strip()]
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or parts[0] == parts[1]:
        return None
    w, h = parts
    return (f"Training → Resolution '{resolution}' trains each step at one of two sizes, {w}x{w} and {h}x{h} (a comma list, as in "
            f"OneTrainer); for one size {w} wide and {h} high, what kohya's '{w},{h}' means, write {w}x{h}.")


def _sample_option_warning(samples: list[Any]) -> str | None:
    found = {i + 1: sorted(set(_OPTION.findall(s.prompt)), key=list(SAMPLE_OPTIONS).index)
             for i, s in enumerate(samples) if s.enabled and "--" in s.prompt}
    found = {n: opts for n, opts in found.items() if opts}
    if not found:
        return None
    which = "sample" + ("s " if len(found) > 1 else " ") + ", ".join(map(str, found))
    options = sorted({o for opts in found.values() for o in opts}, key=list(SAMPLE_OPTIONS).index)
    fields = ", ".join(f"--{o} → {SAMPLE_OPTIONS[o]}" for o in options)
    return (f"Sampling → {which}: the prompt holds kohya's sample options ({', '.join('--' + o for o in options)}); here the "
            f"whole line is the prompt, options included, and each option is a field of the sample: move them there ({fields}).")
