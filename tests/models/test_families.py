"""What every family with a tiny model does alike, one row per tiny model: the tiny model is small,
loads by its `tiny:<name>` with the weights its folder (or its single file with `config_dir`)
gives, and loading's refusals say what to do. A new family adds its row here (a test fails
until it does); what only one family does stays in its own test file."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from ot_gradio.config.enums import ModelType as M
from ot_gradio.config.families import family_info
from ot_gradio.models.common import ModelLoadError
from tests.models.family_checks import assert_same_parts


class Row(NamedTuple):
    tiny: str  # the `tiny:<name>` model
    model_types: tuple[M, ...]  # the model types it stands for; the first one loads it
    single_file: bool = True  # its single file loads with `config_dir` (else: only folders)
    folder: bool = True  # it loads from its one diffusers folder (else: only with its other models)
    most_params: int = 1_000_000  # small enough to build in well under a second


FAMILIES = [
    Row("sd15", (M.STABLE_DIFFUSION_15,)),
    Row("sd15-inpainting", (M.STABLE_DIFFUSION_15_INPAINTING,)),
    Row("sd2", (M.STABLE_DIFFUSION_21, M.STABLE_DIFFUSION_20)),
    Row("sd2-base", (M.STABLE_DIFFUSION_21_BASE, M.STABLE_DIFFUSION_20_BASE)),
    Row("sd2-inpainting", (M.STABLE_DIFFUSION_20_INPAINTING,)),
    Row("sd2-depth", (M.STABLE_DIFFUSION_20_DEPTH,)),
    Row("sdxl", (M.STABLE_DIFFUSION_XL_10_BASE,), most_params=1_100_000),
    Row("sdxl-inpainting", (M.STABLE_DIFFUSION_XL_10_BASE_INPAINTING,), most_params=1_100_000),
    Row("sd3", (M.STABLE_DIFFUSION_3,)),
    Row("sd35", (M.STABLE_DIFFUSION_35,)),
    Row("flux", (M.FLUX_DEV_1,)),
    Row("flux-fill", (M.FLUX_FILL_DEV_1,)),
    Row("chroma", (M.CHROMA_1,)),
    Row("flux2-dev", (M.FLUX_2,), single_file=False),
    Row("flux2-klein", (M.FLUX_2,), single_file=False),
    Row("z-image", (M.Z_IMAGE,)),
    Row("qwen-image", (M.QWEN,)),
    Row("qwen-image-edit", (M.QWEN_IMAGE_EDIT,), single_file=False),
    Row("qwen-image-edit-plus", (M.QWEN_IMAGE_EDIT,), single_file=False),  # Qwen-Image-Edit-2511: QwenImageEditPlusPipeline
    Row("krea2", (M.KREA_2,)),
    Row("anima", (M.ANIMA,)),
    Row("sana", (M.SANA,), single_file=False),
    Row("wan", (M.WAN_2_1,), single_file=False),
    Row("wan22-5b", (M.WAN_2_2_TI2V_5B,), single_file=False),
    Row("wan22-a14b", (M.WAN_2_2_T2V_A14B,), single_file=False),
    Row("wan22-i2v-a14b", (M.WAN_2_2_I2V_A14B,), single_file=False),
    Row("wan21-i2v", (M.WAN_2_1_I2V,), single_file=False),
    Row("hunyuan_video", (M.HUNYUAN_VIDEO,), single_file=False),
    Row("ltx2", (M.LTX_2,), single_file=False),
    Row("ernie", (M.ERNIE,)),
    Row("ideogram4", (M.IDEOGRAM_4,), single_file=False),
    Row("hidream", (M.HI_DREAM_FULL,), single_file=False),
    Row("pixart", (M.PIXART_ALPHA,), single_file=False),
    Row("pixart-sigma", (M.PIXART_SIGMA,), single_file=False),
    Row("wuerstchen2", (M.WUERSTCHEN_2,), single_file=False, folder=False),
    Row("cascade", (M.STABLE_CASCADE_1,), single_file=False, folder=False),
]


def blank_token_window(model, model_type) -> int | None:
    """The window a run with a blank text_encoder_sequence_length encodes with: set as the trainer
    sets it (training/diffusion.py, then a flow family's configure_flow), read where the family keeps it."""
    from ot_gradio.config.schema import TrainConfig

    model.text_encoder_sequence_length = None
    if hasattr(model, "configure_flow"):
        config = TrainConfig(model_type=model_type, text_encoder_sequence_length=None)
        for part in model.text_encoder_names:
            getattr(config, part).train = False
        model.configure_flow(config)
    return next((getattr(model, a) for a in ("t5_sequence_length", "sequence_length", "text_encoder_sequence_length")
                 if getattr(model, a, None) is not None), None)


def _family(row: Row) -> type:
    from ot_gradio.models.registry import get_family

    return get_family(row.model_types[0])


def test_every_tiny_model_and_every_family_has_a_row():
    from ot_gradio.models.registry import supported_model_types
    from ot_gradio.models.tiny import all_tiny_models

    rows = {f"tiny:{row.tiny}" for row in FAMILIES}
    assert len(rows) == len(FAMILIES), "a tiny model has two rows"
    assert not sorted(set(all_tiny_models()) - rows), "add a Row to FAMILIES in tests/models/test_families.py"
    assert not sorted(rows - set(all_tiny_models())), "a Row names no tiny model"
    covered = {model_type for row in FAMILIES for model_type in row.model_types}
    assert not [t.value for t in supported_model_types() if t not in covered], "a family has no tiny model Row"


@pytest.mark.parametrize("row", FAMILIES, ids=[row.tiny for row in FAMILIES])
def test_tiny_model_is_small_and_loads_through_the_real_loaders(row, tiny_dir, tmp_path):
    from ot_gradio.models.tiny import resolve_tiny

    family, paths = _family(row), resolve_tiny(f"tiny:{row.tiny}")
    by_name = family.load(f"tiny:{row.tiny}", offline=True)
    assert sum(p.numel() for module in by_name.parts.values() for p in module.parameters()) < row.most_params
    for part in family_info(row.model_types[0]).circular_padding:  # force_circular_padding's parts: parts with convolutions
        assert any(isinstance(m, torch.nn.Conv2d) for m in by_name.parts[part].modules()), part
    window = family_info(row.model_types[0]).token_window  # what the page says a blank text_encoder_sequence_length reads
    if window is not None:
        assert blank_token_window(by_name, row.model_types[0]) == window
    if row.single_file:  # the denoiser from the file, the rest from the config folder: all as the folder has them
        assert_same_parts(by_name, family.load(str(paths.single_file), config_dir=str(paths.diffusers_dir), offline=True))
        with pytest.raises(ModelLoadError, match=r"config folder .* \(no (modular_)?model_index.json\); point it to a diffusers folder"):
            family.load(str(paths.single_file), config_dir=str(tmp_path), offline=True)
    elif row.folder:
        assert_same_parts(by_name, family.load(str(paths.diffusers_dir), offline=True))
    with pytest.raises(ModelLoadError, match=r"not a diffusers model \(.*no (modular_)?model_index.json\)"):
        family.load(str(tmp_path), offline=True)
