"""LoRA's adapter variants on peft layers: DoRA, LoHa, LoKr and OFT v2.

- DoRA (`lora_decompose`): peft's LoRA layer (`use_dora`) with our own decomposition step, so
  OneTrainer's two choices both work: the norm over each input column (its default, LyCORIS's,
  and the only one A1111 reads) or over each output row (what peft and diffusers compute), with or
  without an epsilon added to the norm. As in the paper, peft and OneTrainer, the norm is a
  constant for backprop.
- LoHa / LoKr (`peft_type`): peft's LoHaConfig / LoKrConfig layers, whose parameters already carry
  LyCORIS's names (`hada_w1_a`, `lokr_w1`, ...); OneTrainer's LoKr switches (DoRA on LoKr, a whole
  w2, the vec trick) are in lokr_switches.py.
- OFT v2 (`peft_type` OFT_2): peft's OFTConfig layers with OneTrainer's forward (oft.py), whose
  state is OneTrainer's `oft_R.weight` (+ `oft_R.scaled_oft` for Scaled OFT); no rank or alpha.

In memory one layer's weights are peft's state-dict entries (`lora_A.weight`, `hada_w1_a`, ...);
the DoRA magnitude is `lora_magnitude_vector` on the output axis (peft's shape: (out,) or
(1, out, 1, 1)) and `dora_scale` on the input axis (kohya's (1, in) or (1, in, 1, 1)). The
functions at the end convert one layer to and from kohya/LyCORIS entries.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import oft
from .float_weight import float_weight, input_dtype
from .oft import OFT_2, OFT_KEYS, OFT_WEIGHT

ADAPTER_NAME = "default"
LORA, LOHA, LOKR = "LORA", "LOHA", "LOKR"
PEFT_TYPES = (LORA, LOHA, LOKR, OFT_2)

LORA_KEYS = ("lora_A.weight", "lora_B.weight")
DORA_OUT = "lora_magnitude_vector"
DORA_IN = "dora_scale"
LOHA_KEYS = ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2")
LOKR_KEYS = ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2")
LOKR_MAGNITUDE = "lokr_magnitude"  # a DoRA-LoKr layer's ModuleDict of DecomposedMagnitude (lokr_switches.py)
# longest first, so `...lora_A.weight` is not mistaken for something shorter
PARAM_NAMES = tuple(sorted(LORA_KEYS + (DORA_OUT, DORA_IN) + LOHA_KEYS + LOKR_KEYS + OFT_KEYS, key=len, reverse=True))


@dataclass(frozen=True)
class AdapterSpec:
    """Which adapter `add_lora` builds: plain LoRA unless told otherwise."""

    peft_type: str = LORA
    decompose: bool = False  # DoRA (LoRA only)
    norm_epsilon: bool = True
    output_axis: bool = False
    decompose_both: bool = False  # LoKr
    decompose_factor: int = -1
    use_tucker: bool = False
    lokr_decompose: bool = False  # DoRA on LoKr (lokr_switches.py)
    lokr_dora_output: bool = True
    lokr_full_matrix: bool = False
    lokr_vec_trick: bool = False
    # a Base LoRA file's layers (lokr_layer_key) that hold w2 whole: built whole (lokr_switches.lokr_injection)
    lokr_whole_w2: frozenset[str] = frozenset()
    oft_block_size: int = 32  # OFT v2
    oft_block_share: bool = False
    oft_scaled: bool = False

    @classmethod
    def from_config(cls, config: Any) -> AdapterSpec:
        peft_type = str(getattr(config.peft_type, "value", config.peft_type))
        if peft_type not in PEFT_TYPES:
            raise ValueError(f"peft_type: {peft_type} is not supported; use LORA, LOHA, LOKR or OFT_2")
        if peft_type != LORA and config.lora_decompose:
            raise ValueError(f"lora_decompose: DoRA works with peft_type LORA only, not {peft_type}; turn it off")
        factor = int(config.lokr_decompose_factor)
        if peft_type == LOKR and factor != -1 and factor < 1:
            raise ValueError(f"lokr_decompose_factor: {factor} is not a factor; use -1 (automatic) or a positive number")
        if peft_type == OFT_2 and int(config.oft_block_size) < 1:
            raise ValueError(f"oft_block_size: {config.oft_block_size} is not a block size; use a positive number such as 32")
        return cls(
            peft_type=peft_type,
            decompose=bool(config.lora_decompose),
            norm_epsilon=bool(config.lora_decompose_norm_epsilon),
            output_axis=bool(config.lora_decompose_output_axis),
            decompose_both=bool(config.lokr_decompose_both),
            decompose_factor=factor,
            use_tucker=bool(config.lokr_use_tucker),
            lokr_decompose=peft_type == LOKR and bool(config.lokr_weight_decompose),
            lokr_dora_output=bool(config.lokr_dora_on_output),
            lokr_full_matrix=peft_type == LOKR and bool(config.lokr_full_matrix),
            lokr_vec_trick=peft_type == LOKR and bool(config.lokr_vec_trick),
            oft_block_size=int(config.oft_block_size),
            oft_block_share=bool(config.oft_block_share),
            oft_scaled=bool(config.oft_scaled),
        )

    def rank(self, config: Any) -> int:
        """LoKr's rank is `lokr_dim`; LoRA and LoHa use `lora_rank`; OFT has none (1: scale 1)."""
        if self.peft_type == OFT_2:
            return 1
        return int(config.lokr_dim if self.peft_type == LOKR else config.lora_rank)


def peft_config(spec: AdapterSpec, *, rank: int, alpha: float, dropout: float, targets: list[str]):
    """The peft config that builds `spec`'s layers on `targets`."""
    if spec.peft_type == LORA:
        from peft import LoraConfig

        return LoraConfig(
            r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, init_lora_weights=True,
            use_dora=spec.decompose,
        )
    if spec.peft_type == OFT_2:  # dropout: OFT's block dropout, set by install_variant
        return oft.peft_config(block_size=spec.oft_block_size, block_share=spec.oft_block_share, targets=targets)
    if dropout:
        raise ValueError(
            f"dropout_probability: {spec.peft_type} layers (peft's) have no input dropout; set it to 0 or use peft_type LORA"
        )
    if spec.peft_type == LOHA:
        from peft import LoHaConfig

        return LoHaConfig(r=rank, alpha=alpha, target_modules=targets, init_weights=True)  # init_loha_like_lycoris after
    from peft import LoKrConfig

    # "lycoris": w1 (or w1_a, w1_b) Kaiming, w2 (or w2_b) zero, as OneTrainer and LyCORIS start a
    # LoKr; peft's own default is the other way round (w1 zero), which trains differently at first
    return LoKrConfig(
        r=rank, alpha=alpha, target_modules=targets, init_weights="lycoris", decompose_both=spec.decompose_both,
        decompose_factor=spec.decompose_factor, use_effective_conv2d=spec.use_tucker,
    )


# -- DoRA -----------------------------------------------------------------------------------


def _axis_norm(weight: torch.Tensor, output_axis: bool) -> torch.Tensor:
    """Norm of each output row (output axis) or input column (input axis, over the kernel too)."""
    if output_axis:
        return weight.reshape(weight.shape[0], -1).norm(dim=1)
    return weight.transpose(0, 1).reshape(weight.shape[1], -1).norm(dim=1)


def magnitude_shape(weight_shape: torch.Size | tuple[int, ...], output_axis: bool) -> tuple[int, ...]:
    """peft's magnitude shape on the output axis; LyCORIS's `dora_scale` shape on the input axis."""
    ones = (1,) * (len(weight_shape) - 2)
    if output_axis:
        return (weight_shape[0],) if not ones else (1, weight_shape[0], *ones)
    return (1, weight_shape[1], *ones)


class DecomposedMagnitude(nn.Module):
    """The trained magnitude of one DoRA layer, started at the base weight's norms (so the layer
    is unchanged until training moves it)."""

    def __init__(self, base_weight: torch.Tensor, *, output_axis: bool, epsilon: bool, dtype: torch.dtype):
        super().__init__()
        self.output_axis, self.epsilon = output_axis, epsilon
        norm = _axis_norm(base_weight.detach().float(), output_axis)
        self.weight = nn.Parameter(norm.reshape(magnitude_shape(base_weight.shape, output_axis)).to(dtype))

    def factor(self, merged: torch.Tensor) -> torch.Tensor:
        """magnitude / ||W + scale·BA|| per row or column (1-D), with no gradient through the norm."""
        norm = _axis_norm(merged.detach(), self.output_axis)
        if self.epsilon:
            norm = norm + torch.finfo(norm.dtype).eps
        return self.weight.reshape(-1).to(norm.dtype) / norm


class DecomposedVariant:
    """peft LoraVariant for DecomposedMagnitude layers: y = (W + s·BA)·diag(c)·x + b on the input
    axis, y = diag(c)·(W + s·BA)·x + b on the output axis, c = magnitude / norm. With dropout the
    whole decomposed layer sees the dropped input, as in OneTrainer and the DoRA code."""

    @staticmethod
    def init(module: nn.Module, adapter_name: str, **kwargs: Any) -> None:
        raise NotImplementedError("installed by lora_variants.install_decomposition")

    @staticmethod
    def merge_safe(module: nn.Module, active_adapter: str, orig_weight: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("merging a decomposed (DoRA) layer is not supported")

    merge_unsafe = unmerge = merge_safe

    @staticmethod
    def supports_lora_conversion() -> bool:
        return False

    @staticmethod
    def forward(module: nn.Module, active_adapter: str, x: torch.Tensor, result: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        base = module.get_base_layer()
        lora_a, lora_b = module.lora_A[active_adapter], module.lora_B[active_adapter]
        dropout, scaling = module.lora_dropout[active_adapter], module.scaling[active_adapter]
        magnitude = module.lora_magnitude_vector[active_adapter]
        weight = float_weight(base)  # a quantized base's real weights (its codes are not)
        delta = (lora_b.weight.flatten(1) @ lora_a.weight.flatten(1)).reshape(weight.shape)
        factor = magnitude.factor(weight + scaling * delta.float()).to(x.dtype)
        view = (1, -1, *[1] * (weight.dim() - 2)) if weight.dim() > 2 else (-1,)
        factor = factor.reshape(view)
        reuse = isinstance(dropout, nn.Identity) or not module.training
        if not reuse:
            x = dropout(x)
        if magnitude.output_axis:
            bias = base.bias.reshape(view) if base.bias is not None else 0.0
            plain = (result if reuse else base(x.to(input_dtype(base, x)))) - bias
            return factor * (plain + lora_b(lora_a(x)) * scaling) + bias
        scaled = x * factor
        return base(scaled.to(input_dtype(base, scaled))) + lora_b(lora_a(scaled)) * scaling


def _magnitude_placeholder(self: nn.Module, **_: Any) -> None:
    self.weight = nn.Parameter(torch.empty(0), requires_grad=False)


def real_shape(base: nn.Module) -> tuple[int, ...] | None:
    """A Linear layer's weight shape (out, in) when its stored weight has another one (GGUF's rows
    of quantized blocks, NF4's packed bytes), else None: peft's LoHa / LoKr take the stored shape."""
    if not isinstance(base, nn.Linear):
        return None
    shape = (base.out_features, base.in_features)
    return shape if tuple(base.weight.shape) != shape else None


def _loha_factors_in_real_shape(original):
    def create(self: nn.Module, adapter_name: str, r: int, shape: tuple[int, ...]) -> None:
        original(self, adapter_name, r, real_shape(self.get_base_layer()) or shape)

    return create


@contextlib.contextmanager
def peft_injection():
    """While peft injects layers: its DoRA magnitude (the base weight's norms) is not computed, as
    install_decomposition puts ours in its place right after, from the real weights (peft's own
    reads a quantized layer's codes as the weight: float8 ones fail to multiply on the CPU, int8
    ones give norms in code units; and it would dequantize every layer once for nothing); and its
    LoHa factors are sized from the layer's real shape, not its stored one."""
    from peft.tuners.loha.layer import LoHaLayer
    from peft.tuners.lora import dora

    originals = dora.DoraLinearLayer.update_layer, LoHaLayer.create_adapter_parameters
    dora.DoraLinearLayer.update_layer = _magnitude_placeholder
    LoHaLayer.create_adapter_parameters = _loha_factors_in_real_shape(originals[1])
    try:
        yield
    finally:
        dora.DoraLinearLayer.update_layer, LoHaLayer.create_adapter_parameters = originals


def _delta_in_real_shape(self: nn.Module, adapter_name: str, *, apply_rank_dropout: bool = False) -> torch.Tensor:
    """A Linear LoHa / LoKr layer's delta (out, in), as peft's get_delta_weight computes it before
    reshaping it to the stored weight's shape. (No rank dropout: our configs leave it at 0.)"""
    if apply_rank_dropout:
        raise ValueError("rank dropout is not supported on a quantized layer")
    scale = self.scaling[adapter_name]
    if adapter_name in getattr(self, "hada_w1_a", {}):
        from peft.tuners.loha.layer import make_weight

        factors = (getattr(self, f"hada_{name}")[adapter_name] for name in ("w1_a", "w1_b", "w2_a", "w2_b"))
        return make_weight(*factors, scale=torch.tensor(scale))
    from peft.tuners.lokr.layer import make_kron

    def factor(i: int) -> torch.Tensor:
        whole = getattr(self, f"lokr_w{i}")
        if adapter_name in whole:
            return whole[adapter_name]
        return getattr(self, f"lokr_w{i}_a")[adapter_name] @ getattr(self, f"lokr_w{i}_b")[adapter_name]

    return make_kron(factor(1), factor(2), scale)


def install_real_shape_deltas(module: nn.Module) -> None:
    """LoHa / LoKr layers over a weight stored in another shape (GGUF, NF4) compute their delta in
    the layer's real shape; peft's reshape to the stored shape fails."""
    import types

    from peft.tuners.lycoris_utils import LycorisLayer

    for layer in module.modules():
        if isinstance(layer, LycorisLayer) and real_shape(layer.get_base_layer()):
            layer.get_delta_weight = types.MethodType(_delta_in_real_shape, layer)


def init_loha_like_lycoris(module: nn.Module) -> None:
    """Start every LoHa layer as LyCORIS and OneTrainer do: w1_a normal with std 0.1, w1_b and
    w2_b standard normal, w2_a zero (the delta is zero). peft starts them Kaiming-uniform, which
    makes the first factor's product (and so each step's change of the delta) about two orders
    of magnitude smaller: a OneTrainer LoHa config's learning rate would hardly move it."""
    from peft.tuners.loha.layer import LoHaLayer

    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, LoHaLayer) and ADAPTER_NAME in layer.hada_w1_a:
                layer.hada_w1_a[ADAPTER_NAME].normal_(std=0.1)
                layer.hada_w1_b[ADAPTER_NAME].normal_(std=1.0)
                layer.hada_w2_a[ADAPTER_NAME].zero_()
                layer.hada_w2_b[ADAPTER_NAME].normal_(std=1.0)


def install_decomposition(module: nn.Module, spec: AdapterSpec) -> None:
    """Replace peft's DoRA step (output axis, no epsilon) with ours on every DoRA layer."""
    from peft.tuners.lora import LoraLayer

    for layer in module.modules():
        if not isinstance(layer, LoraLayer) or ADAPTER_NAME not in layer.lora_magnitude_vector:
            continue
        base = layer.get_base_layer()
        if getattr(base, "groups", 1) != 1:
            raise ValueError("DoRA on grouped convolutions is not supported.")
        # float32 (add_lora casts the adapter to the train type): peft made the adapter in the base
        # weight's type, which for FLOAT_8 is float8, and norms rounded there change the model at step 0
        layer.lora_magnitude_vector[ADAPTER_NAME] = DecomposedMagnitude(
            float_weight(base), output_axis=spec.output_axis, epsilon=spec.norm_epsilon, dtype=torch.float32
        ).to(layer.lora_A[ADAPTER_NAME].weight.device)
        layer.lora_variant[ADAPTER_NAME] = DecomposedVariant


# -- layers of a module ---------------------------------------------------------------------


def is_adapter_layer(layer: nn.Module) -> bool:
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lycoris_utils import LycorisLayer

    if isinstance(layer, LoraLayer):
        return ADAPTER_NAME in layer.lora_A
    if oft.is_oft_layer(layer):
        return ADAPTER_NAME in layer.oft_R
    return isinstance(layer, LycorisLayer) and ADAPTER_NAME in layer._available_adapters


def adapter_parameters(layer: nn.Module) -> dict[str, nn.Parameter]:
    """The trained parameters of one adapter layer under their state names."""
    from peft.tuners.lora import LoraLayer

    if isinstance(layer, LoraLayer):
        out = {"lora_A.weight": layer.lora_A[ADAPTER_NAME].weight, "lora_B.weight": layer.lora_B[ADAPTER_NAME].weight}
        if ADAPTER_NAME in layer.lora_magnitude_vector:
            magnitude = layer.lora_magnitude_vector[ADAPTER_NAME]
            out[DORA_OUT if getattr(magnitude, "output_axis", True) else DORA_IN] = magnitude.weight
        return out
    if oft.is_oft_layer(layer):
        return {OFT_WEIGHT: layer.oft_R[ADAPTER_NAME].weight}
    out = {name: getattr(layer, name)[ADAPTER_NAME] for name in layer.adapter_layer_names if ADAPTER_NAME in getattr(layer, name)}
    magnitudes = getattr(layer, LOKR_MAGNITUDE, {})
    if ADAPTER_NAME in magnitudes:
        out[DORA_OUT if magnitudes[ADAPTER_NAME].output_axis else DORA_IN] = magnitudes[ADAPTER_NAME].weight
    return out


def layer_rank_alpha(layer: nn.Module) -> tuple[int, float]:
    from peft.tuners.lora import LoraLayer

    if oft.is_oft_layer(layer):
        return 1, 1.0  # OFT rotates: no rank, no alpha
    alpha = layer.lora_alpha if isinstance(layer, LoraLayer) else layer.alpha
    return int(layer.r[ADAPTER_NAME]), float(alpha[ADAPTER_NAME])
