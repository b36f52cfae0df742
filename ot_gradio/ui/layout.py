"""How a tab's plain fields are grouped on the page: titled groups (OneTrainer's grouping of the
Training tab), each laid out by the page's CSS grid (`.ot-grid`) in 2-3 columns on a wide screen
and one on a phone. Gradio-free and torch-free, so it is tested on its own."""

from __future__ import annotations

from collections.abc import Sequence

# The schema's tabs (a field's `tab=`) as the page titles them, in the page's order
TAB_TITLES = {"general": "General", "model": "Model", "data": "Data", "training": "Training", "sampling": "Sampling",
              "backup": "Backup", "lora": "LoRA", "embedding": "Embedding", "concepts": "Concepts"}

# (title, path prefixes) in the order shown; a field goes to the first group whose prefix it has
GROUPS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "training": (
        ("Learning rate", ("learning_rate", "custom_learning_rate_scheduler", "scheduler_params")),
        ("Epochs and batches", ("epochs", "batch_size", "gradient_accumulation_steps", "clip_grad_norm")),
        ("EMA", ("ema",)),
        ("Precision and speed", ("train_dtype", "enable_autocast_cache", "resolution", "attention_mechanism")),
        ("Loss", ("mse_strength", "mae_strength", "log_cosh_strength", "huber_", "vb_loss_strength", "loss_weight_")),
        ("Noise", ("offset_noise_weight", "generalized_offset_noise", "perturbation_noise_weight",
                   "rescale_noise_scheduler", "force_v_prediction", "force_epsilon_prediction")),
        ("Timestep distribution", ("min_noising_strength", "max_noising_strength", "timestep_", "noising_",
                                   "dynamic_timestep_shifting")),
        ("Masked training", ("masked_training", "unmasked_", "normalize_masked_area_loss")),
    ),
}

# Groups that start closed: only those OneTrainer also keeps out of its Training tab, behind a
# "..." button that opens a window of their own (the timestep distribution's settings; the
# optimizer's own parameters, see OPTIMIZER_SETTINGS). Everything else starts open.
CLOSED = {"training": {"Timestep distribution"}}
OPTIMIZER_SETTINGS = "Optimizer settings"  # the chosen optimizer's parameters: OneTrainer's "..." window beside the optimizer


def group_open(tab: str, title: str) -> bool:
    """Whether a titled group of `tab` starts open."""
    return title not in CLOSED.get(tab, set())


def group_paths(tab: str, paths: Sequence[str]) -> list[tuple[str, list[str]]]:
    """[(title, paths)] for `paths` of `tab`, in their order within each group; fields no group
    names come first under "" (untitled). Every path is in exactly one group."""
    groups = GROUPS.get(tab, ())
    out: dict[str, list[str]] = {"": []}
    for title, _ in groups:
        out[title] = []
    for path in paths:
        title = next((t for t, prefixes in groups if any(path.startswith(p) for p in prefixes)), "")
        out[title].append(path)
    return [(title, items) for title, items in out.items() if items]
