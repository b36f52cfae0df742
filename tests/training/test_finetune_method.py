"""The FINE_TUNE method on the tiny SD 1.5: which parts train with which learning rate, backups
of the full weights, the output formats and additional embeddings beside them."""

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from ot_gradio.config.schema import TrainConfig
from ot_gradio.training.finetune_method import FineTuneMethod
from ot_gradio.training.methods import get_method

CPU = torch.device("cpu")


def tiny_model():
    from ot_gradio.models.sd15 import StableDiffusion15
    from ot_gradio.models.tiny.sd15 import tiny_sd15_components

    return StableDiffusion15(**tiny_sd15_components())


def config(**values):
    return TrainConfig.model_validate({"training_method": "FINE_TUNE", "learning_rate": 1e-5, **values})


def test_registered():
    assert isinstance(get_method("FINE_TUNE"), FineTuneMethod)


def test_each_trained_part_is_one_group_with_its_learning_rate():
    model = tiny_model()
    groups = FineTuneMethod().setup(model, config(unet={"learning_rate": 2e-6}), CPU)
    assert [(g.name, g.lr) for g in groups] == [("unet", 2e-6), ("text_encoder", 1e-5)]
    assert {id(p) for p in groups[0].params} == {id(p) for p in model.unet.parameters()}
    assert {id(p) for p in groups[1].params} == {id(p) for p in model.text_encoder.parameters()}
    assert not any(p.requires_grad for p in model.vae.parameters())

    model = tiny_model()
    groups = FineTuneMethod().setup(model, config(text_encoder={"train": False}), CPU)
    assert [g.name for g in groups] == ["unet"]
    assert not any(p.requires_grad for p in model.text_encoder.parameters())


def test_whole_model_formats_only():
    with pytest.raises(ValueError, match="output_model_format: KOHYA_LORA is not a whole-model format"):
        FineTuneMethod().setup(tiny_model(), config(output_model_format="KOHYA_LORA"), CPU)


def test_backup_state_holds_the_full_trained_weights():
    model = tiny_model()
    method = FineTuneMethod()
    method.setup(model, config(text_encoder={"train": False}), CPU)
    state = {k: v.clone() for k, v in method.trainable_state(model).items()}
    assert {k.split(".", 1)[0] for k in state} == {"unet"}
    assert len(state) == len(model.unet.state_dict())
    with torch.no_grad():
        for p in model.unet.parameters():
            p.add_(1.0)
    method.load_trainable_state(model, state)
    assert all(torch.equal(v, model.unet.state_dict()[k.removeprefix("unet.")]) for k, v in state.items())


@pytest.mark.parametrize("fmt", ["SAFETENSORS", "ORIGINAL_SINGLE_FILE", "LEGACY_SAFETENSORS"])
def test_single_file_in_the_output_dtype(tmp_path, fmt):
    model = tiny_model()
    method = FineTuneMethod()
    cfg = config(output_model_format=fmt, output_dtype="FLOAT_16")
    method.setup(model, cfg, CPU)
    out = method.save(model, cfg, tmp_path / "model.safetensors", {})
    assert out == tmp_path / "model.safetensors"
    with safe_open(str(out), "pt") as f:
        keys = list(f.keys())
        assert any(k.startswith("model.diffusion_model.") for k in keys)  # the original (ldm) layout
        assert any(k.startswith("cond_stage_model.") for k in keys)
        assert f.get_tensor(next(k for k in keys if k.endswith(".weight"))).dtype == torch.float16


def test_diffusers_folder_and_additional_embeddings_beside_it(tmp_path):
    from diffusers import StableDiffusionPipeline

    model = tiny_model()
    tokens_before = len(model.tokenizer)
    method = FineTuneMethod()
    cfg = config(output_model_format="DIFFUSERS", additional_embeddings=[{"placeholder": "<trig>", "token_count": 2}])
    groups = method.setup(model, cfg, CPU)
    assert groups[-1].name == "embedding/<trig>" and groups[-1].part == "text_encoder"
    with torch.no_grad():
        model.unet.conv_in.weight.add_(0.5)
    out = method.save(model, cfg, tmp_path / "model.safetensors", {})
    assert out == tmp_path / "model"  # a folder, without the file suffix
    pipe = StableDiffusionPipeline.from_pretrained(str(out), safety_checker=None)
    assert torch.equal(pipe.unet.conv_in.weight, model.unet.conv_in.weight)
    assert len(pipe.tokenizer) == tokens_before  # the embedding's tokens are not in the saved model
    embedding = load_file(str(tmp_path / "model_embeddings" / "trig.safetensors"))
    assert torch.equal(embedding["emp_params"], method.additional[0].vectors["text_encoder"].detach())
    assert len(model.tokenizer) == tokens_before + 2  # the live model keeps them


def test_doctor_on_finetune_formats():
    from ot_gradio.config.doctor import check, errors

    cfg = config(concepts=[{"path": "x"}], output_model_format="ORIGINAL_SINGLE_FILE")
    assert not any("output format" in w or "not supported" in w for w in check(cfg))
    assert not errors(cfg)
    cfg.output_model_format = "CKPT"
    assert errors(cfg) == ["output_model_format: a fine-tune is a whole model and CKPT is not written by the trainer; choose "
                           "SAFETENSORS or ORIGINAL_SINGLE_FILE (one .safetensors checkpoint) or DIFFUSERS (a folder)."]
    cfg.output_model_format = "KOHYA_LORA"
    assert errors(cfg)[0].startswith("output_model_format: a fine-tune is a whole model and KOHYA_LORA holds LoRA weights")
    cfg.training_method = "LORA"
    assert not errors(cfg)
    cfg.output_model_format = "ORIGINAL_TRANSFORMER"  # a format OneTrainer knows, which holds no LoRA
    assert errors(cfg)[0].startswith("output_model_format: LoRA training writes KOHYA_LORA")
    cfg.output_model_format = "DIFFUSERS"
    assert errors(cfg)[0].endswith("not DIFFUSERS; choose one of those.")


def test_the_layer_preset_or_filter_picks_the_denoiser_weights_that_train(capsys):
    """As OneTrainer's fine-tune: the denoiser's weights outside the filter are frozen; the text
    encoder trains whole (the filter is the denoiser's); the log says how many train."""
    model = tiny_model()
    groups = FineTuneMethod().setup(model, config(layer_filter_preset="attn-only"), CPU)
    trained = sum(p.numel() for p in groups[0].params)
    assert f"layer preset attn-only: {trained:,} of {sum(p.numel() for p in model.unet.parameters()):,} unet weights train" in capsys.readouterr().out
    unet = dict(model.unet.named_parameters())
    assert {id(p) for p in groups[0].params} == {id(p) for n, p in unet.items() if "attn" in n} != {id(p) for p in unet.values()}
    assert not any(p.requires_grad for n, p in unet.items() if "attn" not in n)
    assert {id(p) for p in groups[1].params} == {id(p) for p in model.text_encoder.parameters()}

    model = tiny_model()
    groups = FineTuneMethod().setup(model, config(layer_filter_preset="custom", layer_filter=r"^conv_in\.,time_embedding", layer_filter_regex=True), CPU)
    assert {n for n, p in model.unet.named_parameters() if p.requires_grad} == {
        n for n in dict(model.unet.named_parameters()) if n.startswith("conv_in.") or "time_embedding" in n}
    with pytest.raises(ValueError, match=r"layer_filter: 'atention' matched no weight of the unet"):
        FineTuneMethod().setup(tiny_model(), config(layer_filter_preset="custom", layer_filter="attn,atention"), CPU)


def test_onetrainers_qwen_finetune_preset_trains_the_transformer_blocks_only():
    """OneTrainer's `#qwen Finetune 16GB` sets the layer filter to the transformer blocks: its
    embedders and final layers stay frozen (they trained here too before)."""
    from pathlib import Path

    from ot_gradio.config.io import load_config
    from ot_gradio.models.registry import get_family

    preset = Path(__file__).parents[1] / "config" / "data" / "onetrainer-training-presets" / "QwenImage" / "#qwen Finetune 16GB.json"
    cfg = load_config(preset).config.model_copy(update={"base_model_name": "tiny:qwen-image"})
    model = get_family("QWEN").load("tiny:qwen-image")
    FineTuneMethod().setup(model, cfg, CPU)
    trained = {n for n, p in model.transformer.named_parameters() if p.requires_grad}
    assert trained and all(n.startswith("transformer_blocks.") for n in trained)
    assert trained == {n for n in dict(model.transformer.named_parameters()) if n.startswith("transformer_blocks.")}


def test_full_trains_every_weight_and_a_preset_the_model_lacks_takes_the_filter():
    """'full' is OneTrainer's blank filter, even where a LoRA's "full" table lists layer kinds (Sana,
    Würstchen); a preset name of OneTrainer's page that this model type lacks takes the filter."""
    from ot_gradio.training.lora import filter_entries

    model = tiny_model()
    model.lora_layer_presets = {"unet": {"full": ["attentions"]}}  # as Sana's and Würstchen's LoRA tables
    FineTuneMethod().setup(model, config(layer_filter_preset="full"), CPU)
    assert all(p.requires_grad for p in model.unet.parameters())
    assert filter_entries("down-blocks", "down_blocks", False, {"full": []}) == (["down_blocks"], False)
    with pytest.raises(ValueError, match="Unknown layer preset 'down-blocks'"):
        filter_entries("down-blocks", "", False, {"full": []})
