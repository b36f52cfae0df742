"""The LoRA layer names of a model's original (single-file) layout, which other tools write and
*Base LoRA* reads: Wan's, Z-Image's (q, k, v fused) and SD's original names under ComfyUI's `diffusion_model.`; Flux.1, Chroma and Flux.2 files of kohya sd-scripts (networks/lora_flux.py,
`lora_unet_double_blocks_0_img_attn_qkv`), musubi-tuner (networks/lora_flux_2.py), OneTrainer's
KOHYA_LORA, and ComfyUI / ai-toolkit (`diffusion_model.double_blocks.0.img_attn.qkv`).

A name that covers several of our layers (q, k, v fused in `img_attn.qkv`; q, k, v and the MLP
input in Flux.1's `single_blocks.N.linear1`) is a `LayerName` whose widths say each member's rows,
so reading splits the fused LoRA onto our separate layers with each part's delta exact; a name
whose halves are swapped (`final_layer.adaLN_modulation.1`) says so too. The places come from the
family's key map (models/flux_keys.py, flux2_keys.py), which also converts its single files.
These names are read only: what we write is the family's `lora_module_names()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import nn

from ot_gradio.models.common import base_module
from ot_gradio.models.key_layout import LayerName, Place

# the spellings of an original key `k` other tools give a LoRA layer
SPELLINGS: tuple[Callable[[str], str], ...] = (
    lambda k: "lora_unet_" + k.replace(".", "_"),  # sd-scripts, musubi-tuner, OneTrainer KOHYA_LORA
    lambda k: "diffusion_model." + k,  # ComfyUI, ai-toolkit, musubi convert_lora --target other, OneTrainer COMFY_LORA
    lambda k: k,  # OneTrainer ORIGINAL_LORA
)


def _flux(transformer: nn.Module) -> dict[str, Place]:
    from ot_gradio.models.flux_keys import bfl_module_layout

    return bfl_module_layout(transformer)


def _flux2(transformer: nn.Module) -> dict[str, Place]:
    from ot_gradio.models.flux2_keys import module_layout

    return module_layout(transformer)


def _wan(transformer: nn.Module) -> dict[str, Place]:
    from ot_gradio.models.comfy_lora_names import wan_original
    from ot_gradio.models.key_layout import layer_paths

    return {p: Place(o) for p in layer_paths(transformer) if (o := wan_original(p))}


def _sd_unet(unet: nn.Module) -> dict[str, Place]:
    from ot_gradio.models.sdxl_single_file import unet_module_names

    return {p: Place(o) for p, o in unet_module_names(unet).items()}


def _z_image(transformer: nn.Module) -> dict[str, Place]:
    from ot_gradio.models.z_image_keys import original_layout

    places = original_layout(transformer.state_dict())
    return {k.removesuffix(".weight"): p._replace(key=p.key.removesuffix(".weight")) for k, p in places.items() if k.endswith(".weight")}


# the denoiser's class -> its original layout (diffusers module path -> Place)
LAYOUTS: dict[str, Callable[[nn.Module], dict[str, Place]]] = {
    "FluxTransformer2DModel": _flux, "ChromaTransformer2DModel": _flux, "Flux2Transformer2DModel": _flux2,
    "WanTransformer3DModel": _wan, "ZImageTransformer2DModel": _z_image, "UNet2DConditionModel": _sd_unet,  # SD 1.x/2.x, SDXL: ComfyUI's input_blocks...
}


def layout_names(layout: Mapping[str, Place], part: str) -> dict[str, list[tuple[str, str]]]:
    """Every spelling of every original weight's LoRA name -> the (part, module path)s it covers, in row order."""
    groups: dict[str, list[tuple[int, str, Place]]] = {}
    for path, place in layout.items():
        groups.setdefault(place.key, []).append((place.start or 0, path, place))
    out: dict[str, list[tuple[str, str]]] = {}
    for key, members in groups.items():
        members.sort(key=lambda m: m[0])
        widths = [m[2].rows for m in members] if len(members) > 1 else None
        swap = len(members) == 1 and members[0][2].swap
        for spell in SPELLINGS:
            out[LayerName(spell(key), widths, swap)] = [(part, path) for _, path, _ in members]
    return out


def original_lora_names(model) -> dict[str, list[tuple[str, str]]]:
    """The model's original-layout LoRA names (none for a family without one here)."""
    transformer = base_module(getattr(model, model.denoiser))
    layout = LAYOUTS.get(type(transformer).__name__)
    return layout_names(layout(transformer), model.denoiser) if layout else {}
