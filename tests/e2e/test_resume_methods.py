"""Continue from last backup with FINE_TUNE (the backup holds the whole trained UNet and text
encoder) and EMBEDDING (the vectors): the resumed run ends with the same weights as one that
never stopped."""

import pytest
import torch

from ot_gradio.config.io import load_config
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer


class StopAt(Reporter):
    def __init__(self, step=None):
        self.step = step
        self.global_step = 0
        self.statuses = []

    def metrics(self, **fields):
        self.global_step = fields["global_step"]

    def status(self, status, message=""):
        self.statuses.append((status, message))

    def requests(self):
        return {"stop"} if self.step is not None and self.global_step >= self.step else set()


def _run(config, run, reporter, others=()):
    trainer = Trainer(config, RunPaths(run / "samples", run / "backup", run / "save", None, [run, *others]), reporter)
    trainer.setup()
    return trainer, trainer.train()


@pytest.mark.parametrize(
    "method",
    [
        {"training_method": "FINE_TUNE", "output_model_format": "ORIGINAL_SINGLE_FILE", "learning_rate": 1e-4},
        {"training_method": "EMBEDDING", "output_model_format": "SAFETENSORS", "learning_rate": 0.05,
         "embedding": {"token_count": 2}, "additional_embeddings": [{"placeholder": "<b>"}]},
    ],
    ids=["FINE_TUNE", "EMBEDDING"],
)
def test_stopped_run_resumes_to_the_same_weights(lora_config, tmp_path, method):
    data = lora_config(samples=[], epochs=2, backup_before_save=False, **method)
    config = load_config(data).config

    straight, status = _run(config, tmp_path / "straight", StopAt())
    assert status == "done"
    first, status = _run(config, tmp_path / "a", StopAt(step=3))
    assert status == "stopped" and first.counters.global_step == 3
    report = StopAt()
    second, status = _run(load_config({**data, "continue_last_backup": True}).config, tmp_path / "b", report, others=[tmp_path / "a"])
    assert status == "done" and any("continuing from backup" in m for _, m in report.statuses)
    assert second.counters.global_step == straight.counters.global_step

    # the configs were loaded separately, so the embeddings' uuids differ: keys without them
    def state(trainer):
        return {".".join(k.split(".")[:2] + k.split(".")[3:]) if k.startswith("embedding.") else k: v
                for k, v in trainer.method.trainable_state(trainer.model).items()}

    a, b = state(straight), state(second)
    assert a.keys() == b.keys()
    if method["training_method"] == "FINE_TUNE":
        assert {k.split(".", 1)[0] for k in a} == {"unet", "text_encoder"}
        assert len(a) == len(straight.model.unet.state_dict()) + len(straight.model.text_encoder.state_dict())
    else:
        assert len(a) == 2  # the embedding and the additional one
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"resumed run differs from the uninterrupted one in {different[:3]}"
    stopped = state(first)
    assert any(not torch.equal(stopped[k], a[k]) for k in a)  # the stop came before the end
