"""Load our OFT v2 files with ComfyUI's own code and compare with our `convert merge`.

    python scripts/check_comfyui_oft.py --comfyui /path/to/ComfyUI --node /path/to/ComfyUI-OFTv2

ComfyUI reads OFT as LyCORIS's `oft_blocks` (output rows rotated by an exact Cayley transform),
which cannot express OFT v2; OneTrainer's OFT v2 files (`oft_R.weight`, `oft_R.scaled_oft`) load
through the ComfyUI-OFTv2 custom node (github.com/Koratahiu/ComfyUI-OFTv2), which registers its
adapter in `comfy.weight_adapter.adapters`. Neither is part of this repository: both are imported
from the given folders. For a tiny SD 1.5 with random OFT v2 layers on every UNet and text encoder
layer (blocks of 8, and Scaled OFT with one shared block of 4), each in both file layouts, this
prints how many layers ComfyUI patches on its own and with the node registered, and the largest
difference between its patched weights (`comfy.lora.load_lora` + `calculate_weight`, as its
ModelPatcher does) and our merge.

ComfyUI needs `einops`; torchvision is replaced by a stand-in when missing (nothing here runs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import tempfile
import types
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.check_comfyui_lora import import_comfyui  # noqa: E402


def _node_adapter(node: Path):
    spec = importlib.util.spec_from_file_location("comfyui_oftv2_loader", node / "node" / "oftv2_loader.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OFTv2Adapter


def _weights(pipe, diffusers_names: bool) -> dict[str, torch.Tensor]:
    """Each linear/conv weight under the layer name the file uses."""
    out = {}
    for part, module in (("unet", pipe.unet), ("text_encoder", pipe.text_encoder)):
        kohya = "lora_unet_" if part == "unet" else "lora_te_text_model_"
        text = "text_model." if part == "text_encoder" and not hasattr(module, "text_model") else ""
        for name, sub in module.named_modules():
            if isinstance(sub, (nn.Linear, nn.Conv2d)):
                key = f"{part}.{text}{name}" if diffusers_names else kohya + name.replace(".", "_")
                out[key] = sub.weight.detach().clone()
    return out


def _check(label: str, spec, lora_format: str, adapter, folder: Path) -> None:
    import comfy.lora
    import comfy.weight_adapter
    from safetensors.torch import load_file

    from ot_gradio.models.tiny.sd15 import tiny_sd15_pipeline
    from ot_gradio.tools.convert import merge_into
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_format import load_lora_file, save_lora

    pipe = tiny_sd15_pipeline(0)
    gen = torch.Generator().manual_seed(3)
    for module, kind in ((pipe.unet, "unet"), (pipe.text_encoder, "text_encoder")):
        for p in add_lora(module, kind=kind, rank=1, alpha=1.0, dropout=0.0, layer_preset="full", spec=spec):
            p.data = torch.randn(p.shape, generator=gen) * 0.1
    path = save_lora(folder / f"{label}-{lora_format}.safetensors", unet=pipe.unet, text_encoder=pipe.text_encoder,
                     lora_format=lora_format)
    lora = load_file(str(path))
    layers = sorted({k.rsplit(".", 2)[0] for k in lora})
    key_map = {name: name for name in layers}
    base = _weights(tiny_sd15_pipeline(0), lora_format == "diffusers")

    native = comfy.lora.load_lora(lora, key_map)
    comfy.weight_adapter.adapters.append(adapter)
    try:
        patches = comfy.lora.load_lora(lora, key_map)
    finally:
        comfy.weight_adapter.adapters.remove(adapter)

    loaded = load_lora_file(path)
    ours = tiny_sd15_pipeline(0)
    merge_into(types.SimpleNamespace(parts={"unet": ours.unet, "text_encoder": ours.text_encoder}), loaded.parts,
               loaded.rank, loaded.alpha, 1.0)
    merged = _weights(ours, lora_format == "diffusers")
    worst = change = 0.0
    for key, patch in patches.items():
        patched = comfy.lora.calculate_weight([(1.0, patch, 1.0, None, None)], base[key].clone(), key)
        worst = max(worst, (patched - merged[key]).abs().max().item())
        change = max(change, (patched - base[key]).abs().max().item())
    print(f"{label} ({lora_format}): {len(layers)} layers in the file; ComfyUI alone patches {len(native)}; "
          f"with ComfyUI-OFTv2 {len(patches)}, max |ComfyUI - ours| = {worst:.3g} (largest change from the base {change:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", type=Path, required=True, help="a ComfyUI source folder")
    parser.add_argument("--node", type=Path, required=True, help="a ComfyUI-OFTv2 source folder")
    args = parser.parse_args()
    import_comfyui(args.comfyui)
    logging.getLogger().setLevel(logging.ERROR)  # ComfyUI names every key it does not load
    from ot_gradio.training.lora_variants import AdapterSpec

    adapter = _node_adapter(args.node)
    specs = {
        "blocks of 8": AdapterSpec(peft_type="OFT_2", oft_block_size=8),
        "Scaled OFT, one shared block of 4": AdapterSpec(peft_type="OFT_2", oft_block_size=4, oft_block_share=True, oft_scaled=True),
    }
    with tempfile.TemporaryDirectory() as folder:
        for label, spec in specs.items():
            for lora_format in ("kohya", "diffusers"):
                _check(label, spec, lora_format, adapter, Path(folder))


if __name__ == "__main__":
    main()
