"""Checks that several family test files make on their loaded tiny family."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch


def family_fixtures(tiny: str, family: type, paths: str, model: str, scope: str = "module"):
    """A family test file's two fixtures, named `paths` (session: the saved files of `tiny:<tiny>`)
    and `model` (`scope`: `family` loaded from that folder, for tests that change no weights).
    Use: `tiny_x_paths, x = family_fixtures("x", X, "tiny_x_paths", "x")`."""

    @pytest.fixture(scope="session", name=paths)
    def saved(tiny_dir):
        from ot_gradio.models.tiny import resolve_tiny

        return resolve_tiny(f"tiny:{tiny}")

    @pytest.fixture(scope=scope, name=model)
    def loaded(request):
        return family.load(str(request.getfixturevalue(paths).diffusers_dir), offline=True)

    return saved, loaded


def add_random_lora(model, parts=("transformer",), **options):
    """The LORA method set up on `model` as a run sets it up (`options` over its model type's
    defaults), the up (B) weights of its LoRA in `parts` random (seed 2) so that the LoRA changes
    what the model makes, and every part in eval mode. Returns the config."""
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.training.lora_method import LoraMethod

    config = TrainConfig.model_validate({"model_type": model.model_type, **options})
    LoraMethod().setup(model, config, torch.device("cpu"))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for part in parts:
            for name, p in getattr(model, part).named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    for module in model.parts.values():
        module.eval()
    return config


def pipeline_image(pipe, size: int = 64, **kwargs) -> np.ndarray:
    """The first image `pipe(**kwargs)` makes in 2 steps at `size` x `size` from seed 0, as numpy."""
    with torch.no_grad():
        return pipe(
            num_inference_steps=2, height=size, width=size, generator=torch.Generator().manual_seed(0), output_type="np", **kwargs
        ).images[0]


def pipeline_images(size: int = 64, **kwargs):
    """`pipeline_image` with this file's size and settings."""
    return partial(pipeline_image, size=size, **kwargs)


def assert_same_parts(family, again) -> None:
    """Every part of `again` (e.g. reloaded from a saved folder) has `family`'s tensors, key by key."""
    for part, module in family.parts.items():
        a, b = module.state_dict(), again.parts[part].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), part


def assert_sample_uses_cfg_and_the_negative_prompt(family, prompt: str, plain_cfg: float) -> None:
    """`sample` of `prompt` at `plain_cfg` (no guidance), with CFG, and with a negative prompt
    gives three different images of the asked size, and leaves the transformer in training mode."""
    family.transformer.train()
    plain = family.sample(prompt, "", height=40, width=56, steps=2, cfg_scale=plain_cfg)
    assert plain.size == (56, 40) and family.transformer.training
    cfg = family.sample(prompt, "", height=40, width=56, steps=2, cfg_scale=4.0)
    negative = family.sample(prompt, "blue", height=40, width=56, steps=2, cfg_scale=4.0)
    assert np.abs(np.asarray(plain, float) - np.asarray(cfg, float)).max() > 0
    assert np.abs(np.asarray(cfg, float) - np.asarray(negative, float)).max() > 0
    family.transformer.eval()


def assert_padding_mask_reaches_training_and_samples(model, latent_shape, tmp_path, size: int = 64, cfg_scale: float = 3.5) -> None:
    """transformer.attention_mask on a family that reads it (Flux.1, SD 3, HiDream), set as a run
    sets it (configure_model): a training step's loss changes, the text cache keys it (a masked run
    gets masked entries, never the unmasked ones of an earlier run), and a sample's
    transformer_attention_mask changes the image of the same seed. `model` is left with the option off."""
    from ot_gradio.config.parts import SampleConfig
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.batches import Batch
    from ot_gradio.data.text_cache import TextEmbeddingCache, text_encoder_id
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep, configure_model
    from ot_gradio.training.method_base import Method

    cpu, b = torch.device("cpu"), latent_shape[0]
    precision = Precision("FLOAT_32", cpu)
    latents = torch.randn(latent_shape, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(latent_shape, generator=torch.Generator().manual_seed(1))
    index = torch.tensor([500] * b)
    batch = Batch(size=(size, size), captions=["a red cube"] * b, loss_weights=torch.ones(b), image_paths=["x"] * b, latents=latents)
    cache_ids, losses = {}, {}
    for on in (False, True):
        config = TrainConfig.model_validate({"model_type": model.model_type, "concepts": [], "samples": []})
        config.transformer.attention_mask = on
        configure_model(model, config, cpu, precision)
        assert model.mask_padding_tokens is on
        step = DiffusionStep(model, config, cpu, precision, noise_fn=lambda lat: (noise, index))
        with torch.no_grad():
            direct = step.loss(batch)
            cache_ids[on] = text_encoder_id(model, precision.dtype)
            step.text_cache = TextEmbeddingCache(tmp_path, cache_ids[on])  # one folder: the off run's entries are there
            cached = step.loss(batch)
        assert step.text_cache.encoded == 1 and step.text_cache.hits == 0  # never the other setting's entry
        torch.testing.assert_close(cached, direct)
        losses[on] = direct
    assert cache_ids[False] != cache_ids[True]
    assert not torch.allclose(losses[False], losses[True])
    model.mask_padding_tokens = False
    images = [Method().sample_image(model, SampleConfig(prompt="a red cube", height=size, width=size, diffusion_steps=2,
                                                        cfg_scale=cfg_scale, transformer_attention_mask=on),
                                    lambda text: text, 1, cpu) for on in (False, False, True)]
    assert images[0].tobytes() == images[1].tobytes() and images[0].tobytes() != images[2].tobytes()
    assert model.mask_padding_tokens is False  # the sample's setting does not outlive it
