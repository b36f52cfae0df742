"""The page's layout: fields in titled groups (ui/layout.py), the run bar and the Run tab."""

from ot_gradio.runner.supervisor import RunState
from ot_gradio.ui.form import schema_fields
from ot_gradio.ui.layout import group_open, group_paths
from ot_gradio.ui.monitor import bar_markdown, loss_frame
from ot_gradio.ui.visibility import part_of


def test_every_training_field_is_in_exactly_one_group_in_onetrainers_grouping():
    # the fields the page groups: not a model part's (those have their own accordions), not the optimizer's
    paths = [f.path for f in schema_fields(tab="training") if not part_of(f.path) and not f.path.startswith("optimizer.")]
    groups = group_paths(paths)
    flat = [p for _, items in groups for p in items]
    assert sorted(flat) == sorted(paths)
    titles = dict(groups)
    assert "learning_rate" in titles["Learning rate"] and "batch_size" in titles["Epochs and batches"]
    assert titles["EMA"] == ["ema", "ema_decay", "ema_update_step_interval"]
    assert "masked_training" in titles["Masked training"]
    assert "timestep_distribution" in titles["Timestep distribution"] and "offset_noise_weight" in titles["Noise"]
    assert "mse_strength" in titles["Loss"]
    assert not titles.get("")  # no training field left ungrouped
    assert [t for t, _ in groups] == TRAINING_GROUPS  # a misspelt heading would make a group of its own


TRAINING_GROUPS = ["Learning rate", "Layers", "Epochs and batches", "EMA", "Precision and speed", "Video clips", "Loss", "Noise",
                   "Timestep distribution", "Masked training", "kohya's noise options"]


def test_only_groups_onetrainer_keeps_behind_a_button_start_closed():
    # OneTrainer opens the timestep distribution and the optimizer's parameters in windows of their own;
    # kohya's noise options are none of OneTrainer's
    closed = [t for t in TRAINING_GROUPS if not group_open("training", t)]
    assert closed == ["Timestep distribution", "kohya's noise options"]
    assert group_open("training", "Loss") and group_open("training", "Masked training")
    assert group_open("general", "anything")


def test_settings_of_a_feature_that_is_off_are_hidden_until_it_is_on():
    from ot_gradio.ui.visibility import applies

    off = {"ema": "OFF", "huber_strength": 0.0, "loss_weight_fn": "CONSTANT", "offset_noise_weight": 0.0, "masked_training": False}
    hidden = ["ema_decay", "ema_update_step_interval", "huber_delta", "loss_weight_strength", "generalized_offset_noise",
              "unmasked_probability", "unmasked_weight", "normalize_masked_area_loss"]
    assert not [p for p in hidden if applies(p, off)]
    on = {"ema": "GPU", "huber_strength": 0.5, "loss_weight_fn": "MIN_SNR_GAMMA", "offset_noise_weight": 0.1, "masked_training": True}
    assert [p for p in hidden if applies(p, on)] == hidden
    assert not applies("loss_weight_strength", {"loss_weight_fn": "DEBIASED_ESTIMATION"})  # it has no gamma
    assert applies("huber_delta", {"huber_strength": None})  # blank: kept in view


def test_tabs_without_groups_keep_one_untitled_group_in_order():
    assert group_paths(["b", "a"]) == [("", ["b", "a"])]
    assert group_paths(["b", "ema", "a", "epochs"]) == [("", ["b", "a"]), ("EMA", ["ema"]), ("Epochs and batches", ["epochs"])]


def test_the_run_bar_shows_status_step_eta_and_smoothed_loss():
    assert "No run yet" in bar_markdown(None)
    state = RunState("r", status="training")
    state.progress = {"phase": "training", "global_step": 7, "total_steps": 20, "eta_s": 13.2}
    state.losses = [(1, 1.0), (2, 0.0)]
    line = bar_markdown(state)
    assert "training" in line and "step 7/20" in line and "ETA 13 s" in line
    assert "loss 0.9000 (smoothed)" in line  # 0.9 * 1.0 + 0.1 * 0.0


def test_the_run_bar_shows_a_first_runs_download_while_the_model_loads():
    state = RunState("r")
    state.apply({"type": "status", "status": "loading", "message": "loading big/model: 3.2 GB downloaded, 45.0 MB/s",
                 "download": "3.2 GB downloaded, 45.0 MB/s"})
    assert bar_markdown(state) == "**loading** · 3.2 GB downloaded, 45.0 MB/s"
    state.apply({"type": "status", "status": "loading", "message": "loading big/model: downloaded 6.9 GB in 150 s"})
    assert bar_markdown(state) == "**loading**"


def test_a_stopped_run_shows_no_eta():
    """After Stop the last progress event still holds an ETA; the bar and the Run tab drop it."""
    from ot_gradio.ui.monitor import status_markdown

    for status in ("stopped", "done", "error", "crashed"):
        state = RunState("r", status=status)
        state.progress = {"phase": "training", "global_step": 34, "total_steps": 60, "eta_s": 40.0, "it_s": 2}
        assert "step 34/60" in bar_markdown(state) and "ETA" not in bar_markdown(state), status
        assert "ETA" not in status_markdown(state), status


def test_validation_losses_are_drawn_beside_the_training_loss():
    state = RunState("r")
    state.losses = [(1, 0.5), (2, 0.4)]
    frame = loss_frame(state, [(2, 0.45)])
    assert list(frame["series"]) == ["loss", "smoothed", "loss", "smoothed", "validation"]
    assert frame["loss"].dtype == "float64" and frame["step"].dtype == "float64"
    assert frame[frame["series"] == "validation"]["loss"].tolist() == [0.45]
