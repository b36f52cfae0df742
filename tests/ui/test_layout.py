"""The page's layout: fields in titled groups (ui/layout.py), the run bar and the Run tab."""

from ot_gradio.runner.supervisor import RunState
from ot_gradio.ui.form import schema_fields
from ot_gradio.ui.layout import GROUPS, group_paths
from ot_gradio.ui.monitor import bar_markdown, loss_frame
from ot_gradio.ui.visibility import part_of


def test_every_training_field_is_in_exactly_one_group_in_onetrainers_grouping():
    # the fields the page groups: not a model part's (those have their own accordions), not the optimizer's
    paths = [f.path for f in schema_fields(tab="training") if not part_of(f.path) and not f.path.startswith("optimizer.")]
    groups = group_paths("training", paths)
    flat = [p for _, items in groups for p in items]
    assert sorted(flat) == sorted(paths)
    titles = dict(groups)
    assert "learning_rate" in titles["Schedule and batches"] and "batch_size" in titles["Schedule and batches"]
    assert "masked_training" in titles["Masked training"]
    assert "timestep_distribution" in titles["Noise and timesteps"]
    assert "mse_strength" in titles["Loss"]
    assert not titles.get("")  # no training field left ungrouped
    assert [t for t, _ in groups] == [t for t, _ in GROUPS["training"]]


def test_tabs_without_groups_keep_one_untitled_group_in_order():
    assert group_paths("backup", ["b", "a"]) == [("", ["b", "a"])]


def test_the_run_bar_shows_status_step_eta_and_smoothed_loss():
    assert "No run yet" in bar_markdown(None)
    state = RunState("r", status="training")
    state.progress = {"phase": "training", "global_step": 7, "total_steps": 20, "eta_s": 13.2}
    state.losses = [(1, 1.0), (2, 0.0)]
    line = bar_markdown(state)
    assert "training" in line and "step 7/20" in line and "ETA 13 s" in line
    assert "loss 0.9000 (smoothed)" in line  # 0.9 * 1.0 + 0.1 * 0.0


def test_validation_losses_are_drawn_beside_the_training_loss():
    state = RunState("r")
    state.losses = [(1, 0.5), (2, 0.4)]
    frame = loss_frame(state, [(2, 0.45)])
    assert list(frame["series"]) == ["loss", "smoothed", "loss", "smoothed", "validation"]
    assert frame["loss"].dtype == "float64" and frame["step"].dtype == "float64"
    assert frame[frame["series"] == "validation"]["loss"].tolist() == [0.45]
