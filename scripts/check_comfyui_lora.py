"""Load our KOHYA_LORA / DIFFUSERS_LORA files with ComfyUI's own code and compare with our merge.

    python scripts/check_comfyui_lora.py --comfyui /path/to/ComfyUI [--family flux ...] [--format kohya ...]
        [--layer-preset attn-only] [--adapter lokr-dora-in ...]

ComfyUI's source is imported from the given folder (never part of this repository). For each
family a tiny model is built, every layer (`full`, or the layers `--layer-preset` takes; text
encoders where the family trains them) gets a random LoRA, and the file is written as training writes it. ComfyUI then loads the
transformer file we write (ORIGINAL_TRANSFORMER; SD 1.5 / SDXL: the checkpoint's UNet, its config
detected by ComfyUI's model_detection), maps the
LoRA with `comfy.lora.model_lora_keys_unet` (over its model class holding our tiny denoiser's
original-layout weights) and `model_lora_keys_clip` (its text encoders built at full size on the
meta device), patches with `load_lora` and `calculate_weight` as its ModelPatcher does, and the
patched transformer weights are compared with our own `convert merge` of the same file. Printed per
family and format: layers in the file, layers ComfyUI skipped (named), transformer weights ComfyUI
patched / we merged, max |ComfyUI - ours| (inf: a weight we merged that ComfyUI left alone).
HunyuanVideo, which has no original single file here, is compared with its DIFFUSERS_LORA file's
deltas instead (`check_hunyuan_video`).

ComfyUI needs `einops`; ComfyUI's model modules import torchvision at import time, so a
stand-in module is installed when torchvision is missing (nothing here runs it).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import tempfile
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# family -> (module, class, tiny components builder (module, function, args), ComfyUI text encoder (module, class))
FAMILIES = {
    "flux": ("ot_gradio.models.flux", "FluxDev1", ("ot_gradio.models.tiny.flux", "tiny_flux_components", ()),
             ("comfy.text_encoders.flux", "FluxClipModel")),
    "chroma": ("ot_gradio.models.chroma", "Chroma1", ("ot_gradio.models.tiny.chroma", "tiny_chroma_components", ()),
               ("comfy.text_encoders.pixart_t5", "PixArtT5XXL")),
    "flux2-dev": ("ot_gradio.models.flux2", "Flux2", ("ot_gradio.models.tiny.flux2", "tiny_flux2_components", ("dev",)), None),
    "flux2-klein": ("ot_gradio.models.flux2", "Flux2", ("ot_gradio.models.tiny.flux2", "tiny_flux2_components", ("klein",)), None),
    "z-image": ("ot_gradio.models.z_image", "ZImage", ("ot_gradio.models.tiny.z_image", "tiny_z_image_components", ()),
                ("comfy.text_encoders.z_image", "ZImageTEModel")),
    "qwen-image": ("ot_gradio.models.qwen_image", "QwenImage",
                   ("ot_gradio.models.tiny.qwen_image", "tiny_qwen_image_components", ()),
                   ("comfy.text_encoders.qwen_image", "QwenImageTEModel")),
    "pixart-sigma": ("ot_gradio.models.pixart_sigma", "PixArtSigma",
                     ("ot_gradio.models.tiny.pixart_sigma", "tiny_pixart_sigma_components", ()),
                     ("comfy.text_encoders.pixart_t5", "PixArtT5XXL")),
    "pixart-alpha": ("ot_gradio.models.pixart", "PixArtAlpha", ("ot_gradio.models.tiny.pixart", "tiny_pixart_components", ()),
                     ("comfy.text_encoders.pixart_t5", "PixArtT5XXL")),
    "wan": ("ot_gradio.models.wan", "Wan21", ("ot_gradio.models.tiny.wan", "tiny_wan_components", ()),
            ("comfy.text_encoders.wan", "WanT5Model")),
    # Wan 2.2 I2V A14B's trained (high-noise) expert: 36 channels in, no image embedding
    "wan22-i2v": ("ot_gradio.models.wan_i2v", "Wan22I2VA14B", ("ot_gradio.models.tiny.wan", "tiny_wan_i2v_components", ()),
                  ("comfy.text_encoders.wan", "WanT5Model")),
    # Wan 2.1 I2V: the image keys and values of each block and the image projection beside the t2v names
    "wan21-i2v": ("ot_gradio.models.wan21_i2v", "Wan21I2V", ("ot_gradio.models.tiny.wan", "tiny_wan21_i2v_components", ()),
                  ("comfy.text_encoders.wan", "WanT5Model")),
    # the UNet families: kohya's names of diffusers' UNet paths, mapped through ComfyUI's unet_to_diffusers
    "sd15": ("ot_gradio.models.sd15", "StableDiffusion15", ("ot_gradio.models.tiny.sd15", "tiny_sd15_components", ()),
             ("comfy.sd1_clip", "SD1ClipModel")),
    "sdxl": ("ot_gradio.models.sdxl", "StableDiffusionXL", ("ot_gradio.models.tiny.sdxl", "tiny_sdxl_components", ()),
             ("comfy.sdxl_clip", "SDXLClipModel")),
    "sd3": ("ot_gradio.models.sd3", "StableDiffusion3", ("ot_gradio.models.tiny.sd3", "tiny_sd3_components", ()),
            ("comfy.text_encoders.sd3_clip", "SD3ClipModel")),
    # its transformer only: OneTrainer trains no Anima text encoder, and a kohya one is refused
    "anima": ("ot_gradio.models.anima", "Anima", ("ot_gradio.models.tiny.anima", "tiny_anima_components", ()), None),
}


def import_comfyui(path: Path) -> None:
    """ComfyUI's package from the source folder `path`, importable here (a torchvision stand-in
    where it is not installed, its CPU mode on)."""
    import tests.comfy_reference  # noqa: F401  (first: ComfyUI's own `tests` package would hide ours)

    sys.path.insert(0, str(path))
    import diffusers  # noqa: F401  (they decide on torchvision before the stand-in exists)
    import transformers  # noqa: F401

    try:
        import torchvision  # noqa: F401
    except ImportError:
        stub = types.ModuleType("torchvision")
        stub.transforms = types.ModuleType("torchvision.transforms")
        stub.transforms.InterpolationMode = types.SimpleNamespace(BICUBIC=3, BILINEAR=2, NEAREST=0)
        sys.modules.update({"torchvision": stub, "torchvision.transforms": stub.transforms})
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.options

    comfy.options.enable_args_parsing()


def _build(name: str):
    module, cls, (tiny_module, tiny_fn, args), _ = FAMILIES[name]
    components = getattr(importlib.import_module(tiny_module), tiny_fn)(*args)
    family = getattr(importlib.import_module(module), cls)
    if name == "sd3":  # ComfyUI's SD 3 map takes the width as 64 x depth, depth the block count: 2 blocks 128 wide
        from diffusers import SD3Transformer2DModel

        tiny = components["transformer"].config
        assert tiny.num_layers == 2 and tiny.num_attention_heads == 2
        components["transformer"] = SD3Transformer2DModel(**{**tiny, "attention_head_dim": 64, "caption_projection_dim": 128})
    return family(**components) if name.startswith(("pixart", "sd1", "sdxl")) else family(components)


# --adapter: what every layer gets (OneTrainer's LoKr switches: DoRA on LoKr on either axis, a whole w2)
ADAPTERS = {
    "lora": {},
    "lokr": {"peft_type": "LOKR"},
    "lokr-dora-in": {"peft_type": "LOKR", "lokr_decompose": True, "lokr_dora_output": False},
    "lokr-dora-out": {"peft_type": "LOKR", "lokr_decompose": True},
    "lokr-full": {"peft_type": "LOKR", "lokr_full_matrix": True},
    "loha": {"peft_type": "LOHA"},
}


def _train_full(model, seed: int = 0, preset: str = "full", text_encoders: bool = True, adapter: str = "lora") -> dict:
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_variants import AdapterSpec

    parts = {model.denoiser: "unet"}
    if text_encoders:  # (Flux.2 and Anima train their transformer only)
        parts.update({te: "text_encoder" for te in model.text_encoder_names})
    gen = torch.Generator().manual_seed(seed)
    for part, kind in parts.items():
        add_lora(getattr(model, part), kind=kind, rank=4, alpha=1.0, dropout=0.0, layer_preset=preset,
                 presets=model.lora_layer_presets.get(part), spec=AdapterSpec(**ADAPTERS[adapter]))
        for p in getattr(model, part).parameters():
            if p.requires_grad:
                p.data = torch.randn(p.shape, generator=gen) * 0.05
    return {part: getattr(model, part) for part in parts}


def _layer(key: str) -> str:
    lokr = (".lokr_w1", ".lokr_w1_a", ".lokr_w1_b", ".lokr_w2", ".lokr_w2_a", ".lokr_w2_b", ".lokr_t2",
            ".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b", ".hada_t1", ".hada_t2")
    for suffix in (".lora_down.weight", ".lora_up.weight", ".lora_A.weight", ".lora_B.weight", ".alpha", ".dora_scale", *lokr):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def _comfy_text_keys(name: str) -> dict:
    spec = FAMILIES[name][3]
    if spec is None:
        return {}
    import comfy.lora

    try:
        cls = getattr(importlib.import_module(spec[0]), spec[1])
    except (ImportError, AttributeError):
        return {}
    with torch.device("meta"):
        te = cls(device="meta")
    return comfy.lora.model_lora_keys_clip(te, {})


# family -> (ComfyUI model class, its unet_config read from our transformer's config)
COMFY_MODELS = {
    "flux": ("Flux", lambda c: {"depth": c.num_layers, "depth_single_blocks": c.num_single_layers,
                                "hidden_size": c.num_attention_heads * c.attention_head_dim}),
    "pixart": ("PixArt", lambda c: {"depth": c.num_layers, "hidden_size": c.num_attention_heads * c.attention_head_dim}),
    "z-image": ("Lumina2", lambda c: {"n_layers": c.n_layers, "dim": c.dim, "n_refiner_layers": c.n_refiner_layers}),
    "qwen-image": ("QwenImage", lambda c: {}),
    "wan": ("WAN21", lambda c: {}),  # (its keys are the original ones: ComfyUI's generic map)
    "wan22-i2v": ("WAN21", lambda c: {}),  # ComfyUI detects a 36-channel Wan without img_emb as its WAN21 (model_type t2v)
    "wan21-i2v": ("WAN21", lambda c: {}),  # with img_emb: its WAN21 with model_type i2v
    "anima": ("CosmosPredict2", lambda c: {}),
    "sd15": ("BaseModel", None), "sdxl": ("SDXL", None),
    "sd3": ("SD3", lambda c: {"depth": c.num_attention_heads * c.attention_head_dim // 64}),  # (None: the UNet's config as ComfyUI detects it from the file)  # Anima's DiT is Cosmos Predict2's, as ComfyUI detects it
}
COMFY_MODELS.update({"chroma": ("Chroma", COMFY_MODELS["flux"][1]), "flux2-dev": ("Flux2", COMFY_MODELS["flux"][1]),
                     "flux2-klein": ("Flux2", COMFY_MODELS["flux"][1]), "pixart-sigma": COMFY_MODELS["pixart"],
                     "pixart-alpha": COMFY_MODELS["pixart"]})


def _diffusion_model_keys(path: Path) -> dict:
    """The denoiser's weights of our single file under the names ComfyUI's model holds them (it
    drops a checkpoint's `model.diffusion_model.` and a Cosmos-style `net.` prefix on load; a whole
    checkpoint's text encoders and VAE are left out)."""
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    if any(k.startswith("model.diffusion_model.") for k in tensors):  # a whole checkpoint: its UNet / transformer
        return {k.removeprefix("model.diffusion_model."): v for k, v in tensors.items() if k.startswith("model.diffusion_model.")}
    return {k.removeprefix("net."): v for k, v in tensors.items()}


def _comfy_model(name: str, transformer_config, weights: dict):
    """ComfyUI's model class for the family holding our tiny original-layout weights (its key maps
    read `state_dict()` and `model_config.unet_config` only). Flux.2 falls back to ComfyUI's Flux
    class where this ComfyUI has no Flux2 (the newer one derives from it)."""
    import comfy.model_base
    import comfy.model_detection

    cls_name, config = COMFY_MODELS[name]
    cls = getattr(comfy.model_base, cls_name, None) or (comfy.model_base.Flux if cls_name == "Flux2" else None)
    if cls is None:
        return None
    sd = {"diffusion_model." + k: v for k, v in weights.items()}
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    model.state_dict = lambda *a, **k: sd
    unet_config = comfy.model_detection.detect_unet_config(weights, "") if config is None else config(transformer_config)
    model.model_config = types.SimpleNamespace(unet_config=unet_config)
    return model


def _patched(patches: dict, weights: dict) -> dict:
    """What ComfyUI's ModelPatcher (add_patches, then calculate_weight per weight) makes of `weights`."""
    import comfy.lora

    per_key: dict[str, list] = {}
    for k, v in patches.items():
        key, offset, function = (k, None, None) if isinstance(k, str) else (k[0], k[1], k[2] if len(k) > 2 else None)
        per_key.setdefault(key, []).append((1.0, v, 1.0, offset, function))
    out = {}
    for key, plist in per_key.items():
        weight = weights[key.removeprefix("diffusion_model.")].float().clone()
        out[key.removeprefix("diffusion_model.")] = comfy.lora.calculate_weight(plist, weight, key)
    return out


def check(name: str, fmt: str, work: Path, preset: str = "full", adapter: str = "lora") -> dict:
    import comfy.lora
    import comfy.lora_convert
    import comfy.utils

    from ot_gradio.tools.convert import merge_into
    from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, load_lora_file, save_lora

    torch.manual_seed(0)
    model = _build(name)
    base = work / f"{name}-base.safetensors"
    model.save_single_file(base, None)
    weights = _diffusion_model_keys(base)
    parts = _train_full(model, preset=preset, text_encoders=FAMILIES[name][3] is not None, adapter=adapter)
    lora = save_lora(work / f"{name}-{fmt}.safetensors", parts, module_names=model.lora_module_names(),
                     base_model_version=model.lora_base_model_version, lora_format=KOHYA if fmt == "kohya" else DIFFUSERS)
    comfy_model = _comfy_model(name, getattr(model, model.denoiser).config, weights)
    if comfy_model is None:
        return {"family": name, "format": fmt, "error": "this ComfyUI has no model class for it"}
    unet_map = comfy.lora.model_lora_keys_unet(comfy_model, {})
    sd = comfy.lora_convert.convert_lora(comfy.utils.load_torch_file(str(lora), safe_load=True))
    layers = {_layer(k) for k in sd}
    skipped = sorted(layers - set(unet_map) - set(_comfy_text_keys(name)))
    logging.disable(logging.WARNING)  # load_lora warns about the text encoder keys, checked above
    theirs = _patched(comfy.lora.load_lora(sd, unet_map), weights)
    logging.disable(logging.NOTSET)
    torch.manual_seed(0)
    ours_model = _build(name)  # the same seed: the same base weights
    loaded = load_lora_file(lora, module_names=ours_model.lora_module_names(), denoiser=ours_model.denoiser)
    merge_into(ours_model, loaded.parts, loaded.rank, loaded.alpha, 1.0)
    merged = work / f"{name}-{fmt}-merged.safetensors"
    ours_model.save_single_file(merged, None)
    ours = _diffusion_model_keys(merged)
    changed = {k for k, v in ours.items() if not torch.equal(v, weights[k])}  # what our merge moved
    diff = max((float((theirs[k] - ours[k].float()).abs().max()) if k in theirs else float("inf") for k in changed),
               default=float("nan"))
    return {"family": name, "format": fmt, "layers": len(layers), "skipped": skipped, "max_diff": diff,
            "weights_patched": len(theirs), "weights_merged": len(changed)}


def check_hunyuan_video(fmt: str, work: Path, preset: str = "full") -> dict:
    """HunyuanVideo (no original single file of ours to patch): ComfyUI's HunyuanVideo model over zero
    original weights, shaped as tests/comfy_reference.py `hunyuan_video_rows` gives them, is patched
    with our file and compared with the DIFFUSERS_LORA file's deltas stacked as diffusers' converter
    splits those weights (q/k/v and the single blocks' MLP input fused; final_layer's halves swapped;
    zero rows for a layer `preset` leaves out of a fused weight, and a weight of none left alone).
    Text-encoder layers are checked against ComfyUI's HunyuanVideoClipModel map."""
    import comfy.lora
    import comfy.lora_convert
    import comfy.model_base
    import comfy.utils
    from safetensors.torch import load_file

    from ot_gradio.models.common import base_module
    from ot_gradio.models.hunyuan_video import HunyuanVideo
    from ot_gradio.models.tiny.hunyuan_video import tiny_hunyuan_video_components
    from ot_gradio.training.lora_format import DIFFUSERS, KOHYA, save_lora
    from tests.comfy_reference import hunyuan_video_rows

    model = HunyuanVideo(tiny_hunyuan_video_components())
    parts = _train_full(model, preset=preset)
    tr, modules = model.transformer.config, dict(base_module(model.transformer).named_modules())
    rows = hunyuan_video_rows(tr.num_layers, tr.num_single_layers, tr.num_refiner_layers)
    shape = {k: getattr(modules[p], "base_layer", modules[p]).weight.shape for k, (ps, _) in rows.items() for p in ps[:1]}
    weights = {f"{k}.weight": torch.zeros(sum(getattr(modules[p], "base_layer", modules[p]).weight.shape[0] for p in ps), shape[k][1])
               for k, (ps, _) in rows.items()}
    comfy_model = comfy.model_base.HunyuanVideo.__new__(comfy.model_base.HunyuanVideo)
    torch.nn.Module.__init__(comfy_model)
    sd = {"diffusion_model." + k: v for k, v in weights.items()}
    comfy_model.state_dict = lambda *a, **k: sd
    comfy_model.model_config = types.SimpleNamespace(unet_config={})
    unet_map = comfy.lora.model_lora_keys_unet(comfy_model, {})
    from comfy.text_encoders.hunyuan_video import HunyuanVideoClipModel

    with torch.device("meta"):
        text_map = comfy.lora.model_lora_keys_clip(HunyuanVideoClipModel(device="meta"), {})
    lora = save_lora(work / f"hunyuan-{fmt}.safetensors", parts, module_names=model.lora_module_names(),
                     base_model_version=model.lora_base_model_version, lora_format=KOHYA if fmt == "kohya" else DIFFUSERS)
    file = comfy.lora_convert.convert_lora(comfy.utils.load_torch_file(str(lora), safe_load=True))
    layers = {_layer(k) for k in file}
    skipped = sorted(layers - set(unet_map) - set(text_map))
    logging.disable(logging.WARNING)
    theirs = _patched(comfy.lora.load_lora(file, unet_map), weights)
    logging.disable(logging.NOTSET)
    peft = load_file(str(save_lora(work / "hunyuan-peft.safetensors", {"transformer": parts["transformer"]}, lora_format=DIFFUSERS)))
    diff, trained = 0.0, 0
    for key, (paths, swap) in rows.items():
        deltas = [peft[f"transformer.{p}.lora_B.weight"] @ peft[f"transformer.{p}.lora_A.weight"]
                  if f"transformer.{p}.lora_B.weight" in peft else torch.zeros(getattr(modules[p], "base_layer", modules[p]).weight.shape)
                  for p in paths]
        delta = torch.cat(deltas)
        delta = torch.cat(delta.chunk(2)[::-1]) if swap else delta
        trained += any(f"transformer.{p}.lora_B.weight" in peft for p in paths)
        patched = theirs.get(f"{key}.weight", weights[f"{key}.weight"])  # not patched: the zero weight stays
        diff = max(diff, float((patched - delta).abs().max()))
    return {"family": "hunyuan-video", "format": fmt, "layers": len(layers), "skipped": skipped, "max_diff": diff,
            "weights_patched": len(theirs), "weights_merged": trained}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--comfyui", required=True, type=Path, help="a ComfyUI source folder (holding comfy/lora.py)")
    parser.add_argument("--family", action="append", choices=sorted([*FAMILIES, "hunyuan-video"]), help="default: all")
    parser.add_argument("--format", action="append", choices=("kohya", "diffusers"), help="default: both")
    parser.add_argument("--layer-preset", default="full",
                        help="the layers trained (a preset of the family's layer_filter_preset, e.g. attn-only); default: full")
    parser.add_argument("--adapter", default="lora", choices=sorted(ADAPTERS),
                        help="the adapter every layer gets (not with hunyuan-video); default: lora")
    args = parser.parse_args(argv)
    if not (args.comfyui / "comfy" / "lora.py").is_file():
        parser.error(f"--comfyui: {args.comfyui} holds no comfy/lora.py; give a ComfyUI source folder")
    import_comfyui(args.comfyui.resolve())
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.family or [*FAMILIES, "hunyuan-video"]:
            for fmt in args.format or ("kohya", "diffusers"):
                if fmt == "diffusers" and ADAPTERS[args.adapter].get("lokr_decompose"):
                    print(f"{name:13} {fmt:9} not checked: DoRA on LoKr has no diffusers/PEFT form")
                    continue
                if name == "hunyuan-video" and fmt == "diffusers":
                    print(f"{name:13} {fmt:9} not checked: ComfyUI maps no diffusers names for HunyuanVideo (use COMFY_LORA)")
                    continue
                torch.manual_seed(0)
                preset = args.layer_preset
                if name == "hunyuan-video":
                    r = check_hunyuan_video(fmt, Path(tmp), preset)
                else:
                    r = check(name, fmt, Path(tmp), preset, args.adapter)
                if "error" in r:
                    print(f"{name:13} {fmt:9} {r['error']}")
                    continue
                failed += bool(r["skipped"]) or not r["max_diff"] < 1e-4
                print(f"{name:13} {fmt:9} layers {r['layers']:4}  skipped {len(r['skipped']):3}  weights patched "
                      f"{r['weights_patched']:4}/{r['weights_merged']:<4} max|ComfyUI - ours| {r['max_diff']:.2e}  {r['skipped']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
