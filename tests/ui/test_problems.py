"""Refusals on the page name the tab and the label the user sees, not the config key."""

import pytest

from ot_gradio.ui.problems import on_screen

CONFIG = {"concepts": [{"name": "mycat"}, {"name": ""}], "samples": [{"prompt": "a red circle"}]}


@pytest.mark.parametrize(("problem", "shown"), [
    ("batch_size: must be >= 1 (got 0)", "Training → Batch size: must be >= 1 (got 0)"),
    ("concepts[0].path: folder '/x' does not exist", "Concepts → Concept 1 'mycat' → Folder: folder '/x' does not exist"),
    ("concepts[1].image.enable_crop_jitter: must be true or false", "Concepts → Concept 2 → Crop jitter: must be true or false"),
    ("samples[0].width: must be >= 64", "Sampling → Sample 1 'a red circle' → Width: must be >= 64"),
    ("unet.learning_rate: must be a number", "Training → UNet → Learning rate: must be a number"),
    ("optimizer.beta1: must be a number", "Training → Optimizer settings → Beta1: must be a number"),
    ("base_model_name: empty; enter a Hugging Face id", "Model → Base model: empty; enter a Hugging Face id"),
    ("force_v_prediction / force_epsilon_prediction: flow-matching models predict the velocity",
     "Training → Force v-prediction / Training → Force epsilon prediction: flow-matching models predict the velocity"),
    # not a field: shown as it is
    ("Model type X is not supported: choose another", "Model type X is not supported: choose another"),
    ("no_such_key: text", "no_such_key: text"),
])
def test_a_problem_names_the_tab_and_label(problem, shown):
    assert on_screen(problem, CONFIG) == shown
