"""A text encoder's `.gguf` file, as llama.cpp writes them and ComfyUI-GGUF loads them
(`t5-v1_1-xxl-encoder-Q8_0.gguf`, `umt5-xxl-encoder-Q5_K_M.gguf`, `Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf`,
`Qwen3-4B-Q8_0.gguf`, `Mistral-Small-3.2-24B-Instruct-2506-Q4_K_M.gguf` ...): its weights read back
to their values (diffusers' GGUF dequantization) under the names transformers' checkpoints use, so
the encoder loads as from a `.safetensors` file (models/text_encoder_file.py) and is then stored in
its Weight data type like any other.

llama.cpp renames the layers (`enc.blk.0.attn_q` for T5's `encoder.block.0.layer.0.SelfAttention.q`,
`blk.0.attn_q` for `model.layers.0.self_attn.q_proj`) and, for its `llama` architecture (Llama,
Mistral), reorders the rows of the query and key weights for its rotary embedding; both are undone
here, the head counts read from the file. Its Qwen2.5-VL files hold the language model alone; the
vision tower, which encoding a prompt without an image never reads but Qwen-Image-Edit's encoder
reads the control image with, is a separate `mmproj` file beside it. It is found as ComfyUI-GGUF
finds it (a `.gguf` in the same folder whose name has `mmproj` and the encoder's name without its
quantization suffix: `Qwen2.5-VL-7B-Instruct-mmproj-BF16.gguf` for `Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf`),
or, where no name matches, the folder's only mmproj file (ComfyUI-GGUF takes none then),
and its names, split query / key / value and split patch convolution put back as Qwen2.5-VL's
checkpoint has them (`mmproj_weights`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import torch

# llama.cpp's architecture -> the renames to transformers' names, in order (ComfyUI-GGUF's tables)
_T5 = (("dec.", "decoder."), ("enc.", "encoder."), (".blk.", ".block."), ("token_embd", "shared"), ("output_norm", "final_layer_norm"),
       ("attn_q", "layer.0.SelfAttention.q"), ("attn_k", "layer.0.SelfAttention.k"), ("attn_v", "layer.0.SelfAttention.v"),
       ("attn_o", "layer.0.SelfAttention.o"), ("attn_norm", "layer.0.layer_norm"),
       ("attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"), ("ffn_up", "layer.1.DenseReluDense.wi_1"),
       ("ffn_down", "layer.1.DenseReluDense.wo"), ("ffn_gate", "layer.1.DenseReluDense.wi_0"), ("ffn_norm", "layer.1.layer_norm"))
_DECODER = (("blk.", "model.layers."), ("attn_norm", "input_layernorm"), ("attn_q_norm.", "self_attn.q_norm."),
            ("attn_k_norm.", "self_attn.k_norm."), ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"), ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_norm", "post_attention_layernorm"),
            ("token_embd", "model.embed_tokens"), ("output_norm", "model.norm"), ("output.weight", "lm_head.weight"))
RENAMES = {"t5": _T5, "t5encoder": _T5, "llama": _DECODER, "mistral3": _DECODER, "qwen2": _DECODER, "qwen2vl": _DECODER,
           "qwen3": _DECODER}
# the architectures whose query / key rows llama.cpp permutes on conversion (its Mistral-Small-3 files
# say `llama`, those converted since March 2026 `mistral3`)
_PERMUTED = ("llama", "mistral3")
# what such a file holds that no encoder reads: a whole T5's output layer (its decoder: `dec.`, left
# out by the caller), Llama 3.1's rope frequencies
_UNREAD = ("output.weight", "rope_freqs.weight")


class GGUFTextEncoderError(ValueError):
    """A .gguf file that is no text encoder read here (its architecture, or a quantization type
    diffusers does not dequantize)."""


def _field(reader, name: str):
    field = reader.get_field(name)
    return None if field is None else field.contents()


def architecture(reader) -> str:
    arch = _field(reader, "general.architecture")
    if arch not in RENAMES:
        known = ", ".join(sorted(RENAMES))
        raise GGUFTextEncoderError(f"its architecture is {arch or 'not named'}; the .gguf text encoders read here are {known}")
    return arch


def _rename(key: str, renames) -> str:
    for old, new in renames:
        key = key.replace(old, new)
    return key


def _unpermute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """The rows of a query or key weight (or bias) in the model's order again: llama.cpp interleaves
    each head's two rotary halves."""
    shape = weight.shape
    return weight.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def _value(tensor) -> torch.Tensor:
    """One tensor of the file read back to its values (float32 unless stored as float16)."""
    import gguf
    from diffusers.quantizers.gguf.utils import SUPPORTED_GGUF_QUANT_TYPES, GGUFParameter, dequantize_gguf_tensor

    kind = tensor.tensor_type
    if kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        return torch.from_numpy(tensor.data.copy())
    if kind in SUPPORTED_GGUF_QUANT_TYPES:  # diffusers' torch code (fast)
        return dequantize_gguf_tensor(GGUFParameter(torch.from_numpy(tensor.data.copy()), quant_type=kind))
    try:  # the other llama.cpp types (IQ2 / IQ3 ...): gguf's own numpy code (slower)
        return torch.from_numpy(gguf.quants.dequantize(tensor.data, kind).copy())
    except (NotImplementedError, ValueError, KeyError) as e:
        raise GGUFTextEncoderError(f"{tensor.name} is quantized as {kind.name}, which is not dequantized here") from e


def gguf_weights(path: Path, dtype: torch.dtype, keep: set[str] = frozenset(), skip=lambda key: False) -> Iterator[tuple[str, torch.Tensor]]:
    """(transformers' name, value) for each tensor of the file, floats in `dtype` (in float32 those
    of a module named in `keep`), one tensor in memory at a time."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = architecture(reader)
    renames = RENAMES[arch]
    heads = {}
    if arch in _PERMUTED:
        heads["q_proj"] = int(_field(reader, f"{arch}.attention.head_count"))
        heads["k_proj"] = int(_field(reader, f"{arch}.attention.head_count_kv") or heads["q_proj"])
    for tensor in reader.tensors:
        key = _rename(tensor.name, renames)
        if skip(key) or (tensor.name in _UNREAD and (renames is _T5 or tensor.name == "rope_freqs.weight")):
            continue
        value = _value(tensor)
        proj = key.rsplit(".", 2)[-2] if key.count(".") >= 2 else ""
        if proj in heads:
            value = _unpermute(value, heads[proj])
        yield key, value.to(torch.float32 if keep & set(key.split(".")) else dtype)


# an mmproj file's names -> Qwen2.5-VL's checkpoint's (`visual.`), in order (ComfyUI-GGUF's table)
_MMPROJ = (("mm.", "visual.merger.mlp."), ("v.post_ln.", "visual.merger.ln_q."), ("v.patch_embd", "visual.patch_embed.proj"),
           ("v.blk.", "visual.blocks."), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj"), ("ffn_gate", "mlp.gate_proj"),
           ("attn_out.", "attn.proj."), ("ln1.", "norm1."), ("ln2.", "norm2."))
_QWEN_PROJECTORS = ("qwen2.5vl_merger", "qwen2vl_merger")
QUANT_SUFFIX = re.compile(r"[-_]?(?:ud-)?i?q[0-9]_[a-z0-9_\-]{1,8}$", re.IGNORECASE)


def mmproj_beside(path: Path) -> Path | None:
    """The vision tower's mmproj `.gguf` for the language model's `path`: in the same folder, its name
    with `mmproj` and `path`'s name less the quantization suffix (ComfyUI-GGUF's rule); else the
    folder's only mmproj file; None when there is none."""
    found = sorted(p for p in path.parent.iterdir() if p.suffix.lower() == ".gguf" and "mmproj" in p.stem.lower() and p != path)
    stem = QUANT_SUFFIX.sub("", path.stem.lower())
    named = [p for p in found if stem in p.stem.lower()]
    return named[0] if named else (found[0] if len(found) == 1 else None)


def mmproj_weights(path: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A Qwen2.5-VL mmproj file's vision tower (projector `qwen2.5vl_merger`, or `qwen2vl_merger` as
    older conversions of Qwen2.5-VL say) under its checkpoint's names: llama.cpp
    splits each block's fused query / key / value projection in three and the patch embedding's
    3-D convolution into its two frames (`v.patch_embd.weight`, `.weight.1`); both are put back."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    projector = _field(reader, "clip.projector_type")
    if _field(reader, "general.architecture") != "clip" or projector not in _QWEN_PROJECTORS:
        raise GGUFTextEncoderError(f"{path.name} is not the vision tower of a Qwen2.5-VL (its projector is {projector or 'not named'})")
    weights = {_rename(t.name, _MMPROJ): _value(t).to(torch.float32) for t in reader.tensors}
    frames = weights.pop("visual.patch_embed.proj.weight.1", None)
    if frames is not None:
        weights["visual.patch_embed.proj.weight"] = torch.stack([weights["visual.patch_embed.proj.weight"], frames], dim=2)
    for key in [k for k in weights if ".attn_q." in k]:
        fused, leaf = key.split(".attn_q.")
        parts = [weights.pop(f"{fused}.attn_{x}.{leaf}") for x in "qkv"]
        weights[f"{fused}.attn.qkv.{leaf}"] = torch.cat(parts, dim=0)
    return {k: v.to(dtype) for k, v in weights.items()}
