"""The getting-started guide shown first, in the workflow order of OneTrainer's wiki."""

GUIDE = """
## Start here

1. **Model** tab: choose the model type, the base model (a hub id such as
   `stable-diffusion-v1-5/stable-diffusion-v1-5`, a local diffusers folder or a `.safetensors` file)
   and where the result goes. Pick the training method in the top bar: **LORA** is the usual choice.
2. **Concepts** tab: add a folder of images. Captions come from a `.txt` file next to each image
   (one caption per line, one picked at random per epoch). Press *Refresh statistics* to check that
   every image is found and how the images fall into aspect buckets.
3. **Training** tab: learning rate, epochs, batch size and the optimizer. The plot shows the learning
   rate over the whole run. For LoRA on SD 1.5, 3e-4 with AdamW and batch size 4 is a good start.
4. **Sampling** tab: prompts to render while training, at the model's native size (512 for SD 1.5).
5. **Backup** tab: how often to write backups; a stopped run can continue from the last one
   (*Continue from last backup* on the General tab).
6. Press **Start training** below. Watch the loss, the samples and the progress; *Stop* finishes
   the step, writes a backup and the model.

No model at hand? Choose the **demo** preset in the top bar and press *Start training*: it trains
a LoRA on a tiny model and a generated dataset on the CPU in under a minute.
"""
