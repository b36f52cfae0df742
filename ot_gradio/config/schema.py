"""The whole training config: one schema read by the page, validation, JSON and the CLI.

Key names are OneTrainer's (TrainConfig version 11) so its configs and presets import unchanged.
"""

from __future__ import annotations

from pydantic import field_validator

from .concept import ConceptConfig
from .enums import (
    DataType,
    LearningRateScheduler,
    ModelFormat,
    ModelType,
    TimeUnit,
    TrainingMethod,
)
from .fields import PLANNED, Section, opt
from .parts import ModelPartConfig, OptimizerConfig, SampleConfig

CONFIG_VERSION = 1


def _part(**overrides) -> ModelPartConfig:
    return ModelPartConfig(**overrides)


class SecretsConfig(Section):
    huggingface_token: str = opt("", "Hugging Face token", "Token for gated or private models on the hub. Stored in the config file: do not share that file.", tab="general")


class TrainConfig(Section):
    config_version: int = opt(CONFIG_VERSION, "Config version", "Version of this config file's layout; older files are migrated when loaded.")

    # --- General -----------------------------------------------------------------------------
    seed: int = opt(42, "Seed", "Global random seed: the same seed, data and settings give the same run.", tab="general")
    workspace_dir: str = opt("workspace/run", "Workspace folder", "Where runs keep their samples, backups, logs and TensorBoard files.", tab="general")
    cache_dir: str = opt("workspace-cache/run", "Cache folder", "Where cached latents are stored. Reused between runs of the same data.", tab="general")
    continue_last_backup: bool = opt(False, "Continue from last backup", "Resume from the newest complete backup in the workspace instead of starting over.", tab="general")
    tensorboard: bool = opt(True, "TensorBoard", "Write loss, learning rate and samples for TensorBoard.", tab="general")
    dataloader_threads: int = opt(2, "Data loader threads", "Worker threads that load and augment images.", ge=0, le=64, tab="general")
    train_device: str = opt("cuda", "Train device", "Device to train on: cuda, cuda:1, mps or cpu. Falls back to cpu with a warning if the device is missing.", tab="general")
    temp_device: str = opt("cpu", "Temp device", "Where parts not in use are parked.", tab="general")

    # --- Model -------------------------------------------------------------------------------
    model_type: ModelType = opt(ModelType.STABLE_DIFFUSION_15, "Model type", "The model family of the base model.", tab="model")
    training_method: TrainingMethod = opt(TrainingMethod.FINE_TUNE, "Training method", "LORA trains small adapter weights; FINE_TUNE trains the model itself; EMBEDDING trains a new token.", tab="model")
    base_model_name: str = opt("stable-diffusion-v1-5/stable-diffusion-v1-5", "Base model", "A hub id (e.g. stable-diffusion-v1-5/stable-diffusion-v1-5), a local diffusers folder, or a .safetensors/.ckpt file.", tab="model")
    huggingface_cache_dir: str = opt("", "Hub cache folder", "Where hub downloads are cached. Blank = the Hugging Face default.", tab="model")
    offline_mode: bool = opt(False, "Offline", "Never contact the hub: use only local files and the hub cache.", tab="model")
    output_model_destination: str = opt("models/model.safetensors", "Output file", "Where the trained model is written (a file, or a folder for DIFFUSERS).", tab="model")
    output_model_format: ModelFormat = opt(ModelFormat.SAFETENSORS, "Output format", "LoRA: KOHYA_LORA (A1111, ComfyUI, Forge, diffusers) or SAFETENSORS (diffusers/PEFT keys). Fine-tune: SAFETENSORS/ORIGINAL_SINGLE_FILE or DIFFUSERS.", tab="model")
    output_dtype: DataType = opt(DataType.FLOAT_32, "Output data type", "Data type of the saved weights. FLOAT_16 or BFLOAT_16 halve the file size.", tab="model")
    unet: ModelPartConfig = opt(default_factory=_part, label="UNet", tooltip="UNet settings.", tab="training")
    text_encoder: ModelPartConfig = opt(default_factory=lambda: _part(train=False), label="Text encoder", tooltip="Text encoder settings.", tab="training")
    vae: ModelPartConfig = opt(default_factory=lambda: _part(train=False), label="VAE", tooltip="VAE settings. Keep it at FLOAT_32 to avoid black samples.", tab="training")
    secrets: SecretsConfig = opt(default_factory=SecretsConfig, label="Secrets", tooltip="Tokens.", tab="general")

    # --- Data --------------------------------------------------------------------------------
    concepts: list[ConceptConfig] = opt(default_factory=list, label="Concepts", tooltip="The image folders to train on.", tab="concepts")
    aspect_ratio_bucketing: bool = opt(True, "Aspect ratio bucketing", "Group images by aspect ratio and train each at a matching size instead of cropping everything square.", tab="data")
    latent_caching: bool = opt(True, "Latent caching", "Encode each image with the VAE once and reuse the result: much faster from the second epoch on.", tab="data")
    clear_cache_before_training: bool = opt(True, "Clear cache before training", "Start with an empty cache. Turn off to reuse the cache of an earlier run with the same data.", tab="data")

    # --- Training ----------------------------------------------------------------------------
    optimizer: OptimizerConfig = opt(default_factory=OptimizerConfig, label="Optimizer", tooltip="Optimizer and its settings.", tab="training")
    learning_rate_scheduler: LearningRateScheduler = opt(LearningRateScheduler.CONSTANT, "Learning rate scheduler", "How the learning rate changes over the run. CONSTANT keeps it; LINEAR and COSINE decay it to the minimum.", tab="training")
    learning_rate: float = opt(3e-6, "Learning rate", "Base learning rate. Typical: LoRA 1e-4 to 3e-4, fine-tune 1e-6 to 5e-6, embedding 1e-3 to 5e-3.", gt=0, le=10, tab="training")
    learning_rate_warmup_steps: float = opt(200.0, "Warmup steps", "Steps over which the learning rate rises from 0. Below 1 it is a fraction of all steps.", ge=0, tab="training")
    learning_rate_cycles: float = opt(1.0, "Cycles", "Cosine with restarts: how many cycles over the run.", gt=0, tab="training")
    learning_rate_min_factor: float = opt(0.0, "Minimum LR factor", "The learning rate never decays below this fraction of its base value.", ge=0, le=1, tab="training")
    epochs: int = opt(100, "Epochs", "How many times every image is trained.", ge=1, le=1_000_000, tab="training")
    batch_size: int = opt(1, "Batch size", "Images per step.", ge=1, le=1024, tab="training")
    gradient_accumulation_steps: int = opt(1, "Accumulation steps", "Add up gradients of this many batches before each optimizer step: a bigger effective batch without more memory.", ge=1, le=1024, tab="training")
    train_dtype: DataType = opt(DataType.FLOAT_16, "Train data type", "Mixed-precision type for the forward pass. FLOAT_16 is fast on GPUs; FLOAT_32 is the most precise. On CPU, FLOAT_16 falls back to BFLOAT_16.", tab="training")
    resolution: str = opt("512", "Resolution", "Training resolution, e.g. 512, or a list like 384,448,512: each step trains at one of them.", tab="training")
    clip_grad_norm: float | None = opt(1.0, "Clip grad norm", "Clip the gradient norm to this value. Blank = no clipping.", gt=0, tab="training")
    offset_noise_weight: float = opt(0.0, "Offset noise weight", "Adds a per-channel offset to the noise so the model learns very dark and very bright images.", ge=0, le=1, tab="training")
    mse_strength: float = opt(1.0, "MSE strength", "Weight of the mean squared error loss.", ge=0, tab="training")
    mae_strength: float = opt(0.0, "MAE strength", "Weight of the mean absolute error loss.", ge=0, tab="training")
    min_noising_strength: float = opt(0.0, "Min noising strength", "Lowest timestep trained, as a fraction of all timesteps.", ge=0, le=1, tab="training")
    max_noising_strength: float = opt(1.0, "Max noising strength", "Highest timestep trained, as a fraction of all timesteps.", ge=0, le=1, tab="training")
    dropout_probability: float = opt(0.0, "LoRA dropout", "Dropout on the LoRA layers: regularises small datasets.", ge=0, lt=1, tab="lora")

    # --- Sampling ----------------------------------------------------------------------------
    samples: list[SampleConfig] = opt(default_factory=list, label="Samples", tooltip="Prompts to sample while training.", tab="sampling")
    sample_after: int = opt(10, "Sample after", "Generate samples every N units.", ge=0, tab="sampling")
    sample_after_unit: TimeUnit = opt(TimeUnit.MINUTE, "Sample unit", "Unit for 'sample after': STEP, EPOCH, SECOND, MINUTE, HOUR, or NEVER.", tab="sampling")
    sample_skip_first: int = opt(0, "Skip first", "Do not sample during the first N units.", ge=0, tab="sampling")

    # --- Backup ------------------------------------------------------------------------------
    backup_after: int = opt(30, "Backup after", "Write a backup (weights, optimizer, progress) every N units.", ge=0, tab="backup")
    backup_after_unit: TimeUnit = opt(TimeUnit.MINUTE, "Backup unit", "Unit for 'backup after'.", tab="backup")
    rolling_backup: bool = opt(False, "Rolling backup", "Keep only the newest backups.", tab="backup")
    rolling_backup_count: int = opt(3, "Rolling backup count", "How many backups rolling backup keeps.", ge=1, tab="backup")
    backup_before_save: bool = opt(True, "Backup before save", "Write a backup just before the final model is saved.", tab="backup")
    save_every: int = opt(0, "Save every", "Also save the model every N units (0 = only at the end).", ge=0, tab="backup")
    save_every_unit: TimeUnit = opt(TimeUnit.NEVER, "Save unit", "Unit for 'save every'.", tab="backup")
    save_skip_first: int = opt(0, "Save skip first", "Do not save during the first N units.", ge=0, tab="backup")
    save_filename_prefix: str = opt("", "Save file prefix", "Prefix of intermediate save file names.", tab="backup")

    # --- LoRA --------------------------------------------------------------------------------
    lora_model_name: str = opt("", "Base LoRA", "Continue training an existing LoRA file (kohya or diffusers keys). Blank = a new LoRA.", tab="lora", status=PLANNED)
    lora_rank: int = opt(16, "Rank", "Size of the LoRA matrices. 8-32 is typical for characters and styles.", ge=1, le=1024, tab="lora")
    lora_alpha: float = opt(1.0, "Alpha", "Scales the LoRA output by alpha/rank. alpha = rank means no scaling.", gt=0, tab="lora")
    lora_weight_dtype: DataType = opt(DataType.FLOAT_32, "LoRA weight data type", "Data type of the trained LoRA weights.", tab="lora")
    layer_filter_preset: str = opt("full", "Layer preset", "Which layers get LoRA: 'full' (every linear and conv layer), 'attn-mlp' (attention and feed-forward), 'attn-only', or 'custom' with the layer filter.", tab="lora", choices=["full", "attn-mlp", "attn-only", "custom"])
    layer_filter: str = opt("", "Layer filter", "Comma-separated parts of module names that get LoRA (custom preset).", tab="lora")
    layer_filter_regex: bool = opt(False, "Filter is regex", "Treat the layer filter as regular expressions.", tab="lora")

    @field_validator("resolution")
    @classmethod
    def _check_resolution(cls, value: str) -> str:
        from .resolution import parse_resolutions

        parse_resolutions(value)
        return value
