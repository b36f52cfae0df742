"""Loading and computing as a GPU does, on the CPU: each part in its weight data type (a CPU run
loads every part in float32) and FLOAT_16 under a float16 autocast (a CPU run computes it in
float32). The types then differ between parts as they do on a GPU: a FLOAT_16 UNet beside a
FLOAT_32 VAE, a bfloat16 text encoder in a float16 run. CPU kernels take half types, slowly.
One rule of CUDA's autocast that the CPU's lacks is reproduced: layer and group norms run in
float32 (CUDA casts their input, weight and bias; the CPU's kernel refuses a bfloat16 weight
beside a float16 input). Other CUDA-only behaviour (bitsandbytes' kernels, a float32 autocast)
is not."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F


@contextlib.contextmanager
def as_on_a_gpu() -> Iterator[None]:
    from ot_gradio.config.enums import GGUF_TYPES, QUANTIZED_TYPES, DataType
    from ot_gradio.training import device as dev

    def weight_dtype(data_type, device, compute_dtype=None):
        data_type = DataType(data_type)
        if data_type in QUANTIZED_TYPES or data_type in GGUF_TYPES:
            return compute_dtype if compute_dtype is not None else torch.float32
        if data_type not in dev.TORCH_DTYPES:
            return dev.weight_dtype.__wrapped__(data_type, device, compute_dtype)
        return dev.TORCH_DTYPES[data_type]

    real_init = dev.Precision.__init__

    def precision_init(self, train_dtype, device, autocast_cache=True):
        real_init(self, train_dtype, device, autocast_cache)
        if DataType(train_dtype) == DataType.FLOAT_16:
            self.dtype, self.note = torch.float16, None

    def in_float32(norm):
        def run(input, *args, **kwargs):
            if not torch.is_autocast_enabled("cpu") or input.device.type != "cpu":  # (CUDA's autocast leaves meta tensors alone too)
                return norm(input, *args, **kwargs)
            up = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            kw = {k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kwargs.items()}
            with torch.autocast("cpu", enabled=False):
                return norm(input.float(), *up, **kw)

        return run

    weight_dtype.__wrapped__ = dev.weight_dtype
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dev, "weight_dtype", weight_dtype)
        patch.setattr(dev.Precision, "__init__", precision_init)
        for name in ("layer_norm", "group_norm"):
            patch.setattr(F, name, in_float32(getattr(F, name)))
        yield
