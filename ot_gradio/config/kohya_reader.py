"""How a kohya_ss / sd-scripts config's values are read: what is read counts as carried over."""

from __future__ import annotations

from typing import Any

from .validation import ConfigError

# kohya's own defaults, which change nothing when a file states them
KOHYA_DEFAULTS = {"max_timestep": 1000, "min_timestep": 0, "bucket_reso_steps": 64, "min_bucket_reso": 256,
                  "max_bucket_reso": 2048, "lr_scheduler_power": 1, "factor": -1, "train_on_input": True,
                  "noise_offset_type": "Original", "max_token_length": 75, "conv_dim": 1, "conv_alpha": 1,
                  "loss_type": "l2", "huber_c": 0.1, "huber_schedule": "snr", "huber_scale": 1, "prior_loss_weight": 1,
                  "train_blocks": "all"}


def _number(value: Any) -> float | None:
    try:
        return float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def changes_something(key: str, value: Any) -> bool:
    """A value a file sets that kohya would not have used anyway: set, not 0 and not kohya's
    default, whether written as a number or as text (kohya_ss saves "75" for 75)."""
    if not is_set(value):
        return False
    number, default = _number(value), KOHYA_DEFAULTS.get(key, object())
    if number is not None:
        return number != 0 and number != _number(default)
    return value != default


def is_set(value: Any) -> bool:
    return value not in (None, "", False, 0, [], {}) and not (isinstance(value, str) and value.lower() in ("none", "default"))


# keys only kohya_ss's page saves (sd-scripts has none of them; its `v2` is no sign of the page)
PAGE_KEYS = ("LoRA_type", "max_resolution", "sdxl", "sdxl_checkbox", "flux1_checkbox", "sd3_checkbox", "anima_checkbox")


class KohyaReader:
    """The kohya config's values; what is read counts as carried over."""

    def __init__(self, data: dict[str, Any], sections: list[str] | tuple[str, ...] = ()):
        self.data, self.used, self.sections = data, set(), frozenset(sections)  # sections: the file's table names

    def get(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    @property
    def page(self) -> bool:
        """A config kohya_ss's page saved (it always says the family and its bucket settings)."""
        return any(key in self.data for key in PAGE_KEYS)

    def given(self, key: str) -> bool:
        return is_set(self.data.get(key))

    def flag(self, key: str) -> bool:
        """A kohya switch: true, 1 or "true" (a hand-written config's "false" is false)."""
        return flag(self.get(key))

    def number(self, key: str, kind: type = float) -> Any:
        value = self.get(key)
        try:
            return kind(float(value)) if kind is int else kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: {value!r} is not a number (kohya_ss config)") from None


def flag(value: Any) -> bool:
    return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else bool(value)
