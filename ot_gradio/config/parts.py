"""Settings of one model part (UNet, text encoder, VAE, ...) and of the optimizer and samples."""

from __future__ import annotations

from .enums import DataType, NoiseScheduler, Optimizer, TimeUnit
from .fields import PLANNED, Section, opt


class ModelPartConfig(Section):
    model_name: str = opt("", "Override model", "Load this part from another model (hub id, folder or file). Blank = from the base model.", status=PLANNED)
    include: bool = opt(True, "Include", "Load this part at all.")
    train: bool = opt(True, "Train", "Train this part. For LoRA: attach LoRA layers to it.")
    stop_training_after: int | None = opt(None, "Stop training after", "Freeze this part after this many units (see the unit). Blank = never.", ge=0)
    stop_training_after_unit: TimeUnit = opt(TimeUnit.NEVER, "Stop training unit", "Unit for 'stop training after': EPOCH or STEP; NEVER keeps training.")
    learning_rate: float | None = opt(None, "Learning rate", "Learning rate for this part. Blank = the base learning rate.", ge=0)
    weight_dtype: DataType = opt(DataType.FLOAT_32, "Weight data type", "Data type the frozen weights are kept in. FLOAT_16/BFLOAT_16 halve memory; on CPU the trainer computes in float32 anyway.")
    dropout_probability: float = opt(0.0, "Dropout", "Dropout inside this part while training.", ge=0, le=1, status=PLANNED)
    train_embedding: bool = opt(True, "Train embedding", "Text encoders: also train the token embeddings.", status=PLANNED)
    attention_mask: bool = opt(False, "Attention mask", "Text encoders: mask padding tokens.", status=PLANNED)
    guidance_scale: float = opt(1.0, "Guidance scale", "Guidance-distilled models only.", status=PLANNED)
    gradient_checkpointing: bool = opt(True, "Gradient checkpointing", "Recompute activations in the backward pass: much less memory, about 20-30% slower.")
    offload_fraction: float = opt(0.0, "Offload fraction", "Share of layers kept in CPU memory between uses.", ge=0, le=1, status=PLANNED)
    activation_offloading: bool = opt(False, "Activation offloading", "Keep checkpointed activations in CPU memory.", status=PLANNED)


class OptimizerConfig(Section):
    """The optimizer and its parameters. Blank (None) means the optimizer's own default."""

    optimizer: Optimizer = opt(Optimizer.ADAMW, "Optimizer", "The optimizer. ADAMW is the safe default; PRODIGY finds its own learning rate (set LR to 1).")
    beta1: float | None = opt(None, "Beta1", "Momentum: decay of the running average of gradients.", ge=0, lt=1)
    beta2: float | None = opt(None, "Beta2", "Decay of the running average of squared gradients.", ge=0, lt=1)
    beta3: float | None = opt(None, "Beta3", "Prodigy: decay for the step size estimate. Blank = sqrt(beta2).", ge=0, lt=1)
    eps: float | None = opt(None, "EPS", "Small number added for numerical stability.", ge=0)
    eps2: float | None = opt(None, "EPS 2", "Adafactor: second epsilon.", ge=0)
    weight_decay: float | None = opt(None, "Weight decay", "Pulls weights towards zero; regularises. 0.01 is AdamW's usual value.", ge=0)
    amsgrad: bool = opt(False, "AMSGrad", "Use the AMSGrad variant of Adam.")
    foreach: bool | None = opt(False, "Foreach", "Use the multi-tensor implementation (faster, a little more memory).")
    fused: bool = opt(False, "Fused", "Use the fused implementation where the device supports it.")
    maximize: bool = opt(False, "Maximize", "Maximise the objective instead of minimising it (for experiments only).")
    capturable: bool = opt(False, "Capturable", "Allow CUDA graph capture.")
    differentiable: bool = opt(False, "Differentiable", "Allow autograd through the optimizer step.")
    momentum: float | None = opt(None, "Momentum", "SGD/RMSprop momentum factor.", ge=0)
    dampening: float | None = opt(None, "Dampening", "SGD dampening for momentum.", ge=0)
    nesterov: bool = opt(False, "Nesterov", "Use Nesterov momentum.")
    alpha: float | None = opt(None, "Alpha", "RMSprop smoothing constant.", ge=0)
    centered: bool = opt(False, "Centered", "RMSprop: normalise by the estimated variance of the gradient.")
    lr_decay: float | None = opt(None, "LR decay", "Adagrad learning rate decay.", ge=0)
    initial_accumulator_value: float | None = opt(None, "Initial accumulator value", "Adagrad: starting value of the sum of squares.", ge=0)
    fused_back_pass: bool = opt(False, "Fused back pass", "Step the optimizer during the backward pass to save memory; not compatible with gradient accumulation.", status=PLANNED)
    stochastic_rounding: bool = opt(True, "Stochastic rounding", "Round bfloat16 weights stochastically when updating them.", status=PLANNED)
    # The remaining optimizer keys of OneTrainer are added by the full schema (see optimizer defaults).


class SampleConfig(Section):
    enabled: bool = opt(True, "Enabled", "Generate this sample during training.")
    prompt: str = opt("", "Prompt", "The prompt. For embeddings, include <embedding> where the trained token goes.")
    negative_prompt: str = opt("", "Negative prompt", "What the image should not show.")
    height: int = opt(512, "Height", "Sample height in pixels; use the model's native resolution for meaningful samples.", ge=64, le=4096)
    width: int = opt(512, "Width", "Sample width in pixels.", ge=64, le=4096)
    seed: int = opt(42, "Seed", "Noise seed; keep it fixed to compare samples across the run.")
    random_seed: bool = opt(False, "Random seed", "Use a new seed each time.")
    diffusion_steps: int = opt(20, "Steps", "Denoising steps.", ge=1, le=1000)
    cfg_scale: float = opt(7.0, "CFG scale", "How strongly the prompt is followed.", ge=0, le=50)
    noise_scheduler: NoiseScheduler = opt(NoiseScheduler.DDIM, "Sampler", "The sampler (noise scheduler).")
    text_encoder_1_layer_skip: int = opt(0, "Clip skip", "Skip the last N layers of the text encoder.", ge=0, status=PLANNED)
    force_last_timestep: bool = opt(False, "Force last timestep", "Always include the last timestep.", status=PLANNED)
    sample_inpainting: bool = opt(False, "Inpainting sample", "Sample by inpainting a base image with a mask.", status=PLANNED)
    base_image_path: str = opt("", "Base image", "Inpainting samples: the base image.", status=PLANNED)
    mask_image_path: str = opt("", "Mask image", "Inpainting samples: the mask.", status=PLANNED)
