"""Device and data-type choices, with the fallbacks a CPU-only machine needs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

from ..config.enums import GGUF_TYPES, QUANTIZED_TYPES, DataType

TORCH_DTYPES = {
    DataType.FLOAT_32: torch.float32,
    DataType.FLOAT_16: torch.float16,
    DataType.BFLOAT_16: torch.bfloat16,
    DataType.TFLOAT_32: torch.float32,
}


def resolve_device(name: str) -> tuple[torch.device, str | None]:
    """The device to train on, and a warning if the asked one is missing."""
    name = (name or "cpu").strip()
    try:
        device = torch.device(name)
    except RuntimeError:
        return torch.device("cpu"), f"train_device: '{name}' is not a device name; training on cpu"
    if device.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu"), f"train_device: {name} is not available on this machine; training on cpu (slow)"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return torch.device("cpu"), f"train_device: {name} is not available on this machine; training on cpu (slow)"
    return device, None


def quantized_part_trained(part: str, data_type: DataType) -> str:
    """The refusal of a method that trains a quantized part itself (only adapters can train on it)."""
    return (f"{part}.weight_dtype: {DataType(data_type).value} weights cannot be trained; this method trains the {part} "
            "itself, so use FLOAT_32, FLOAT_16 or BFLOAT_16 for it")


def weight_dtype(data_type: DataType, device: torch.device, compute_dtype: torch.dtype | None = None) -> torch.dtype:
    """The torch type a part is loaded in. Half types are used on accelerators; on CPU they are
    slow or unsupported for convolutions, so weights stay float32 there. The quantized types
    (FLOAT_8, INT_8, NFLOAT_4, INT_W8A8, FLOAT_W8A8, see quantize.py) load the part in the compute type (the train
    dtype's, else float32) and quantize its Linear layers afterwards; GGUF loads the .gguf file's
    quantized Linear weights as they are and its other weights in the compute type."""
    data_type = DataType(data_type)
    if data_type in QUANTIZED_TYPES or data_type in GGUF_TYPES:
        return compute_dtype if compute_dtype is not None and device.type != "cpu" else torch.float32
    dtype = TORCH_DTYPES.get(data_type)
    if dtype is None:
        raise ValueError(f"weight data type {data_type} is not supported; use FLOAT_32, FLOAT_16, BFLOAT_16, FLOAT_8, INT_8, NFLOAT_4, INT_W8A8, FLOAT_W8A8 or a GGUF type")
    if device.type == "cpu":
        return torch.float32
    return dtype


def output_dtype(data_type: DataType) -> torch.dtype:
    dtype = TORCH_DTYPES.get(DataType(data_type))
    if dtype is None:
        raise ValueError(f"output_dtype: {data_type} is not supported; use FLOAT_32, FLOAT_16 or BFLOAT_16")
    return dtype


class Precision:
    """Mixed precision for the forward pass (the train data type), with a grad scaler for
    float16 on CUDA over float32 weights. TFLOAT_32 is float32 with TensorFloat-32 matmuls on CUDA.
    `autocast_cache` is `enable_autocast_cache`: autocast keeps the cast copies of weights for the
    whole forward pass (faster; turn off if samples get noisy every few epochs, seen with ZLUDA)."""

    def __init__(self, train_dtype: DataType, device: torch.device, autocast_cache: bool = True):
        self.device = device
        self.autocast_cache = autocast_cache
        train_dtype = DataType(train_dtype)
        self.note: str | None = None
        if train_dtype == DataType.FLOAT_32:
            self.dtype = None
        elif train_dtype == DataType.TFLOAT_32:
            self.dtype = None
            if device.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
        elif train_dtype == DataType.BFLOAT_16:
            self.dtype = torch.bfloat16
        elif train_dtype == DataType.FLOAT_16:
            if device.type == "cpu":
                # FLOAT_16 asks for speed. CPU autocast has no float16 and its bfloat16 made steps
                # of the benchmark UNet 1.9x slower than float32 (bench/vs_diffusers_loop.py, also on
                # a CPU with AMX): float32 is the fast choice here. BFLOAT_16 set explicitly stays.
                self.dtype = None
                self.note = ("train_dtype: FLOAT_16 on cpu trains in FLOAT_32 (CPU autocast has no float16, and its "
                             "bfloat16 is slower than float32 on CPU); set BFLOAT_16 to compute in bfloat16")
            else:
                self.dtype = torch.float16
        else:
            raise ValueError(f"train_dtype: {train_dtype} is not supported; use FLOAT_32, FLOAT_16, BFLOAT_16 or TFLOAT_32")
        self.scaler: torch.amp.GradScaler | None = None  # set by `scale_gradients_of` once the trained weights are known

    def scale_gradients_of(self, params: Iterable[torch.Tensor]) -> None:
        """A grad scaler for FLOAT_16 on CUDA when every trained weight is float32, as OneTrainer
        decides (`enable_grad_scaling`): torch's scaler cannot unscale float16 gradients, and
        bfloat16 weights (OneTrainer's SDXL preset under FLOAT_16) train unscaled there too."""
        if self.dtype == torch.float16 and self.device.type == "cuda" and all(p.dtype == torch.float32 for p in params):
            self.scaler = torch.amp.GradScaler("cuda")

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype, cache_enabled=self.autocast_cache)


@contextlib.contextmanager
def channels_last_on_cpu(module: torch.nn.Module | None, device: torch.device):
    """Run `module` (a VAE encoding images for the latent cache) with its convolution weights in
    channels-last layout while the block lasts, on CPU only: oneDNN's convolutions are faster that
    way (a KL VAE's encode, measured here: 20% less time at batch 4, 64 px, one thread). GPUs keep
    the layout they loaded with (not measured here), and so do video VAEs with 3-D convolutions
    (Qwen-Image's), whose layout would be channels-last-3d (not measured either). Yields the
    function that lays out its input the same way."""
    if module is None or device.type != "cpu" or any(p.dim() > 4 for p in module.parameters()):
        yield lambda pixels: pixels
        return
    module.to(memory_format=torch.channels_last)
    try:
        yield lambda pixels: pixels.contiguous(memory_format=torch.channels_last)
    finally:
        module.to(memory_format=torch.contiguous_format)
