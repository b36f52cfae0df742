"""The data plan's version: which of its changes can matter for a config, and the resume's warning
for a backup of another version (training/resume_plan.py), from the config alone."""

from ot_gradio.config.io import load_config
from ot_gradio.data.plan_version import HISTORY, PLAN_VERSION, changes_since, plan_of
from ot_gradio.training.backup import Counters
from ot_gradio.training.resume_plan import plan_warnings


def _config(concepts=({},), **over):
    return {"concepts": [{"path": "/data/a", **c} for c in concepts], **over}


def _versions(since, *configs):
    return [c.version for c in changes_since(since, configs)]


def test_the_history_ends_at_the_current_version_one_line_each():
    assert [c.version for c in HISTORY] == list(range(1, PLAN_VERSION + 1)) and PLAN_VERSION == 3
    assert all(c.what and c.affects for c in HISTORY)


def test_a_marker_without_a_plan_is_older_than_every_change():
    assert plan_of({"global_step": 3}) == plan_of(None) == plan_of({"plan": "3"}) == plan_of({"plan": True}) == 0
    assert plan_of({"plan": 2}) == 2


def test_only_the_changes_a_config_can_meet_count():
    # the defaults: aspect bucketing on, REPEATS 1.0, one image variation
    assert _versions(0, _config()) == [1]
    assert _versions(0, _config(aspect_ratio_bucketing=False)) == []
    assert _versions(0, _config(aspect_ratio_bucketing=False, bucket_resolution_step=64)) == []
    # whole REPEATS draw the lists earlier versions drew; a fraction or SAMPLES does not
    assert _versions(0, _config([{"balancing": 3.0}], aspect_ratio_bucketing=False)) == []
    assert _versions(0, _config([{"balancing": 1.5}], aspect_ratio_bucketing=False)) == [2]
    assert _versions(0, _config([{"balancing": 4, "balancing_strategy": "SAMPLES"}], aspect_ratio_bucketing=False)) == [2]
    # image variations matter with latent caching, text variations always, where an image is not shown once an epoch
    varied = _config([{"image_variations": 3, "balancing": 2.0}], aspect_ratio_bucketing=False)
    assert _versions(0, varied) == [3]
    assert _versions(0, {**varied, "latent_caching": False}) == []
    assert _versions(0, _config([{"image_variations": 3}], aspect_ratio_bucketing=False)) == []
    assert _versions(0, _config([{"image_variations": 1, "balancing": 2.0}], aspect_ratio_bucketing=False)) == []
    assert _versions(0, _config([{"text_variations": 2, "balancing": 3.0}], aspect_ratio_bucketing=False, latent_caching=False)) == [3]
    assert _versions(0, _config([{"image_variations": 2, "balancing": 0.5}], aspect_ratio_bucketing=False)) == [2, 3]
    # a disabled concept is not drawn; a change after the backup's version only
    assert _versions(0, _config([{"balancing": 0.5, "enabled": False}], aspect_ratio_bucketing=False)) == []
    assert _versions(2, _config([{"image_variations": 2, "balancing": 1.5}])) == [3]
    # the backup's settings or the run's: either may have been drawn by the other plan
    assert _versions(0, _config(aspect_ratio_bucketing=False), _config()) == [1]


def _warnings(plan, old, counters, epochs=4, steps=None, **over):
    config = load_config({**old, "epochs": epochs, **over}).config
    return plan_warnings(plan, old, config, counters, steps)


def test_the_warning_names_the_epoch_and_the_changes_that_matter():
    old = _config([{"balancing": 1.5}])
    said = _warnings(0, old, Counters(epoch=1, epoch_step=2, global_step=7))
    assert len(said) == 1, said
    assert "stopped 2 batch(es) into epoch 2" in said[0] and "The rest of epoch 2 is drawn by this version's plan" in said[0]
    assert "may train twice and others not at all this epoch; later epochs are unaffected" in said[0]
    assert "(aspect bucketing on)" in said[0] and "(fractional REPEATS or SAMPLES balancing)" in said[0]
    assert "cached image variation" not in said[0]
    assert "before backups recorded their data plan" in said[0]
    # a backup of version 1: the bucket change is its own already
    said = _warnings(1, old, Counters(epoch=1, epoch_step=2, global_step=7))
    assert "data plan 1; this version's is 3" in said[0] and "aspect bucketing on" not in said[0]


def test_nothing_is_said_where_the_resume_is_exact():
    old, mid = _config(), Counters(epoch=1, epoch_step=2, global_step=7)
    assert _warnings(PLAN_VERSION, old, mid) == []  # this version's plan
    assert _warnings(0, old, Counters(epoch=1, epoch_step=0, global_step=5)) == []  # an epoch boundary
    assert _warnings(0, old, mid, steps=lambda epoch: 2) == []  # the epoch's last batch
    assert _warnings(0, old, mid, steps=lambda epoch: 3)  # one batch left
    assert _warnings(0, old, Counters(epoch=4, epoch_step=1, global_step=21)) == []  # nothing left to train
    assert _warnings(0, _config(aspect_ratio_bucketing=False), mid) == []  # no change can matter


def test_a_backup_of_a_newer_version_is_said_without_guessing():
    said = _warnings(PLAN_VERSION + 1, _config(aspect_ratio_bucketing=False), Counters(epoch=0, epoch_step=1, global_step=1))
    assert len(said) == 1 and "newer version of this program (data plan 4" in said[0] and "epoch 1" in said[0]
