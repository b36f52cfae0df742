"""What A1111, Forge, ComfyUI and LyCORIS do with a kohya/LyCORIS LoRA file, written by us from
their documented formulas, so tests can check our files without those programs:

- LoRA: W + up @ down * alpha / rank
- DoRA: (W + delta) * dora_scale / (||W + delta|| + eps), the norm per input column when
  dora_scale is (1, in, ...) (A1111's only form, ComfyUI, LyCORIS) and per output row when it is
  (out, 1, ...) (LyCORIS; ComfyUI takes that norm of W alone, so it differs there)
- LoHa: W + (w1a @ w1b) * (w2a @ w2b) * alpha / rank (Tucker: t1/t2 rebuilt with w*a, w*b)
- LoKr: W + kron(w1, w2) * alpha / rank, each factor whole or a @ b (w2 Tucker-rebuilt), scale 1
  when both factors are whole matrices; with a dora_scale, DoRA's step as above on that sum

and what ComfyUI does with a diffusers/PEFT-named file (`<part>.<module path>.lora_A.weight` /
`lora_B.weight`, `hada_*`, `lokr_*`): the same formulas, with alpha only from a `<layer>.alpha`
tensor beside the weights; without one the scale is 1 (comfy/weight_adapter: "alpha = 1.0"), and
the adapter metadata in the header is not read. `scripts/check_comfyui_lora.py` checks this against
ComfyUI's own code.
"""

import torch
from torch import nn


def _kohya_targets(pipe):
    """kohya layer name -> module, the way ComfyUI maps a model's weights to LoRA keys."""
    out = {}
    te_prefix = "lora_te_" + ("" if hasattr(pipe.text_encoder, "text_model") else "text_model_")
    for prefix, model in (("lora_unet_", pipe.unet), (te_prefix, pipe.text_encoder)):
        for name, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                out[prefix + name.replace(".", "_")] = module
    return out


def _cp(t, wa, wb):
    """Tucker rebuild: t (r, r, k, k) with wa (r, out), wb (r, in) -> (out, in, k, k)."""
    return torch.einsum("i j k l, j r, i p -> p r k l", t, wb, wa)


def _reference_weight(weight, e):
    """The merged weight A1111 / ComfyUI / LyCORIS build from one layer's kohya entries."""
    w = weight.float()
    alpha = float(e["alpha"]) if "alpha" in e else None
    if "lora_down.weight" in e:
        down, up = e["lora_down.weight"].float(), e["lora_up.weight"].float()
        diff = (up.flatten(1) @ down.flatten(1)).reshape(w.shape) * (alpha / down.shape[0])
        return _decomposed(w + diff, e)
    if "hada_w1_a" in e:
        f = {k: v.float() for k, v in e.items()}
        if "hada_t1" in e:
            m1, m2 = _cp(f["hada_t1"], f["hada_w1_a"], f["hada_w1_b"]), _cp(f["hada_t2"], f["hada_w2_a"], f["hada_w2_b"])
        else:
            m1, m2 = f["hada_w1_a"] @ f["hada_w1_b"], f["hada_w2_a"] @ f["hada_w2_b"]
        return w + (m1 * m2).reshape(w.shape) * (alpha / f["hada_w1_b"].shape[0])
    f = {k: v.float() for k, v in e.items()}
    dim = None
    if "lokr_w1" in f:
        w1 = f["lokr_w1"]
    else:
        w1, dim = f["lokr_w1_a"] @ f["lokr_w1_b"], f["lokr_w1_b"].shape[0]
    if "lokr_w2" in f:
        w2 = f["lokr_w2"]
    else:
        dim = f["lokr_w2_b"].shape[0]
        w2 = _cp(f["lokr_t2"], f["lokr_w2_a"], f["lokr_w2_b"]) if "lokr_t2" in f else f["lokr_w2_a"] @ f["lokr_w2_b"]
    scale = alpha / dim if dim is not None else 1.0
    if w2.dim() == 4:
        w1 = w1[:, :, None, None]
    return _decomposed(w + torch.kron(w1, w2.contiguous()).reshape(w.shape) * scale, e)


def _decomposed(merged, e):
    """DoRA (LoRA or LoKr, LyCORIS's formula) when the layer has a dora_scale; else `merged` as it is."""
    if "dora_scale" not in e:
        return merged
    scale, shape = e["dora_scale"].float(), merged.shape
    if scale.shape[0] == shape[0]:  # LyCORIS output axis: norm of each merged output row
        norm = merged.reshape(shape[0], -1).norm(dim=1).reshape(-1, *[1] * (merged.dim() - 1))
    else:  # input axis (A1111's only one): norm of each merged input column
        norm = merged.transpose(0, 1).reshape(shape[1], -1).norm(dim=1).reshape(1, -1, *[1] * (merged.dim() - 2))
    return merged * scale / (norm + torch.finfo(torch.float32).eps)


def merge_kohya_reference(pipe, tensors) -> int:
    """Merge a kohya file's layers into a plain pipeline's weights; returns how many."""
    targets = _kohya_targets(pipe)
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name, _, entry = key.partition(".")
        layers.setdefault(name, {})[entry] = value
    assert set(layers) <= set(targets), sorted(set(layers) - set(targets))[:3]
    with torch.no_grad():
        for name, entries in layers.items():
            module = targets[name]
            module.weight.copy_(_reference_weight(module.weight, entries).to(module.weight.dtype))
    return len(layers)


_PEFT_TO_KOHYA = {"lora_A.weight": "lora_down.weight", "lora_B.weight": "lora_up.weight"}


def _diffusers_targets(pipe, part):
    model = getattr(pipe, part)
    wrapped = not hasattr(model, "text_model") and part.startswith("text_encoder")
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            out[name] = module
            if wrapped:
                out["text_model." + name] = module
    return out


def merge_comfy_diffusers_reference(pipe, tensors) -> int:
    """Merge a diffusers/PEFT-named file into a plain pipeline's weights the way ComfyUI applies
    it (scale alpha / rank with a `.alpha` tensor, else 1); returns how many layers."""
    layers: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        part, _, rest = key.partition(".")
        for entry in ("lora_A.weight", "lora_B.weight", "alpha", "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b",
                      "hada_t1", "hada_t2", "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2"):
            if rest.endswith("." + entry):
                layers.setdefault((part, rest.removesuffix("." + entry)), {})[_PEFT_TO_KOHYA.get(entry, entry)] = value
                break
        else:
            raise AssertionError(f"ComfyUI loads no adapter from {key}")
    with torch.no_grad():
        for (part, path), entries in layers.items():
            module = _diffusers_targets(pipe, part)[path]
            if "alpha" not in entries:  # scale 1: alpha equal to the layer's rank
                rank = next((entries[k].shape[0] for k in ("lora_down.weight", "hada_w1_b", "lokr_w1_b", "lokr_w2_b") if k in entries), None)
                if rank is not None:
                    entries = {**entries, "alpha": torch.tensor(float(rank))}
            module.weight.copy_(_reference_weight(module.weight, entries).to(module.weight.dtype))
    return len(layers)
