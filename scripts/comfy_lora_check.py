"""Our LoRA files through ComfyUI's own code: its key mapping (comfy.lora.model_lora_keys_unet /
load_lora) and patching (ModelPatcher.patch_model, i.e. calculate_weight) on the tiny models,
compared with our `convert merge` of the same file. Denoiser only (ComfyUI's text-encoder models
are not built here). ComfyUI is not a dependency: give its source folder (e.g. `git archive` of
its repository) and a folder holding `einops`, which it needs and we do not install
(`pip install --target DIR einops`); torchvision and the other packages it imports for models not
checked here are stood in for at import time only.

    python scripts/comfy_lora_check.py --comfy /tmp/comfyui-src --extra /tmp/comfy-extra \
        FLUX_DEV_1=tiny:flux QWEN=tiny:qwen-image@KOHYA_LORA

Prints per family and format: tensors ComfyUI loaded of the file's, weights changed by each, and
the largest difference between ComfyUI's patched weights and our merge (0 = the same strength).
ComfyUI's detection gives some families full-size widths; `tiny_widths` puts the tiny ones back.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import logging
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import torch

STOOD_IN = ("torchvision", "torchaudio", "av", "spandrel", "kornia")


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import-only modules for packages ComfyUI imports but the LoRA path never calls."""

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in STOOD_IN else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: mock.MagicMock(name=f"{spec.name}.{attr}")
        return module

    def exec_module(self, module):
        pass


def tiny_widths(model_type: str, cfg: dict) -> dict:
    if model_type in ("FLUX_DEV_1", "CHROMA_1"):
        hidden = cfg["num_attention_heads"] * cfg["attention_head_dim"]
        out = {"hidden_size": hidden, "num_heads": cfg["num_attention_heads"], "context_in_dim": cfg["joint_attention_dim"],
               "axes_dim": list(cfg["axes_dims_rope"])}
        if model_type == "CHROMA_1":
            out.update(out_dim=hidden, hidden_dim=cfg["approximator_hidden_dim"], n_layers=cfg["approximator_layers"],
                       in_dim=cfg["approximator_num_channels"])
        return out
    if model_type.startswith("PIXART"):
        return {"num_heads": cfg["num_attention_heads"], "hidden_size": cfg["num_attention_heads"] * cfg["attention_head_dim"],
                "caption_channels": cfg["caption_channels"], "learn_sigma": cfg["out_channels"] == 2 * cfg["in_channels"]}
    if model_type == "QWEN":
        return {k: cfg[k] for k in ("attention_head_dim", "num_attention_heads", "joint_attention_dim", "axes_dims_rope", "out_channels")}
    return {}


def our_files(model_type: str, tiny: str, fmt: str, folder: Path) -> tuple[Path, Path, Path, dict]:
    """A rank-4 alpha-1 LoRA on every denoiser layer, the base single file and our merge of it."""
    from ot_gradio.config.enums import ModelFormat
    from ot_gradio.config.io import load_config
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny
    from ot_gradio.tools.jobs import run_inline
    from ot_gradio.training.methods import get_method

    base = resolve_tiny(tiny).diffusers_dir
    off = {"train": False}
    cfg = load_config({"model_type": model_type, "training_method": "LORA", "base_model_name": str(base), "lora_rank": 4,
                       "lora_alpha": 1, "layer_filter_preset": "full", "text_encoder": off, "text_encoder_2": off,
                       "text_encoder_3": off}).config
    family = get_family(model_type)
    model, method = family.load(str(base)), get_method(cfg.training_method)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (p for g in method.setup(model, cfg, torch.device("cpu")) for p in g.params):
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    lora = method.save(model, cfg.model_copy(update={"output_model_format": ModelFormat(fmt)}), folder / f"{fmt}.safetensors", {})
    single = family.load(str(base)).save_single_file(folder / "base.safetensors", torch.float32)
    merged = run_inline("convert", {"operation": "merge", "model_type": model_type, "base": str(base), "lora": str(lora),
                                    "output": str(folder / "merged.safetensors"), "format": "single", "dtype": "float32"})
    denoiser_config = json.loads((Path(base) / "transformer" / "config.json").read_text()) if (Path(base) / "transformer").is_dir() else {}
    return Path(lora), Path(single), Path(merged["output"]), denoiser_config


def comfy_patched(single: Path, lora: Path, widths: dict) -> tuple[dict, int, list[str], str]:
    import comfy.lora
    import comfy.lora_convert
    import comfy.model_detection
    import comfy.sd
    import comfy.utils

    detect = getattr(comfy.model_detection, "_ours_original", comfy.model_detection.detect_unet_config)
    comfy.model_detection._ours_original = detect
    comfy.model_detection.detect_unet_config = lambda *a, **k: {**(detect(*a, **k) or {}), **widths}
    patcher = comfy.sd.load_diffusion_model_state_dict(comfy.utils.load_torch_file(str(single)), {"dtype": torch.float32})
    lora_sd = comfy.utils.load_torch_file(str(lora))
    missed: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: missed.append(r.getMessage()) if "not loaded" in r.getMessage() else None
    logging.getLogger().addHandler(handler)
    try:
        patches = comfy.lora.load_lora(comfy.lora_convert.convert_lora(lora_sd), comfy.lora.model_lora_keys_unet(patcher.model, {}))
    finally:
        logging.getLogger().removeHandler(handler)
    patcher.add_patches(patches, 1.0)
    patcher.patch_model()
    weights = {k: v.detach().float().clone() for k, v in patcher.model.diffusion_model.state_dict().items()}
    return weights, len(lora_sd), missed, type(patcher.model).__name__


def compare(model_type: str, fmt: str, files: tuple[Path, Path, Path, dict]) -> str:
    from safetensors.torch import load_file

    lora, single, merged, cfg = files
    patched, total, missed, comfy_model = comfy_patched(single, lora, tiny_widths(model_type, cfg))
    ours, base = load_file(str(merged)), load_file(str(single))
    prefix = next((p for p in ("model.diffusion_model.", "") if any(k.startswith(p) and k[len(p):] in patched for k in ours)), "")
    ours = {k[len(prefix):]: v.float() for k, v in ours.items() if k.startswith(prefix) and k[len(prefix):] in patched}
    base = {k[len(prefix):]: v.float() for k, v in base.items() if k.startswith(prefix) and k[len(prefix):] in patched}
    by_us = {k for k in ours if not torch.equal(ours[k], base[k])}
    by_comfy = {k for k in ours if not torch.equal(patched[k], base[k])}
    worst = max((float((patched[k] - ours[k]).abs().max()) for k in ours), default=float("nan"))
    on_loaded = max((float((patched[k] - ours[k]).abs().max()) for k in by_comfy), default=float("nan"))
    change = max((float((ours[k] - base[k]).abs().max()) for k in by_us), default=0.0)
    lines = [f"{model_type} {fmt} (ComfyUI {comfy_model}): {total - len(missed)}/{total} tensors loaded; weights changed: "
             f"ours {len(by_us)}, ComfyUI {len(by_comfy)}; max |ComfyUI - ours| {worst:.3g}, on the weights ComfyUI "
             f"patched {on_loaded:.3g} (largest change {change:.3g})"]
    return "\n".join(lines + [f"    {m}" for m in missed[:6]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfy", required=True, help="ComfyUI's source folder")
    parser.add_argument("--extra", default="", help="a folder with einops (pip install --target)")
    parser.add_argument("families", nargs="+", help="MODEL_TYPE=tiny:name[@FORMAT], FORMAT DIFFUSERS_LORA by default")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for spec in args.families:
            model_type, rest = spec.split("=", 1)
            tiny, _, fmt = rest.partition("@")
            folder = Path(tmp) / f"{model_type}-{fmt or 'DIFFUSERS_LORA'}"
            folder.mkdir()
            files.append((model_type, fmt or "DIFFUSERS_LORA", our_files(model_type, tiny, fmt or "DIFFUSERS_LORA", folder)))
        sys.meta_path.insert(0, _StandIn())
        sys.path[:0] = [p for p in (args.extra, args.comfy) if p]
        sys.argv = [sys.argv[0], "--cpu"]
        import comfy.options

        comfy.options.enable_args_parsing()
        for model_type, fmt, paths in files:
            print(compare(model_type, fmt, paths), flush=True)


if __name__ == "__main__":
    main()
