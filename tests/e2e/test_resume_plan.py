"""Continue from a backup written by a version with another data plan (data/plan_version.py): a
backup stopped inside an epoch says that the rest of that epoch is drawn by this version's plan;
one of this version, or one at an epoch's end, continues silently."""

import json
import shutil

from ot_gradio.config.io import load_config
from ot_gradio.data.plan_version import PLAN_VERSION
from ot_gradio.fsutil import BACKUP_MARKER
from ot_gradio.training.backup import complete_backups, marker_plan
from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

SAID = "is drawn by this version's plan"


class Watch(Reporter):
    """Asks for a backup after step `backup_at` and stops after step `stop_at`."""

    def __init__(self, backup_at=None, stop_at=None):
        self.backup_at, self.stop_at, self.global_step, self.warnings = backup_at, stop_at, 0, []

    def metrics(self, **fields):
        self.global_step = fields["global_step"]

    def warning(self, message):
        self.warnings.append(message)

    def requests(self):
        if self.stop_at is not None and self.global_step >= self.stop_at:
            return {"stop"}
        return {"backup"} if self.global_step == self.backup_at else set()


def _only(backup, folder, plan=True):
    """A run folder holding only `backup` (its marker without the plan version: a backup of a
    version before markers held it)."""
    copy = folder / "backup" / backup.name
    shutil.copytree(backup, copy)
    if not plan:
        marker = json.loads((copy / BACKUP_MARKER).read_text())
        del marker["plan"]
        (copy / BACKUP_MARKER).write_text(json.dumps(marker))
    return folder


def test_a_backup_of_an_older_plan_inside_an_epoch_says_so_naming_the_epoch(lora_config, tmp_path):
    data = lora_config(samples=[], epochs=2, backup_before_save=False, backup_after=1, backup_after_unit="EPOCH")
    run = tmp_path / "a"
    first = Trainer(load_config(data).config, RunPaths(run / "samples", run / "backup", run / "save", None, [run]), Watch())
    first.setup()
    steps = first.dataset.steps_in_epoch(0)
    assert steps >= 2
    # backups at the last batch of epoch 1 (asked), at its end (Backup every epoch), one batch into epoch 2 (Stop)
    first.report.backup_at, first.report.stop_at = steps, steps + 1
    assert first.train() == "stopped"
    backups = {tuple(json.loads((b / BACKUP_MARKER).read_text())[k] for k in ("epoch", "epoch_step")): b
               for b in complete_backups(run / "backup")}
    assert set(backups) == {(0, steps), (1, 0), (1, 1)}
    assert all(marker_plan(b) == PLAN_VERSION for b in backups.values())

    def resumed(backup, name, plan):  # the resume's warnings are said in setup, before a step
        report, run = Watch(), tmp_path / name
        trainer = Trainer(load_config({**data, "continue_last_backup": True}).config,
                          RunPaths(run / "samples", run / "backup", run / "save", None, [run, _only(backup, run / "old", plan)]), report)
        trainer.setup()
        marker = json.loads((backup / BACKUP_MARKER).read_text())
        assert {k: marker[k] for k in ("epoch", "epoch_step", "global_step")} == trainer.counters.as_dict()  # it resumed
        return [w for w in report.warnings if SAID in w]

    said = resumed(backups[1, 1], "older", plan=False)
    assert len(said) == 1 and "stopped 1 batch(es) into epoch 2" in said[0], said
    assert "The rest of epoch 2 is drawn by this version's plan, so some of its images may train twice and others not at all" in said[0]
    assert "aspect bucketing on" in said[0] and "later epochs are unaffected" in said[0]
    assert resumed(backups[1, 1], "current", plan=True) == []
    assert resumed(backups[1, 0], "boundary", plan=False) == []
    assert resumed(backups[0, steps], "last-batch", plan=False) == []
