"""A part quantized for training (its weight_dtype FLOAT_8 / INT_8 / NFLOAT_4 / INT_W8A8 / FLOAT_W8A8) is saved as the
float weights it stands for: the layout the model class loads, never the 8-bit codes and scales."""

import pytest
import torch
from torch import nn

from ot_gradio.config.enums import DataType
from ot_gradio.models.common import plain_state_dict, save_diffusers_folder
from ot_gradio.training.quantize import quantize_linear_layers

# the worst error of each type over the largest weight (float8's 3-bit mantissa: 1/16, per row scale;
# int8: half of 1/127 of the row's largest; NFLOAT_4: 16 levels per block of 64)
TOLERANCE = {DataType.FLOAT_8: 0.07, DataType.INT_8: 0.01, DataType.NFLOAT_4: 0.2, DataType.INT_W8A8: 0.01, DataType.FLOAT_W8A8: 0.07}


@pytest.mark.parametrize("data_type", list(TOLERANCE), ids=lambda d: d.value)
def test_a_quantized_part_is_saved_as_its_float_weights_under_the_original_names(data_type):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64, bias=False))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert quantize_linear_layers(model, data_type, torch.device("cpu"), torch.float32, "transformer") == 2
    assert set(model.state_dict()) != set(before)  # the codes and their scales
    saved = plain_state_dict(model, "transformer")
    assert set(saved) == set(before)
    for key, value in before.items():
        assert saved[key].dtype == torch.float32 and saved[key].shape == value.shape
        assert (saved[key] - value).abs().max() <= TOLERANCE[data_type] * value.abs().max(), key


def test_a_diffusers_folder_of_a_model_with_a_float8_part_loads_whole(tmp_path):
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    config = CLIPTextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=100,
                            max_position_embeddings=16)
    encoder = CLIPTextModel(config).eval()
    ids = torch.tensor([[1, 5, 7, 2]])
    reference = encoder(ids).last_hidden_state
    quantize_linear_layers(encoder, DataType.FLOAT_8, torch.device("cpu"), torch.float32, "text_encoder")
    quantized = encoder(ids).last_hidden_state
    folder = save_diffusers_folder(tmp_path / "model", {"text_encoder": encoder}, DataType.FLOAT_32, lambda tmp: None)
    loaded, info = CLIPTextModel.from_pretrained(folder / "text_encoder", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    out = loaded.eval()(ids).last_hidden_state
    assert torch.allclose(out, quantized, atol=1e-5)  # what was trained against, reloaded
    assert (out - reference).abs().max() < 0.1 * reference.abs().max()
