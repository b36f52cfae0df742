"""The parts of a model are parked for sampling and put back as they were, also when sampling fails."""

import pytest
import torch

from ot_gradio.models.common import exact_size, generation_size, parked_for_sampling


def test_parts_are_put_back_after_a_failed_sample():
    parts = {"unet": torch.nn.Linear(2, 2), "vae": torch.nn.Linear(2, 2)}
    parts["unet"].train()
    parts["vae"].eval()
    with pytest.raises(RuntimeError, match="boom"), parked_for_sampling(parts, None, "unet") as device:
        assert device == torch.device("cpu")
        assert not any(m.training for m in parts.values())
        raise RuntimeError("boom")
    assert parts["unet"].training and not parts["vae"].training


def test_sizes():
    from PIL import Image

    assert generation_size(70, 64, 16) == (80, 64)
    image = Image.new("RGB", (64, 80))
    assert exact_size(image, 64, 70).size == (64, 70)
    assert exact_size(image, 64, 80) is image
