"""Every family loads a folder in its real repo's hub layout (tests/models/hub_layouts.py: the
hub's model_index.json entries and tokenizer file names) through the real loading code, given as
the base model like a user's download, and encodes text exactly as the tiny model it was made from."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.config.enums import ModelType
from tests.models.hub_layouts import HUB_LAYOUTS, save_hub_layout

MODEL_TYPES = {
    "tiny:flux2-dev": ModelType.FLUX_2,
}
PROMPT = "a red circle, two blue squares"


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_every_layout_names_a_family():
    assert set(MODEL_TYPES) == set(HUB_LAYOUTS)


@pytest.mark.parametrize("name", sorted(HUB_LAYOUTS))
def test_a_hub_layout_folder_loads_and_encodes_as_the_tiny_model(name, tiny_dir, tmp_path):
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import resolve_tiny

    tiny = resolve_tiny(name).diffusers_dir
    folder = save_hub_layout(tiny, name, tmp_path / HUB_LAYOUTS[name]["repo"].split("/")[1])
    family = get_family(MODEL_TYPES[name])
    model = family.load(str(folder), offline=True)
    reference = family.load(str(tiny), offline=True)
    with torch.no_grad():
        assert _same(model.encode_text([PROMPT]), reference.encode_text([PROMPT]))


def test_flux2_dev_samples_with_the_tokenizer_of_its_pixtral_processor(tiny_dir, tmp_path):
    """FLUX.2 dev's `tokenizer` is a PixtralProcessor, whose image side needs torchvision: the
    tokenizer part loads alone, and the pipeline built for samples renders prompts with it."""
    from ot_gradio.models.flux2 import Flux2
    from ot_gradio.models.tiny import resolve_tiny

    folder = save_hub_layout(resolve_tiny("tiny:flux2-dev").diffusers_dir, "tiny:flux2-dev", tmp_path / "FLUX.2-dev")
    model = Flux2.load(str(folder), offline=True)
    assert model.variant == "dev" and not hasattr(model.tokenizer, "image_processor")
    image = model.sample("a red circle", height=32, width=32, steps=1, seed=1)
    assert image.size == (32, 32)
