"""A tiny SD 1.5 LoRA run with MUON: the trainer hands the weights' names to the optimizer, so
Muon trains the layers the user names and the AdamW inside it the rest, and the LoRA moves."""

from ot_gradio.training.lora_format import load_lora_file
from ot_gradio.training.optimizers import parameter_names
from tests.e2e.test_training_options import Watch, run, two_images


def test_a_muon_run_splits_the_lora_by_layer_name_and_trains_it(lora_config, shapes, tmp_path):
    data = lora_config(
        concepts=[{"name": "two", "path": str(two_images(shapes, tmp_path / "two"))}],
        epochs=1, learning_rate=0.02, text_encoder={"train": False},
        optimizer={"optimizer": "MUON", "MuonWithAuxAdam": True, "muon_hidden_layers": "attn1", "muon_adam_lr": 1e-3},
    )
    trainer, status = run(data, tmp_path / "run", Watch())
    assert status == "done"
    names = parameter_names(trainer.model.parts)
    groups = {g["name"]: [names[id(p)] for p in g["params"]] for g in trainer.optimizer.param_groups}
    assert set(groups) == {"unet", "unet/adam"}
    assert groups["unet"] and all("attn1" in n for n in groups["unet"])
    assert groups["unet/adam"] and not any("attn1" in n for n in groups["unet/adam"])
    saved = load_lora_file(tmp_path / "out" / "lora.safetensors").parts["unet"]
    ups = {k: v for k, v in saved.items() if "lora_up" in k or "lora_B" in k}
    assert any("attn1" in k and v.abs().max() > 0 for k, v in ups.items())  # Muon's part moved
    assert any("attn1" not in k and v.abs().max() > 0 for k, v in ups.items())  # and the AdamW's
