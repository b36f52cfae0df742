"""The getting-started guide shown first: the workflow of OneTrainer's wiki ("Fluxo de
trabalho geral": prepare the environment, prepare the training, decide the model and training
details, the optimizer and method specifics, check the optimizer, then learning rate, epochs and
warmup), each step with a button that opens the tab where it is done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ..config.catalogue import offered
from ..config.enums import ModelType as M
from ..config.families import FAMILIES
from .visibility import tab_shown

TABS_ID = "tabs"


@dataclass(frozen=True)
class Step:
    title: str
    text: str
    tab: str  # the tab id the button opens
    button: str
    more: tuple[str, str] | None = None  # (label, Markdown) of a closed accordion below the step


# The preset in presets/ to start from for each model type the trainer implements, with what to
# know before using it (each family's description, config/family_info)
PRESETS: dict[M, tuple[str, str]] = {m: (info.preset, info.preset_note) for m, info in FAMILIES.items() if info.preset}


def presets_table() -> str:
    """A Markdown table: the preset to load for each model type the page offers."""
    rows = ["| Model type | Preset | Note |", "|---|---|---|"]
    for model_type in offered(M):
        name, note = PRESETS.get(model_type, ("", "no preset yet: start from the defaults"))
        rows.append(f"| {model_type.value} | {f'*{name}*' if name else '-'} | {note} |")
    return "\n".join(rows)


STEPS: tuple[tuple[str, tuple[Step, ...]], ...] = (
    ("Prepare the environment", (
        Step("Model type, method and preset",
             "Choose the model type and the training method in the top bar, then load a preset for them "
             "(*sd15-lora* for a LoRA on SD 1.5; *Presets per model type* below names one for each). **LORA** is the "
             "usual choice: small files that load everywhere. Coming from another trainer: *Import file* reads a "
             "OneTrainer, kohya_ss / sd-scripts, musubi-tuner, ai-toolkit, diffusion-pipe or SimpleTuner config and fills "
             "the form, saying what it could not carry over (give its path as *Config file* and *Load* instead, and the "
             "dataset files it names are read too).",
             "model", "Open Model", ("Presets per model type", presets_table())),
        Step("Base model",
             "Which model to start from: a hub id such as `stable-diffusion-v1-5/stable-diffusion-v1-5`, a local "
             "diffusers folder or a `.safetensors` file (*Browse* picks one), or a model's page address on Hugging "
             "Face or Civitai (downloaded once; Civitai wants *General → Civitai API key*). Models derived from a base "
             "(Pony, Illustrious, SDXL Lightning) train with their base's settings.",
             "model", "Open Model"),
        Step("Workspace folders",
             "Where runs keep samples, backups, logs and TensorBoard files, and where latents are cached.",
             "general", "Open General"),
    )),
    ("Prepare the training", (
        Step("Concepts",
             "Add a folder of images per concept. Captions come from a `.txt` file next to each image (one caption "
             "per line, one picked at random per epoch). Images on your own computer while the page trains on another "
             "machine (a share link, Colab): *Upload images…* sends them, or a .zip of the folder. Long videos: *Tools → "
             "Video* downloads them from their links (YouTube and the other sites yt-dlp knows) and cuts them into clips "
             "(video models) or takes frames as images. *Refresh statistics* "
             "checks every image is found and how they fall into aspect buckets.",
             "concepts", "Open Concepts"),
        Step("Samples",
             "Prompts rendered while training, at the model's native size (512 for SD 1.5, 1024 for SDXL).",
             "sampling", "Open Sampling"),
        Step("Saves and backups",
             "How often to write backups and intermediate saves; a stopped run continues from the last backup "
             "(*Continue from last backup* on the General tab).",
             "backup", "Open Backup"),
        Step("Where the result goes",
             "The output file and its format and data type.",
             "model", "Open Model"),
    )),
    ("Decide the model and training details", (
        Step("Weight data types",
             "Per part, in its section of the Training tab, from your VRAM and card: FLOAT_16/BFLOAT_16 halve the "
             "memory of the weights (the memory table on the Model tab adds it up). GTX 1000 cards and older have no BF16.",
             "training", "Open Training"),
        Step("Train data type, resolution, batch size",
             "Train at the model's native resolution. Each aspect bucket needs at least a batch of images or it is "
             "never trained; ideally the images of an epoch divide evenly by the batch size.",
             "training", "Open Training"),
    )),
    ("Optimizer and method", (
        Step("Optimizer and scheduler",
             "Pick the optimizer from your method and VRAM, then the learning-rate scheduler. Its settings show below "
             "it (the last ones used for each optimizer come back when you switch; *Load defaults* restores them).",
             "training", "Open Training"),
        Step("LoRA", "Rank, alpha and dropout of the LoRA (the tab shows for the LORA method).", "lora", "Open LoRA"),
        Step("Embedding", "The embedding's tokens (the tab shows for the EMBEDDING method).", "embedding", "Open Embedding"),
    )),
    ("Learning rate, epochs, warmup", (
        Step("Learning rate and length",
             "Learning rate for your method and optimizer (LoRA on SD 1.5: 3e-4 with AdamW), the number of epochs and "
             "the warmup steps; then whether and how long to train the text encoder(s) and the UNet, each with its "
             "own learning rate. The plot shows the learning rate over the whole run.",
             "training", "Open Training"),
    )),
)

INTRO = "## Start here\n\nSet up a run in this order; each button opens the tab where the step is done."
OUTRO = (
    "Then press **Start training** in the run bar at the top: the Run tab shows the loss, the samples and the "
    "progress; *Stop* finishes the step, writes a backup and the model.\n\nNo model at hand? Choose the **demo** "
    "preset in the top bar and press *Start training*: it trains a LoRA on a tiny model and a generated dataset on "
    "the CPU (50 steps: under a minute on a 2-core machine, longer the first time, when it builds them, or when the "
    "machine is busy)."
)


def go_to(tab: str, config: dict[str, Any] | None = None) -> Any:
    """The Tabs update that opens `tab`; a tab hidden for the chosen method stays closed, with a
    note saying why."""
    method = (config or {}).get("training_method")
    if method and not tab_shown(tab, method):
        gr.Warning(f"The {tab} tab is shown only for another training method (now {method}).")
        return gr.update()
    return gr.Tabs(selected=tab)


# On a phone a step's text takes the width and its button goes under it at a button's height: beside
# the text it took half the width and stretched to the text's height (boxes up to ~500 px tall).
GUIDE_CSS = ("@media (max-width:600px){.ot-guide-step{align-items:flex-start!important}"
             ".ot-guide-step>:not(button){flex:1 1 100%!important}"
             ".ot-guide-step>button{flex:0 0 auto!important;align-self:flex-start!important;height:auto!important}}")


def build_guide(tabs: gr.Tabs, config_state: gr.State) -> list[gr.Button]:
    """Markdown per step with its button; one handler for all the buttons opens the clicked
    step's tab (one handler instead of one per step keeps the page quicker to serve)."""
    gr.Markdown(INTRO)
    buttons = []
    tab_of: dict[str, str] = {}  # button elem_id -> tab
    number = 0
    for section, steps in STEPS:
        gr.Markdown(f"### {section}")
        for step in steps:
            number += 1
            with gr.Row(equal_height=True, elem_classes="ot-guide-step"):
                gr.Markdown(f"**{number}. {step.title}.** {step.text}")
                button = gr.Button(step.button, scale=0, min_width=150, elem_id=f"guide-step-{number}")
            if step.more:
                with gr.Accordion(step.more[0], open=False):
                    gr.Markdown(step.more[1])
            tab_of[button.elem_id] = step.tab
            buttons.append(button)
    gr.Markdown(OUTRO)

    def open_step(config, evt: gr.EventData):
        return go_to(tab_of[evt.target.elem_id], config)

    gr.on([b.click for b in buttons], open_step, config_state, tabs, show_progress="hidden")
    return buttons
