"""Every preset OneTrainer ships for a model type we train (tests/config/data/onetrainer-training-presets,
stored unchanged), and each of our own presets (presets/), imported unchanged and trained for one
step on the family's tiny model, in this process, then one sample made: only the base model (and Würstchen's / Stable Cascade's decoder and
EffNet models), the dataset, the output, the run's size (64 px, one epoch of one batch) and the
sample are set. The presets' own data types, quantization, optimizers, layer filters, offloading
and compile stay as shipped, and the parts load in their data types and FLOAT_16 computes in
float16, as on a GPU (tests/gpu_types.py: a CPU run loads all in float32, where the types of the
parts always agree).

torch.compile runs with dynamo's "eager" backend (dynamo traces the model and runs its graphs,
without inductor's C++ build, which takes minutes on a CPU); offloading has nothing to move on the
CPU (offload.py), so the last test forces it, as on a GPU, for the 8 GB preset pairing it with compile.
"""

from __future__ import annotations

import functools
import math
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from ot_gradio.training.quantize import LinearW8A8
from tests.config.test_onetrainer_shipped_presets import PRESETS, TINY, TRAINED, preset_id
from tests.gpu_types import as_on_a_gpu
from tests.models.test_transformer_file import hub_cached

pytestmark = pytest.mark.slow

COMPANIONS = {"QWEN_IMAGE_EDIT": "control", "FLUX_FILL_DEV_1": "masklabel"}  # the files beside each image these models train on
OURS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("*.json"))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """model type -> its tiny model's folder, each built once on first use."""
    from ot_gradio.models.tiny import all_tiny_models

    tiny = all_tiny_models()
    root, built = tmp_path_factory.mktemp("tiny-presets"), {}

    def get(model_type: str) -> Path:
        if model_type not in built:
            name = TINY[model_type]
            built[model_type] = tiny[f"tiny:{name}"][1](root / name).diffusers_dir
        return built[model_type]

    return get


@pytest.fixture(scope="session")
def batches(shapes, tmp_path_factory):
    """batch size -> a folder of that many copies of one image (one bucket: one batch, one step)."""
    root, made = tmp_path_factory.mktemp("preset-batches"), {}

    def get(size: int, companion: str = "") -> Path:
        """`companion`: each image with that file beside it: `control` (an editing model's pairs:
        another image) or `masklabel` (a fill model's masks: all white, all filled)."""
        if (size, companion) not in made:
            folder = root / f"{size}-{companion}"
            folder.mkdir()
            for i in range(size):
                for suffix in (".png", ".txt"):
                    shutil.copy(shapes / f"01-red-circle{suffix}", folder / f"{i:02d}{suffix}")
                if companion == "control":
                    shutil.copy(shapes / "02-blue-square.png", folder / f"{i:02d}-control.png")
                elif companion == "masklabel":
                    Image.new("RGB", (64, 64), (255, 255, 255)).save(folder / f"{i:02d}-masklabel.png")
            made[(size, companion)] = folder
        return made[(size, companion)]

    return get


def pointed_at(path: Path, tiny_models, batches, tmp_path: Path) -> dict:
    from ot_gradio.config.io import config_to_dict, load_config

    config = config_to_dict(load_config(path).config)
    base = tiny_models(config["model_type"])
    data = batches(config["batch_size"], COMPANIONS.get(config["model_type"], ""))
    config.update(base_model_name=str(base), concepts=[{"name": "c", "path": str(data)}],
                  output_model_destination=str(tmp_path / "out" / "model"), workspace_dir=str(tmp_path / "ws"),
                  cache_dir=str(tmp_path / "cache"), train_device="cpu", resolution="64", epochs=1,
                  samples=[{"prompt": "a red circle", "height": 64, "width": 64, "diffusion_steps": 2}],
                  sample_after=1, sample_after_unit="EPOCH")
    if config["model_type"] == "WUERSTCHEN_2":
        config["decoder"]["model_name"], config["effnet_encoder"]["model_name"] = str(base.parent / "decoder"), str(base.parent / "effnet")
    if config["model_type"] == "STABLE_CASCADE_1":  # the preset says "TODO: MANUALLY DOWNLOAD EFFNET WEIGHTS"
        config["decoder"]["model_name"] = str(base.parent / "decoder")
        config["effnet_encoder"]["model_name"] = str(base.parent / "decoder" / "effnet_encoder.safetensors")
    if config["text_encoder_4"]["model_name"]:  # HiDream's Llama 3.1, a repo of its own: model and tokenizer files together
        for part in ("text_encoder_4", "tokenizer_4"):
            shutil.copytree(base / part, tmp_path / "llama", dirs_exist_ok=True)
        config["text_encoder_4"]["model_name"] = str(tmp_path / "llama")
    if config["transformer"]["model_name"]:  # the DeTurbo presets' hub file address, read from the hub cache offline
        cache = hub_cached(tmp_path / "hub", config["transformer"]["model_name"], next(base.parent.glob("*transformer.safetensors")))
        config.update(huggingface_cache_dir=str(cache), offline_mode=True)
    return config


class Collect:
    def __init__(self):
        self.statuses, self.losses = [], []

    def status(self, state, message=""):
        self.statuses.append(message)

    def metrics(self, **fields):
        if "loss" in fields:
            self.losses.append(fields["loss"])

    def __getattr__(self, name):  # the Reporter's other news is not looked at
        return lambda *a, **k: set() if name == "requests" else None


def train(config: dict, tmp_path: Path, report: Collect):
    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import load_config
    from ot_gradio.training.trainer import RunPaths, Trainer

    loaded = load_config(config).config
    assert errors(loaded) == []
    run = tmp_path / "run"
    trainer = Trainer(loaded, RunPaths(run / "samples", run / "backup", run / "save", None, []), report)
    trainer.setup()
    return trainer, trainer.train()


@pytest.fixture(scope="module")
def eager_compile():
    """For the whole module, so that dynamo traces each family's blocks once, not once per preset;
    the parts in their data types, as on a GPU."""
    with pytest.MonkeyPatch.context() as patch, as_on_a_gpu():
        patch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
        yield
    torch._dynamo.reset()  # later tests start without this module's compiled code


@pytest.mark.parametrize("path", TRAINED + OURS, ids=lambda p: preset_id(p) if p in TRAINED else f"ours/{p.stem}")
def test_a_shipped_preset_trains_one_step_on_a_tiny_model(path, tiny_models, batches, tmp_path, eager_compile):
    config = pointed_at(path, tiny_models, batches, tmp_path)
    report = Collect()
    trainer, status = train(config, tmp_path, report)
    assert status == "done"
    assert len(report.losses) == 1 and math.isfinite(report.losses[0])
    assert [p.name for p in (tmp_path / "out").iterdir()]  # the trained model or LoRA, however its format names it
    assert [p for p in (tmp_path / "run" / "samples").rglob("*") if p.is_file()]  # the sample, made with the parts' own types
    assert trainer.memory_plan.probe_error == ""  # the memory planner measured the step (in the run's types too)
    denoiser = trainer.model.parts[trainer.model.denoiser]
    denoiser = denoiser.get_base_model() if hasattr(denoiser, "get_base_model") else denoiser
    assert (denoiser._compiled_call_impl is not None) is config["compile"]
    for part, module in trainer.model.parts.items():  # the INT_W8A8 presets multiply in 8 bits (on the CPU too)
        if config[part]["weight_dtype"] in ("INT_W8A8", "FLOAT_W8A8"):
            assert any(isinstance(m, LinearW8A8) and m.kernel for m in module.modules()), part



@pytest.mark.parametrize(("preset", "train_dtype", "trains"), [
    ("Chroma/#chroma Finetune 16GB.json", "FLOAT_16", True), ("Z-Image/#z-image Finetune 16GB.json", "FLOAT_16", True),
    ("QwenImage/#qwen Finetune 16GB.json", "FLOAT_16", False), ("Ideogram 4/#ideogram Finetune 16GB.json", "FLOAT_32", True)])
def test_a_bfloat16_fine_tune_preset_in_another_train_type_trains_or_says_which_fields_to_change(
        preset, train_dtype, trains, tiny_models, batches, tmp_path, eager_compile):
    """OneTrainer's fine-tune presets (BFLOAT_16 transformer) with another train_dtype. FLOAT_16, as
    on a card without bfloat16: the transformer gets its inputs in the autocast's type, as OneTrainer
    gives them in the train type (in the weights' bfloat16, Chroma and Z-Image concatenated them
    under the float16 autocast, which it refuses); where the model itself makes bfloat16 tensors
    from its weights (Qwen-Image's RMS norms), the run stops with the fields to change, not torch's
    words. FLOAT_32: Ideogram 4's NFLOAT_4 unconditional transformer, loaded in the transformer's
    bfloat16, has its other weights in the float32 its quantized layers compute in (its sample
    failed)."""
    from ot_gradio.training.preflight import TrainingError

    config = pointed_at(PRESETS / preset, tiny_models, batches, tmp_path)
    assert config["train_dtype"] == "BFLOAT_16" and config["transformer"]["weight_dtype"] == "BFLOAT_16"
    config["train_dtype"] = train_dtype
    report = Collect()
    if trains:
        assert train(config, tmp_path, report)[1] == "done" and math.isfinite(report.losses[0])
        assert [p for p in (tmp_path / "run" / "samples").rglob("*") if p.is_file()]
    else:
        with pytest.raises(TrainingError, match=r"train_dtype FLOAT_16 with transformer.weight_dtype BFLOAT_16: .* Set "
                                                r"transformer.weight_dtype to FLOAT_16, or train_dtype to BFLOAT_16"):
            train(config, tmp_path, report)

def test_the_8gb_preset_with_compile_and_offloading_compiles_block_by_block_as_on_a_gpu(
        tiny_models, batches, tmp_path, eager_compile, monkeypatch):
    """z-image LoRA 8GB: compile with transformer.offload_fraction 0.6. Offloading is forced in
    (CPU to CPU), so the trainer compiles the transformer's blocks that stay and leaves the
    offloaded ones uncompiled, and the step trains."""
    from ot_gradio.training import offload

    real = offload.install_offloading
    monkeypatch.setattr(offload, "install_offloading", lambda model, cfg, device, **kw: real(model, cfg, device, force=True))
    config = pointed_at(PRESETS / "Z-Image" / "#z-image LoRA 8GB.json", tiny_models, batches, tmp_path)
    assert config["compile"] and config["transformer"]["offload_fraction"] == 0.6
    report = Collect()
    trainer, status = train(config, tmp_path, report)
    assert status == "done" and len(report.losses) == 1 and math.isfinite(report.losses[0])
    (part,) = trainer.layer_offload
    blocks = offload.find_blocks(trainer.model.parts["transformer"])
    offloaded = {id(b.block) for b in part.blocks}
    assert 0 < len(offloaded) < len(blocks)
    assert [b._compiled_call_impl is not None for b in blocks] == [id(b) not in offloaded for b in blocks]
    assert all(b.loads >= 2 for b in part.blocks)  # moved in for the forward and the recomputation
    assert any(m.startswith(f"compile: {len(blocks) - len(offloaded)} of {len(blocks)} transformer blocks") for m in report.statuses)
