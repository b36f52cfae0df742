"""Flux.2 (models/flux2.py) on the tiny dev and Klein models: loading from diffusers folders,
the text, latents and transformer inputs exactly as Flux2Pipeline / Flux2KleinPipeline build
them, the transformer file in the BFL layout that diffusers' from_single_file reads back, the
ComfyUI LoRA placement, and the import of OneTrainer's flux2 preset's quantization settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ot_gradio.models.common import ModelLoadError

PRESET = Path(__file__).resolve().parents[1] / "config" / "data" / "onetrainer-presets-2026" / "flux2-LoRA-16GB.json"


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    from ot_gradio.models.tiny import resolve_tiny

    return {variant: resolve_tiny(f"tiny:flux2-{variant}") for variant in ("dev", "klein")}


@pytest.fixture(scope="module")
def models(tiny):
    from ot_gradio.models.flux2 import Flux2

    return {variant: Flux2.load(str(paths.diffusers_dir)) for variant, paths in tiny.items()}


def test_dev_and_klein_load_from_diffusers_folders_through_the_registry(tiny, models):
    from diffusers import Flux2KleinPipeline, Flux2Pipeline

    from ot_gradio.config.enums import ModelType
    from ot_gradio.models.registry import get_family

    family = get_family(ModelType.FLUX_2)
    model = family.load(str(tiny["klein"].diffusers_dir), dtypes={"transformer": torch.bfloat16})
    assert model.variant == "klein" and model.transformer.dtype == torch.bfloat16 and model.vae.dtype == torch.float32
    assert (models["dev"].variant, models["dev"].has_guidance, models["klein"].has_guidance) == ("dev", True, False)
    assert type(models["dev"].pipeline()) is Flux2Pipeline and type(models["klein"].pipeline()) is Flux2KleinPipeline


def test_other_models_are_refused_with_a_message(tiny_dir):
    from ot_gradio.models.flux2 import Flux2
    from ot_gradio.models.tiny import resolve_tiny

    with pytest.raises(ModelLoadError, match="not a Flux.2 model"):
        Flux2.load(str(resolve_tiny("tiny:flux").diffusers_dir))


@pytest.mark.parametrize("variant", ["dev", "klein"])
def test_text_is_the_pipelines_prompt_embedding(models, variant):
    model = models[variant]
    model.text_encoder_sequence_length = None
    ours = model.encode_text(["a red circle", "two blue squares"])["encoder_hidden_states"]
    theirs, ids = model.pipeline().encode_prompt(["a red circle", "two blue squares"])
    assert ours.shape == (2, 512, 48) and torch.equal(ours, theirs)
    model.text_encoder_sequence_length = 300  # the window option reaches the tokenizer
    assert model.encode_text(["a red circle"])["encoder_hidden_states"].shape[1] == 300
    model.text_encoder_sequence_length = None
    from ot_gradio.models.flux2 import text_ids

    assert torch.equal(text_ids(ours), ids)


def test_a_layer_skip_is_refused(models):
    with pytest.raises(ValueError, match="text_encoder_layer_skip"):
        models["dev"].layer_skips = {"text_encoder": 2}


@pytest.mark.parametrize("variant", ["dev", "klein"])
def test_latents_are_patchified_and_batch_normalised_as_the_pipeline(models, variant):
    from diffusers import Flux2Pipeline

    model = models[variant]
    pixels = torch.rand(1, 3, 64, 48) * 2 - 1
    latents = model.encode_images(pixels, sample=False)
    assert latents.shape == (1, 32, 4, 3)
    raw = model.vae.encode(pixels).latent_dist.mean
    pipe = Flux2Pipeline(**{k: getattr(model, k) for k in ("scheduler", "vae", "text_encoder", "tokenizer", "transformer")})
    assert torch.allclose(latents, pipe._encode_vae_image(pixels, generator=None), atol=1e-6)  # the pipeline's own (argmax)
    assert not torch.allclose(latents, Flux2Pipeline._patchify_latents(raw), atol=1e-3)  # the statistics are applied
    decoded = model.decode_latents(latents)
    assert torch.allclose(decoded, model.vae.decode(raw).sample, atol=1e-5)
    assert model.image_seq_len(latents) == 12


@pytest.mark.parametrize("variant", ["dev", "klein"])
def test_predict_feeds_the_transformer_as_the_pipeline_does(models, variant):
    from diffusers import Flux2Pipeline

    model = models[variant]
    model.guidance_scale = 2.5
    cond = model.encode_text(["a red circle"])
    latents = torch.randn(1, 32, 4, 3)
    t = torch.tensor([0.7])
    with torch.no_grad():
        ours = model.predict(latents, t, cond)
        hidden = cond["encoder_hidden_states"]
        theirs = model.transformer(
            hidden_states=Flux2Pipeline._pack_latents(latents), encoder_hidden_states=hidden, timestep=t,
            img_ids=Flux2Pipeline._prepare_latent_ids(latents), txt_ids=Flux2Pipeline._prepare_text_ids(hidden),
            guidance=torch.tensor([2.5]) if variant == "dev" else None, return_dict=False,
        )[0]
    assert torch.allclose(ours, theirs.permute(0, 2, 1).reshape(1, 32, 4, 3), atol=1e-6)
    if variant == "dev":  # the guidance value reaches the guidance embedder
        model.guidance_scale = 6.0
        with torch.no_grad():
            assert not torch.allclose(model.predict(latents, t, cond), ours)


def test_the_transformer_file_is_the_bfl_layout_from_single_file_reads(tiny, models, tmp_path):
    from diffusers import Flux2Transformer2DModel
    from safetensors import safe_open

    model = models["dev"]
    path = model.save_single_file(tmp_path / "flux2.safetensors", torch.float32)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
    assert {"double_blocks.0.img_attn.qkv.weight", "single_blocks.0.linear1.weight", "final_layer.adaLN_modulation.1.weight",
            "guidance_in.in_layer.weight", "double_stream_modulation_img.lin.weight"} <= keys
    back = Flux2Transformer2DModel.from_single_file(str(path), config=str(tiny["dev"].diffusers_dir), subfolder="transformer",
                                                    local_files_only=True, torch_dtype=torch.float32).state_dict()
    ours = model.transformer.state_dict()
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)
    from ot_gradio.models.flux2 import Flux2  # the family loads the file with the rest from a config folder

    loaded = Flux2.load(str(path), config_dir=str(tiny["dev"].diffusers_dir))
    assert loaded.variant == "dev" and all(torch.equal(loaded.transformer.state_dict()[k], ours[k]) for k in ours)
    with pytest.raises(ModelLoadError, match="not a diffusers model"):
        Flux2.load(str(path), config_dir=str(tmp_path))


def test_comfy_lora_keys_land_on_the_bfl_weights_of_every_linear_layer(models):
    from ot_gradio.models.flux2_keys import comfy_lora_targets, module_layout

    transformer = models["dev"].transformer
    every = [name for name, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)]
    assert set(every) <= set(module_layout(transformer))  # the transformer file holds every weight
    # ComfyUI's Flux key map names the blocks, embedders and output layers, not Flux.2's shared
    # modulations and time/guidance embedder
    skipped = [n for n in every if n.startswith(("time_guidance_embed.", "double_stream_modulation", "single_stream_modulation"))]
    assert len(skipped) == 7
    linears = [n for n in every if n not in skipped]
    keys = [f"lora_transformer_{n.replace('.', '_')}.lora_down.weight" for n in linears] + [f"transformer.{n}.lora_A.weight" for n in linears]
    targets = comfy_lora_targets(transformer, keys)
    inner = transformer.config.num_attention_heads * transformer.config.attention_head_dim
    assert targets["transformer.transformer_blocks.0.attn.to_k"] == ("double_blocks.0.img_attn.qkv.weight", inner, inner, False)
    assert targets["lora_transformer_transformer_blocks_0_attn_add_v_proj"].start == 2 * inner
    assert targets["lora_transformer_single_transformer_blocks_0_attn_to_qkv_mlp_proj"].key == "single_blocks.0.linear1.weight"
    assert targets["transformer.norm_out.linear"].swap
    with pytest.raises(ValueError, match="no Flux.2 weight"):
        comfy_lora_targets(transformer, ["transformer.transformer_blocks.0.ff.net.0.proj.lora_A.weight"])
    with pytest.raises(ValueError, match="skips it"):
        comfy_lora_targets(transformer, [f"transformer.{skipped[0]}.lora_A.weight"])


def test_the_onetrainer_preset_quantization_is_acted_on(models):
    """INT_W8A8 imports as it is, without a warning; the quantization layer filter
    ("transformer_block") picks both kinds of Flux.2 block and nothing else."""
    from ot_gradio.config.io import load_config
    from ot_gradio.training.quantize import quantization_filter

    result = load_config(PRESET)
    assert result.config.transformer.weight_dtype == "INT_W8A8" and result.config.text_encoder.weight_dtype == "FLOAT_8"
    assert not [w for w in result.warnings if "weight_dtype" in w], result.warnings
    include = quantization_filter(result.config)
    names = [n for n, m in models["klein"].transformer.named_modules() if isinstance(m, torch.nn.Linear)]
    picked = [n for n in names if include(n)]
    assert any(n.startswith("transformer_blocks.") for n in picked) and any(n.startswith("single_transformer_blocks.") for n in picked)
    assert not [n for n in picked if not n.startswith(("transformer_blocks.", "single_transformer_blocks."))]


def test_training_the_text_encoder_is_refused(models):
    from ot_gradio.config.io import load_config

    config = load_config(PRESET).config
    models["klein"].configure_flow(config)  # the preset: transformer only
    config.text_encoder.train = True
    with pytest.raises(ValueError, match="text_encoder.train"):
        models["klein"].configure_flow(config)
