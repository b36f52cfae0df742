"""Libraries that diffusers imports on its own, deferred until something uses them.

diffusers imports bitsandbytes whenever it is installed (its quantizers, from `modeling_utils`),
and bitsandbytes imports torch's inductor: about 0.7-0.9 s of every run's start-up on a CPU,
for a library a run needs only for 8-bit optimizers or quantized parts (training/quantize.py,
training/optimizers.py), which import it themselves. onnxruntime (0.2 s) comes from diffusers'
pipeline loader the same way; only the WD14 captioner uses it.

`defer_optional_imports()` puts a stand-in module for each in `sys.modules` that carries the real
module spec (so `importlib.util.find_spec` and diffusers' availability checks see the package)
and imports the real module on the first attribute read, then forwards to it. Code that does
`import bitsandbytes as bnb` and reads `bnb.nn.Linear4bit` later gets the real class; nothing
changes but when the import happens. (importlib's LazyLoader does not work here: `find_spec`
reads `__spec__`, which makes it load at once.)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

DEFERRED = ("bitsandbytes", "onnxruntime")
_lock = threading.Lock()


class _Deferred(types.ModuleType):
    """Stands in for a package until one of its attributes is read."""

    def __getattr__(self, attr: str):  # called only for attributes the stand-in lacks
        name = self.__name__
        with _lock:
            if sys.modules.get(name) is self:
                del sys.modules[name]
                try:
                    real = importlib.import_module(name)
                except BaseException:
                    sys.modules[name] = self  # a failed import fails again on the next read
                    raise
                self.__dict__.update(real.__dict__)
        return getattr(sys.modules[name], attr)

    def __setattr__(self, attr: str, value) -> None:
        super().__setattr__(attr, value)
        real = sys.modules.get(self.__name__)
        if real is not None and real is not self:  # e.g. the import system binding a submodule to its parent
            setattr(real, attr, value)


def defer_optional_imports(names: tuple[str, ...] = DEFERRED) -> list[str]:
    """Installs the stand-ins for the installed packages of `names` not imported yet; returns them."""
    deferred = []
    for name in names:
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue  # not installed: leave the ImportError to whoever imports it
        module = _Deferred(name)
        module.__spec__ = spec
        module.__file__ = spec.origin
        module.__loader__ = spec.loader
        # no __path__: importing a submodule (`import bitsandbytes.optim`) reads it, which loads the package first
        sys.modules[name] = module
        deferred.append(name)
    return deferred


def is_loaded(name: str) -> bool:
    """The real module has been imported (not only its stand-in)."""
    module = sys.modules.get(name)
    return module is not None and not isinstance(module, _Deferred)


BNB_WEIGHT_TYPES = ("INT_8", "NFLOAT_4")  # the weight data types training/quantize.py builds from bitsandbytes layers (not the W8A8 ones)


def needs_bnb_layers(config: Any) -> bool:
    """Some part of the run's model is quantized into bitsandbytes layers (INT_8, NFLOAT_4)."""
    from ..config.families import family_info  # noqa: PLC0415

    info = family_info(config.model_type)
    parts = info.parts if info is not None else ()
    return any(str(getattr(getattr(config, part, None), "weight_dtype", "")) in BNB_WEIGHT_TYPES for part in parts)


def keep_peft_from_bitsandbytes() -> bool:
    """peft imports bitsandbytes whenever it injects LoRA layers, to know bitsandbytes' quantized
    layers; a run without such layers (`needs_bnb_layers` false) has none to wrap. This answers
    peft's availability checks (functools caches, asked once per process) while bitsandbytes looks
    not installed, then puts the stand-in back: peft wraps plain layers only, and an 8-bit optimizer
    still imports bitsandbytes. Returns whether it did so (not once bitsandbytes is loaded)."""
    if is_loaded("bitsandbytes"):
        return False
    saved = sys.modules.get("bitsandbytes")
    sys.modules["bitsandbytes"] = None  # find_spec -> None: "not installed"
    try:
        from peft import import_utils  # noqa: PLC0415

        checks = [getattr(import_utils, name, None) for name in ("is_bnb_available", "is_bnb_4bit_available")]
        if not all(callable(check) and hasattr(check, "cache_info") for check in checks):
            return False  # another peft: leave it alone (it imports bitsandbytes as before)
        return not any(check() for check in checks)
    finally:
        if saved is None:
            del sys.modules["bitsandbytes"]
        else:
            sys.modules["bitsandbytes"] = saved
