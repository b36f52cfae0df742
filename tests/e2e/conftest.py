
import pytest


@pytest.fixture(scope="session")
def shapes(tmp_path_factory):
    from ot_gradio.data import ensure_demo_dataset

    return ensure_demo_dataset(tmp_path_factory.mktemp("data") / "shapes")


@pytest.fixture
def lora_config(tiny_model, shapes, tmp_path):
    """A tiny SD 1.5 LoRA run: ~20 optimizer steps on CPU."""

    def make(**overrides):
        base = {
            "model_type": "STABLE_DIFFUSION_15",
            "training_method": "LORA",
            "base_model_name": str(tiny_model.diffusers_dir),
            "train_device": "cpu",
            "train_dtype": "FLOAT_32",
            "workspace_dir": str(tmp_path / "ws"),
            "cache_dir": str(tmp_path / "cache"),
            "output_model_destination": str(tmp_path / "out" / "lora.safetensors"),
            "output_model_format": "KOHYA_LORA",
            "concepts": [{"name": "shapes", "path": str(shapes)}],
            "resolution": "64",
            "batch_size": 2,
            "epochs": 4,
            "learning_rate": 1e-3,
            "learning_rate_warmup_steps": 0,
            "lora_rank": 4,
            "lora_alpha": 4,
            "text_encoder": {"train": True},
            "unet": {"train": True, "gradient_checkpointing": False},
            "samples": [{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2}],
            "sample_after": 0,
            "sample_after_unit": "NEVER",
            "backup_after": 0,
            "backup_after_unit": "NEVER",
            "tensorboard": True,
        }
        base.update(overrides)
        return base

    return make
