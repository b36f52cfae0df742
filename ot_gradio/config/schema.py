"""The whole training config: one schema read by the page, validation, JSON and the CLI.

Key names, nesting and defaults are OneTrainer's (TrainConfig version 11), so a OneTrainer config
or preset maps 1:1 onto ours. Options marked PLANNED are kept but the trainer does not act on them
yet; the doctor lists the ones a config sets.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from pydantic import field_validator

from .concept import ConceptConfig
from .conditions import (
    CLIP_CAPTIONS,
    DDPM_SCHEDULE,
    FLOW_SCHEDULE,
    INPAINTS,
    LEARNS_VARIANCE,
    LORA_METHOD,
    PADS_CIRCULARLY,
    READS_TOKEN_WINDOW,
    TAKES_VIDEO,
    blank,
    is_,
    is_not,
    nonzero,
    off,
    on,
)
from .enums import (
    AttentionMechanism,
    AudioFormat,
    ConfigPart,
    DataType,
    EMAMode,
    Expert,
    GradientReducePrecision,
    ImageFormat,
    LearningRateScaler,
    LearningRateScheduler,
    LossScaler,
    LossWeight,
    ModelFormat,
    ModelType,
    PeftType,
    TimestepDistribution,
    TimeUnit,
    TrainingMethod,
    VideoFormat,
)
from .fields import PLANNED, Section, opt
from .parts import (
    CLOUD_DEFAULTS,
    EmbeddingConfig,
    LlamaPartConfig,
    ModelPartConfig,
    OptimizerConfig,
    QuantizationConfig,
    SampleConfig,
    SecretsConfig,
    SeparateModelPartConfig,
    TextEncoderPartConfig,
    TransformerPartConfig,
    VaePartConfig,
)

__all__ = ["CONFIG_VERSION", "SecretsConfig", "TrainConfig"]

CONFIG_VERSION = 3
P = PLANNED
# conditions several options share (`applies_when`)
MULTI_GPU = on("multi_gpu")
CUSTOM_SCHEDULER = is_("learning_rate_scheduler", "CUSTOM")
PLAIN_LORA = is_("peft_type", "LORA", default="LORA")
LOKR = is_("peft_type", "LOKR", default="LORA")  # LoKr uses its dimension instead of the rank
OFT = is_("peft_type", "OFT_2", default="LORA")  # OFT v2 rotates: no rank, no alpha
EMA_ON = is_not("ema", "OFF", default="OFF")
# when a LoRA setting shapes the adapters a backup holds (`backup_must_match`): the adapter type
# always; the shape options only for a new LoRA (a Base LoRA continues on the file's layers, rank,
# alpha and shape, and the setup refuses a file whose type or DoRA differs from the config's; the
# Base LoRA itself must match)
NEW_LORA = LORA_METHOD & blank("lora_model_name")
LORA_RANKED = NEW_LORA & is_not("peft_type", "LOKR", "OFT_2", default="LORA")
LORA_SCALED = NEW_LORA & is_not("peft_type", "OFT_2", default="LORA")
LAYER_PRESET_NAMES = ("full", "attn-mlp", "attn-only", "blocks", "custom")
# the layer preset picks a new LoRA's layers and a fine-tune's trained weights (its optimizer's state fits only those)
LAYERED = is_("training_method", "LORA", "FINE_TUNE", default="FINE_TUNE")
LAYERS_SHAPE = NEW_LORA | is_("training_method", "FINE_TUNE", default="FINE_TUNE")
LAYERS_CUSTOM = LAYERED & is_("layer_filter_preset", "custom", default="full")
LAYERS_FILTERED = LAYERS_SHAPE & is_("layer_filter_preset", "custom", default="full")
DORA = NEW_LORA & PLAIN_LORA & on("lora_decompose")
LOKR_SHAPE = NEW_LORA & LOKR
OFT_SHAPE = NEW_LORA & OFT
MASKED = on("masked_training")


def _llama() -> LlamaPartConfig:
    return LlamaPartConfig(**_text_encoder().model_dump())


def _part(**overrides: Any) -> ModelPartConfig:
    return ModelPartConfig(**overrides)


def _text_encoder() -> TextEncoderPartConfig:
    # OneTrainer trains text encoders for the first 30 epochs only, then the UNet goes on alone.
    return TextEncoderPartConfig(stop_training_after=30, stop_training_after_unit=TimeUnit.EPOCH)


class TrainConfig(Section):
    config_version: int = opt(CONFIG_VERSION, "Config version", "Version of this config file's layout; older files are migrated when loaded.", compat=True)

    # --- General -----------------------------------------------------------------------------
    seed: int = opt(42, "Seed", "Global random seed: the same seed, data and settings give the same run.", tab="general", in_step=False)
    training_method: TrainingMethod = opt(TrainingMethod.FINE_TUNE, "Training method", "LORA trains small adapter weights on top of the model (best for sharing); FINE_TUNE trains the model itself (needs big batches and strong hardware); EMBEDDING trains new tokens (tiny files, fast); FINE_TUNE_VAE trains the VAE.", tab="model", backup_must_match=True)
    model_type: ModelType = opt(ModelType.STABLE_DIFFUSION_15, "Model type", "The model family of the base model. Derived models train with their base family's settings (e.g. Pony with SDXL).", tab="model", backup_must_match=True)
    debug_mode: bool = opt(False, "Debug mode", "At every step, for each image of the batch, write what the model trains on into the debug folder: <step>-<n>-<image name>-image.png (the latents after cropping, flipping and augmentation, decoded by the VAE; video: the first frame), -mask.png (the mask the loss used, with masked training), -conditioning.png (inpainting models: the conditioning image) and -prompt.txt (the caption after caption augmentation and dropout). Every step is written: use it for a short check run. Würstchen / Stable Cascade: prompts and masks only; FINE_TUNE_VAE: nothing.", tab="general", advanced=True, in_step=False)
    debug_dir: str = opt("debug", "Debug folder", "Where debug mode writes: a relative path is a folder inside the run's folder (runs/<run-id>/debug by default) and may not leave it with '..'; an absolute path is used as it is.", tab="general", advanced=True, in_step=False, applies_when=on("debug_mode"))
    workspace_dir: str = opt("workspace/run", "Workspace folder", "Where runs keep their samples, backups, logs and TensorBoard files.", tab="general", in_step=False)
    cache_dir: str = opt("workspace-cache/run", "Cache folder", "Where cached latents are stored. Reused between runs of the same data.", tab="general", in_step=False)
    huggingface_cache_dir: str = opt("", "Hub cache folder", "Where hub downloads are cached, and Civitai downloads in its civitai folder. Blank = the Hugging Face default (~/.cache/huggingface/hub, or HF_HOME/hub).", tab="model", in_step=False)
    offline_mode: bool = opt(False, "Offline", "Never contact the hub: use only local files and the hub cache.", tab="model", in_step=False)
    tensorboard: bool = opt(True, "TensorBoard", "Write loss, learning rate and samples for TensorBoard.", tab="general", in_step=False)
    tensorboard_expose: bool = opt(False, "Expose TensorBoard", "Let other machines on the network open TensorBoard.", tab="general", in_step=False)
    tensorboard_always_on: bool = opt(False, "TensorBoard always on", "Keep TensorBoard running between runs.", tab="general", in_step=False)
    tensorboard_port: int = opt(6006, "TensorBoard port", "Port TensorBoard listens on.", ge=1, le=65535, tab="general", in_step=False)
    validation: bool = opt(False, "Validation", "Compute the loss on VALIDATION concepts (held-out images, never trained) regularly, with fixed noise and timesteps so it is comparable across steps and runs: when it rises while the training loss falls, the model is overfitting.", tab="general", in_step=False)
    validate_after: int = opt(1, "Validate after", "Compute the validation loss every N units.", ge=0, tab="general", in_step=False)
    validate_after_unit: TimeUnit = opt(TimeUnit.EPOCH, "Validation unit", "Unit for 'validate after'.", tab="general", in_step=False)
    continue_last_backup: bool = opt(False, "Continue from last backup", "Resume from the newest complete backup of this training instead of starting over: of the runs in the workspace that save to this Output file (or to the numbered name an earlier start got). A workspace whose backups are all of other trainings stops the run and names the newest; a backup at the end of its Epochs is saved as it is (raise Epochs to train it on).", tab="general", in_step=False)
    prevent_overwrites: bool = opt(False, "Prevent overwrites", "Refuse to start while the output file (or folder) exists. Off, the page and the queue number the new file instead (name-2...).", tab="backup", in_step=False)
    include_train_config: ConfigPart = opt(ConfigPart.NONE, "Include config in model", "Store the training config in the saved model's metadata (`ot_gradio_config`): NONE, SETTINGS (without concepts, samples and cloud settings; local paths cut to their last name) or ALL. Tokens and keys are never stored.", tab="model", in_step=False)
    multi_gpu: bool = opt(False, "Multi-GPU", "Train on several GPUs at once (data parallel): one process per GPU, started by torch.distributed.run as accelerate does. Batch size is per GPU, so each step trains batch size x GPUs images; gradients are averaged across GPUs; samples, backups and saves come from the first process. Not with fused back pass.", tab="general")
    device_indexes: str = opt("", "GPU indexes", "Multi-GPU: comma-separated GPU indexes to train on, e.g. 0,1. Blank = every GPU. With train device cpu, one process per listed index (for trying it out).", tab="general", applies_when=MULTI_GPU)
    gradient_reduce_precision: GradientReducePrecision = opt(GradientReducePrecision.FLOAT_32_STOCHASTIC, "Gradient reduce precision", "Multi-GPU: FLOAT_32 adds up the GPUs' gradients in float32; WEIGHT_DTYPE in the gradients' own type (half the traffic for 16-bit gradients). The _STOCHASTIC variants round the float32 result back into a bfloat16 gradient stochastically.", tab="general", advanced=True, applies_when=MULTI_GPU)
    fused_gradient_reduce: bool = opt(True, "Fused gradient reduce", "Multi-GPU: send the gradients in buckets (fewer, larger transfers) instead of one transfer per weight.", tab="general", advanced=True, applies_when=MULTI_GPU)
    async_gradient_reduce: bool = opt(True, "Async gradient reduce", "Multi-GPU: send each bucket of gradients as soon as the backward pass has finished it, while the pass goes on (faster steps). Off: all at once after the pass.", tab="general", advanced=True, applies_when=MULTI_GPU)
    async_gradient_reduce_buffer: int = opt(100, "Reduce bucket size (MB)", "Multi-GPU with fused gradient reduce: the size of one bucket of gradients sent together.", ge=1, tab="general", advanced=True, applies_when=MULTI_GPU & on("fused_gradient_reduce"))
    dataloader_threads: int = opt(2, "Data loader threads", "Worker threads that load and augment images.", ge=0, le=64, tab="general", in_step=False)
    train_device: str = opt("cuda", "Train device", "Device to train on: cuda, cuda:1, mps or cpu. Falls back to cpu with a warning if the device is missing.", tab="general")
    temp_device: str = opt("cpu", "Temp device", "Where parts a step does not run wait: cpu = in RAM; the train device (cuda) = kept there, no moves, more VRAM.", tab="general")

    # --- Model -------------------------------------------------------------------------------
    base_model_name: str = opt("stable-diffusion-v1-5/stable-diffusion-v1-5", "Base model", "A hub id (e.g. stable-diffusion-v1-5/stable-diffusion-v1-5, or its page address), a local diffusers folder, a .safetensors/.ckpt file, a Hugging Face file address (https://huggingface.co/<owner>/<repo>/blob/main/<file>.safetensors: a single-file checkpoint, downloaded once to the hub cache), or a Civitai model's address (https://civitai.com/models/<id>?modelVersionId=<version>, downloaded once with General → Civitai API key). Offline: tiny:sd15, tiny:sdxl, tiny:sd3, tiny:flux, tiny:qwen-image... (one per family: tiny random models built here, for trying the trainer; they learn nothing useful).", tab="model", backup_must_match=True)
    output_dtype: DataType = opt(DataType.FLOAT_32, "Output data type", "Data type of the saved weights. FLOAT_16 or BFLOAT_16 halve the file size.", tab="model", in_step=False)
    output_model_format: ModelFormat = opt(ModelFormat.SAFETENSORS, "Output format", "LoRA: KOHYA_LORA / COMFY_LORA (kohya keys, an alpha per layer) for ComfyUI, and for SD 1.x/2.x/SDXL also A1111, Forge and diffusers (other families' diffusers pipelines read them in part, e.g. Flux's attention layers and Wan's blocks, or not at all); DIFFUSERS_LORA (diffusers/PEFT keys, alpha folded into the weights) for the family's diffusers pipeline (PixArt, Würstchen and Stable Cascade have no LoRA loader: load with peft) and, for most families, ComfyUI (not Wan, HunyuanVideo or Anima: warned); a text-encoder LoRA the pipeline cannot load is refused. SAFETENSORS, as in OneTrainer, is kohya keys for SD 1.x/2.x/SDXL (A1111 and Forge read no other) and diffusers keys for the other families, as is LEGACY_LORA (newer OneTrainer's name for that LoRA); LEGACY_SAFETENSORS and ORIGINAL_LORA are written as KOHYA_LORA. The README lists what loads where per family. Fine-tune: SAFETENSORS/ORIGINAL_SINGLE_FILE (one checkpoint file) or DIFFUSERS (a folder). Embedding: SAFETENSORS (A1111 embedding file).", tab="model", in_step=False)
    output_model_destination: str = opt("models/model.safetensors", "Output file", "Where the trained model is written (a file, or a folder for DIFFUSERS).", tab="model", in_step=False)
    async_offloading: bool = opt(True, "Async offloading", "Layer offloading on CUDA: copy offloaded weights to the GPU without waiting (non-blocking, from pinned memory); off = blocking copies.", tab="model", advanced=True)
    force_circular_padding: bool = opt(False, "Circular padding", "Convolutions of the UNet/prior and the VAE/decoder wrap around the image's edges instead of padding with zeros, in training and sampling, so samples tile seamlessly (textures). SD 1.x/2.x, SDXL, Würstchen and Stable Cascade only.", tab="model", applies_when=PADS_CIRCULARLY)
    compile: bool = opt(False, "Compile", "Compile the denoiser (UNet or transformer) with torch.compile: the first steps wait minutes while it compiles (and sampling compiles once more), later steps run faster on a GPU. No gain on a CPU, where compiling the benchmark UNet took 17 minutes. Needs a C++ compiler (Triton on NVIDIA GPUs).", tab="model")
    quantization: QuantizationConfig = opt(default_factory=QuantizationConfig, label="Quantization", tooltip="Which layers are quantized when a part is loaded in 8 bits or less.", tab="model")

    # --- Data --------------------------------------------------------------------------------
    concept_file_name: str = opt("training_concepts/concepts.json", "Concept file", "OneTrainer keeps concepts in a separate JSON file; it is read when a OneTrainer config is imported. Here concepts are stored in the config itself.", tab="concepts", compat=True, in_step=False)
    concepts: list[ConceptConfig] = opt(default_factory=list, label="Concepts", tooltip="The image folders to train on.", tab="concepts", in_step=False)
    aspect_ratio_bucketing: bool = opt(True, "Aspect ratio bucketing", "Group images by aspect ratio and train each at a matching size instead of cropping everything square. A bucket with fewer images than the batch size is never trained.", tab="data")
    bucket_no_upscale: bool = opt(False, "Don't upscale small images", "With aspect ratio bucketing: an image smaller than its bucket at the training resolution trains at the largest smaller bucket it covers (in steps of the bucket step; a fixed WxH resolution stays fixed) instead of being scaled up, as kohya's bucket_no_upscale (on by default in kohya_ss). Off: scaled up, as OneTrainer does. The Concepts tab's buckets show where each image lands.", tab="data", applies_when=on("aspect_ratio_bucketing"))
    bucket_resolution_step: int = opt(0, "Bucket step (px)", "0: OneTrainer's buckets, 9 aspect ratios up to 4:1 of the resolution's area, sides rounded to its step for the model (8 px SD 1.x/2.x, 16 PixArt, 32 Sana, 128 Würstchen/Cascade, 64 others; a resolution under 4 steps a side: an eighth of it); one WxH resolution is a fixed size. A number: kohya's buckets (bucket_reso_steps; kohya_ss: 64): every width from the smallest to the largest side below in this step, each with the tallest height within the resolution's area. Finer aspect ratios crop less, but each bucket holds fewer images. A multiple of the model's step (8 for SD 1.x/2.x and SDXL, 16 for Flux and SD 3).", ge=0, le=1024, tab="data", applies_when=on("aspect_ratio_bucketing"))
    min_bucket_resolution: int = opt(256, "Smallest bucket side (px)", "With a bucket step: no bucket is narrower or shorter than this (kohya's min_bucket_reso, rounded down to the step), except the smaller buckets of small images with Don't upscale small images, as in sd-scripts. At most the training resolution's shorter side.", ge=8, le=8192, tab="data", applies_when=on("aspect_ratio_bucketing") & nonzero("bucket_resolution_step"))
    max_bucket_resolution: int = opt(2048, "Largest bucket side (px)", "With a bucket step: no bucket is wider or taller than this (kohya's max_bucket_reso, rounded up to the step; sd-scripts' own default is 1024, kohya_ss's 2048). At least the training resolution's longer side.", ge=8, le=16384, tab="data", applies_when=on("aspect_ratio_bucketing") & nonzero("bucket_resolution_step"))
    caption_dropout_probability: float = opt(0.0, "Whole-caption dropout", "Probability of training a sample with an empty caption for every text encoder at once, so the model also learns the unconditioned image that classifier-free guidance starts from; as kohya's caption_dropout_rate, ai-toolkit's caption_dropout_rate and diffusion-pipe's uncond_fraction (their imports set it). Each text encoder's own Caption dropout adds to it, emptying that encoder's caption alone. 0 = off.", ge=0, le=1, tab="data")
    latent_caching: bool = opt(True, "Latent caching", "Encode each image with the VAE once and reuse the result: much faster from the second epoch on and saves some VRAM. Augmentations vary only as much as 'image variations' allows.", tab="data")
    clear_cache_before_training: bool = opt(True, "Clear cache before training", "Start with an empty cache. Turn off to reuse the cache of an earlier run with the same data.", tab="data", in_step=False)

    # --- Training ----------------------------------------------------------------------------
    learning_rate_scheduler: LearningRateScheduler = opt(LearningRateScheduler.CONSTANT, "Learning rate scheduler", "How the learning rate changes over the run. CONSTANT keeps it; LINEAR and COSINE decay it to 0 (COSINE along a half cosine); REX along a reverse exponential (no warmup; let it run to the end); ADAFACTOR goes with the Adafactor optimizer.", tab="training", heading="Learning rate", in_step=False)
    custom_learning_rate_scheduler: str | None = opt(None, "Custom scheduler", "CUSTOM scheduler: the Python class to use (module.Class, e.g. torch.optim.lr_scheduler.StepLR). It is built with the optimizer and the parameters below, after the warmup. From the page and its HTTP API only torch's, transformers' and diffusers' schedulers are taken (another module's class runs that module's code); the command line takes any.", tab="training", advanced=True, applies_when=CUSTOM_SCHEDULER, heading="Learning rate")
    scheduler_params: list[dict[str, Any]] = opt(default_factory=list, label="Custom scheduler parameters", tooltip="CUSTOM scheduler: a list of {\"key\": ..., \"value\": ...} arguments. Values are Python literals, or %LR%, %EPOCHS%, %STEPS_PER_EPOCH%, %TOTAL_STEPS%, %SCHEDULER_STEPS%.", tab="training", advanced=True, applies_when=CUSTOM_SCHEDULER, heading="Learning rate")
    learning_rate: float = opt(3e-6, "Learning rate", "Base learning rate; part learning rates replace it when set. Typical: LoRA 1e-4 to 3e-4, fine-tune 1e-6 to 5e-6, embedding 1e-3 to 5e-3. Prodigy: 1.", gt=0, le=10, tab="training", heading="Learning rate", in_step=False)
    learning_rate_warmup_steps: float = opt(200.0, "Warmup steps", "Steps over which the learning rate rises from 0; up to 1: a fraction of all steps (1 = all), as OneTrainer. 0 with REX and Prodigy.", ge=0, tab="training", heading="Learning rate", in_step=False)
    learning_rate_cycles: float = opt(1.0, "Cycles", "Cosine with restarts: how many cycles over the run.", gt=0, tab="training", applies_when=is_("learning_rate_scheduler", "COSINE_WITH_RESTARTS", "COSINE_WITH_HARD_RESTARTS"), heading="Learning rate", in_step=False)
    learning_rate_min_factor: float = opt(0.0, "Minimum LR factor", "The learning rate never decays below this fraction of its base value.", ge=0, le=1, tab="training", applies_when=is_not("learning_rate_scheduler", "CONSTANT"), heading="Learning rate", in_step=False)
    # --- Layers (which train: a LoRA's adapters, a fine-tune's weights) -------------------------
    layer_filter_preset: str = opt("full", "Layer preset", "Which layers train: a LoRA's adapted layers, or a fine-tune's denoiser weights (the rest frozen, as OneTrainer).", tab="training", heading="Layers", choices=list(LAYER_PRESET_NAMES), applies_when=LAYERED, backup_must_match=LAYERS_SHAPE)
    layer_filter: str = opt("", "Layer filter", "Comma-separated parts of layer names.", tab="training", heading="Layers", applies_when=LAYERS_CUSTOM, backup_must_match=LAYERS_FILTERED)
    layer_filter_regex: bool = opt(False, "Filter is regex", "Treat the layer filter as regular expressions.", tab="training", heading="Layers", applies_when=LAYERS_CUSTOM, backup_must_match=LAYERS_FILTERED)
    epochs: int = opt(100, "Epochs", "How many times every image is trained. Prodigy samples often change only after 40-80 epochs.", ge=1, le=1_000_000, tab="training", heading="Epochs and batches", in_step=False)
    batch_size: int = opt(1, "Batch size", "Images per step. Ideally the number of images per epoch divides evenly by it; each aspect-ratio bucket needs at least this many images.", ge=1, le=1024, tab="training", heading="Epochs and batches", backup_must_match=True)
    gradient_accumulation_steps: int = opt(1, "Accumulation steps", "Multiplies the batch size: add up gradients of this many batches before each optimizer step. E.g. batch 4 with 4 steps acts like batch 16 without more memory, but slower.", ge=1, le=1024, tab="training", heading="Epochs and batches", backup_must_match=True)
    ema: EMAMode = opt(EMAMode.OFF, "EMA", "Keep an exponential moving average of the weights (on GPU or CPU). Useful only for larger datasets with many concepts: more EMA means less diversity. Leave OFF unless results are poor without it.", tab="training", heading="EMA")
    ema_decay: float = opt(0.999, "EMA decay", "0.9999 for hundreds or thousands of images; 0.999 or even 0.998 for smaller datasets.", ge=0, le=1, tab="training", applies_when=EMA_ON, heading="EMA")
    ema_update_step_interval: int = opt(5, "EMA update interval", "Update the EMA weights every N steps.", ge=1, tab="training", applies_when=EMA_ON, heading="EMA")
    train_dtype: DataType = opt(DataType.FLOAT_16, "Train data type", "Mixed-precision type for the forward pass: trades precision for speed. FLOAT_16 costs only a little quality for a big speed-up; FLOAT_32 turns it off (each part computes in its weight data type). On CPU, FLOAT_16 computes in FLOAT_32 (faster there).", tab="training", heading="Precision and speed")
    fallback_train_dtype: DataType = opt(DataType.BFLOAT_16, "Fallback train data type", "FLOAT_16 runs only: what T5, the LLM text encoders and other parts that overflow in float16 run in (as OneTrainer). FLOAT_32: float32 autocast on CUDA, autocast off elsewhere.", tab="training", advanced=True, heading="Precision and speed", choices=["BFLOAT_16", "FLOAT_32"])
    enable_autocast_cache: bool = opt(True, "Autocast cache", "Cache cast weights during the forward pass. Turn off if samples get noisy every few epochs (seen with ZLUDA).", tab="training", advanced=True, heading="Precision and speed")
    only_cache: bool = opt(False, "Only cache", "Fill the latent (and text) cache, then end the run: no training, no model. Needs latent caching; reuse the cache with 'Clear cache before training' off.", tab="data", in_step=False)
    resolution: str = opt("512", "Resolution", "Training resolution, ideally the model's native one (512 for SD 1.5, 1024 for SDXL; 768x512: all at that size). A list like 384,448,512,576,640 trains each step at one of them, which can improve quality a lot.", tab="training", heading="Precision and speed", backup_must_match=True)
    frames: str = opt("25", "Frames", "Video models: the most frames a training clip gives, cut to the form the model needs (Wan: 4k+1, like 17, 25 or 33). A shorter clip trains with the frames it has (and is named in the dataset report); images train as one frame. Samples during training are clips of this many frames.", tab="training", applies_when=TAKES_VIDEO, heading="Video clips", backup_must_match=True)
    frame_rate: float = opt(24.0, "Clip frame rate", "Video models: the most frames per second taken from a clip. A faster clip drops frames by timestamp; a slower one keeps every frame (none is repeated).", gt=0, tab="training", applies_when=TAKES_VIDEO, heading="Video clips", backup_must_match=True)
    clip_start: float = opt(0.0, "Clip start (seconds)", "Video models: seconds skipped at the start of every clip (a title card, a fade-in).", ge=0, tab="training", applies_when=TAKES_VIDEO, heading="Video clips", backup_must_match=True)
    random_clip_window: bool = opt(True, "Random clip window", "Video models: a clip longer than Frames trains a window starting at a random time after Clip start, one per variation of the concept (Image variations; a new one each epoch without latent caching), so the whole clip is learnt, as in OneTrainer. Off: always its first frames after Clip start.", tab="training", applies_when=TAKES_VIDEO, heading="Video clips", backup_must_match=True)
    trained_expert: Expert = opt(Expert.HIGH_NOISE, "Trained expert", "Wan 2.2 A14B (T2V and I2V): which of its two transformers this run trains, each on its own noise range only (the model's boundary_ratio: 0.875 for T2V, 0.9 for I2V): HIGH_NOISE (the first steps: layout, motion) or LOW_NOISE (the rest: detail). Train one LoRA per expert in two runs; the LOW_NOISE one loads with load_into_transformer_2=True.", tab="training", applies_when=is_("model_type", "WAN_2_2_T2V_A14B", "WAN_2_2_I2V_A14B"), heading="Video clips", backup_must_match=True)
    image_to_video_share: float = opt(0.0, "Image-to-video share", "Wan 2.2 TI2V 5B and LTX-2 (text and image to video, one model): the fraction of training clips that start from their own first frame, as the model runs image-to-video: that frame is given clean and only the frames after it are learnt. 0 trains text-to-video only, 1 image-to-video only (samples without a control image then start from the first training clip's first frame), 0.5 both. Images always train text-to-video. A sample with a control image starts from it either way.", ge=0, le=1, tab="training", applies_when=is_("model_type", "WAN_2_2_TI2V_5B", "LTX_2"), heading="Video clips")
    attention_mechanism: AttentionMechanism = opt(AttentionMechanism.SDP, "Attention", "SDP (PyTorch, the default) or XFORMERS save a lot of VRAM over DEFAULT. XFORMERS, FLASH (SDP's flash kernel) and FLEX (FlexAttention, fused with Compile) need a CUDA GPU; the list has what reaches the model type.", tab="training", heading="Precision and speed")
    mse_strength: float = opt(1.0, "MSE strength", "Weight of the mean squared error loss.", ge=0, tab="training", heading="Loss")
    mae_strength: float = opt(0.0, "MAE strength", "Weight of the mean absolute error loss.", ge=0, tab="training", heading="Loss")
    log_cosh_strength: float = opt(0.0, "Log-cosh strength", "Weight of the log-cosh loss.", ge=0, tab="training", heading="Loss")
    huber_strength: float = opt(0.0, "Huber strength", "Weight of the Huber loss (robust to outliers).", ge=0, tab="training", heading="Loss")
    huber_delta: float = opt(1.0, "Huber delta", "Where the Huber loss switches from squared to linear.", gt=0, tab="training", applies_when=nonzero("huber_strength"), heading="Loss")
    vb_loss_strength: float = opt(1.0, "VB loss strength", "Weight of the variational bound loss that trains the variance of models that learn it (PixArt), as OneTrainer does. 0 = the variance is not trained.", ge=0, tab="training", applies_when=LEARNS_VARIANCE, heading="Loss")
    loss_weight_fn: LossWeight = opt(LossWeight.CONSTANT, "Loss weight function", "Weights the loss by timestep: CONSTANT, P2, MIN_SNR_GAMMA, DEBIASED_ESTIMATION, or SIGMA (flow-matching models only). Takes v-prediction into account.", tab="training", heading="Loss")
    loss_weight_strength: float = opt(5.0, "Loss weight strength", "Strength of the loss weight function: gamma for MIN_SNR_GAMMA (5 is usual), the exponent of P2 (as in OneTrainer, P2 uses k = 1).", ge=0, tab="training", applies_when=is_("loss_weight_fn", "MIN_SNR_GAMMA", "P2"), heading="Loss")
    dropout_probability: float = opt(0.0, "LoRA dropout", "Dropout on the LoRA layers: regularises small datasets. OFT v2: the probability that each rotated block is restored to the base model's (the identity) in a step; helps with overfitting. 0 disables.", ge=0, lt=1, tab="lora")
    loss_scaler: LossScaler = opt(LossScaler.NONE, "Loss scaler", "Multiply the loss by the batch size, the accumulation steps or both (GLOBAL_: also by the GPUs).", tab="training", heading="Loss")
    learning_rate_scaler: LearningRateScaler = opt(LearningRateScaler.NONE, "Learning rate scaler", "Multiply the learning rates by the square root of the batch size, accumulation steps or both (GLOBAL_: also the GPUs). NONE for Prodigy.", tab="training", heading="Learning rate", in_step=False)
    clip_grad_norm: float | None = opt(1.0, "Clip grad norm", "Clip the gradient norm to this value. Blank = no clipping.", gt=0, tab="training", heading="Epochs and batches")
    offset_noise_weight: float = opt(0.0, "Offset noise weight", "Adds a per-channel offset to the noise so the model learns very dark and very bright images.", ge=0, le=1, tab="training", heading="Noise")
    generalized_offset_noise: bool = opt(False, "Generalized offset noise", "Use the generalized form of offset noise.", tab="training", applies_when=nonzero("offset_noise_weight"), heading="Noise")
    perturbation_noise_weight: float = opt(0.0, "Perturbation noise weight", "Adds this much extra noise to the model's input but not to its target (input perturbation, e.g. 0.1), which can reduce exposure bias.", ge=0, le=1, tab="training", heading="Noise")
    rescale_noise_scheduler_to_zero_terminal_snr: bool = opt(False, "Zero terminal SNR", "Rescale the noise schedule to zero terminal SNR and train v-prediction, as OneTrainer (Force epsilon prediction keeps epsilon here). Samples start at the last timestep with guidance rescaled by 0.7, as OneTrainer's.", tab="training", applies_when=DDPM_SCHEDULE, heading="Noise")
    force_v_prediction: bool = opt(False, "Force v-prediction", "Train with v-prediction whatever the model says.", tab="training", applies_when=DDPM_SCHEDULE, heading="Noise")
    force_epsilon_prediction: bool = opt(False, "Force epsilon prediction", "Train with epsilon prediction whatever the model says.", tab="training", applies_when=DDPM_SCHEDULE, heading="Noise")
    min_noising_strength: float = opt(0.0, "Min noising strength", "Lowest timestep drawn (a fraction of all), before Timestep shift moves it, as OneTrainer.", ge=0, le=1, tab="training", heading="Timestep distribution")
    max_noising_strength: float = opt(1.0, "Max noising strength", "Highest timestep drawn (a fraction of all), before Timestep shift moves it: 0.5 with shift 3 reaches 0.75.", ge=0, le=1, tab="training", heading="Timestep distribution")
    timestep_distribution: TimestepDistribution = opt(TimestepDistribution.UNIFORM, "Timestep distribution", "How training timesteps are drawn: UNIFORM, SIGMOID, LOGIT_NORMAL, HEAVY_TAIL, COS_MAP, INVERTED_PARABOLA or BETA.", tab="training", heading="Timestep distribution")
    noising_weight: float = opt(0.0, "Noising weight", "Shapes the timestep distribution: the spread of LOGIT_NORMAL, the tails of HEAVY_TAIL, the slope of SIGMOID, the narrowness of INVERTED_PARABOLA; BETA's alpha.", tab="training", heading="Timestep distribution")
    noising_bias: float = opt(0.0, "Noising bias", "Moves the centre of LOGIT_NORMAL, SIGMOID and INVERTED_PARABOLA: positive = more noise, negative = less; BETA's beta.", tab="training", heading="Timestep distribution")
    timestep_shift: float = opt(1.0, "Timestep shift", "Moves the drawn timesteps towards more noise (above 1) or less (below 1); Dynamic timestep shifting replaces it.", gt=0, applies_when=DDPM_SCHEDULE | off("dynamic_timestep_shifting"), tab="training", heading="Timestep distribution")
    dynamic_timestep_shifting: bool = opt(False, "Dynamic timestep shifting", "Flow-matching models (Flux, SD 3, ...): shift timesteps towards noise by the image's token count, as Flux and SD 3 sample (from the model's base_shift at 256 tokens to max_shift at 4096); replaces Timestep shift, as in OneTrainer.", tab="training", applies_when=FLOW_SCHEDULE, heading="Timestep distribution")

    # --- Model parts (shown on the training tab, OneTrainer's "Train UNet / text encoder") -----
    unet: ModelPartConfig = opt(default_factory=_part, label="UNet", tooltip="UNet settings. Its learning rate replaces the base learning rate when set.", tab="training")
    prior: SeparateModelPartConfig = opt(default_factory=SeparateModelPartConfig, label="Prior", tooltip="Würstchen / Stable Cascade: the prior (stage C), the network that trains. Its learning rate replaces the base learning rate when set.", tab="training")
    transformer: TransformerPartConfig = opt(default_factory=TransformerPartConfig, label="Transformer", tooltip="Transformer models (PixArt, SD3, Flux): the denoising transformer's settings. Its learning rate replaces the base learning rate when set.", tab="training")
    unconditional_transformer: ModelPartConfig = opt(default_factory=lambda: _part(train=False, gradient_checkpointing=False, activation_offloading=False, offload_fraction=1.0), label="Unconditional transformer", tooltip="Ideogram 4's unconditional transformer (the negative branch of its CFG in samples): frozen, it waits in RAM (offload fraction 1) and takes turns on the GPU with the transformer while a sample is made. Include off (as OneTrainer's): it is neither read from disk nor kept in memory, and samples with CFG above 1 run an empty prompt through the trained transformer instead. Its weight data type is acted on: a quantized type (NFLOAT_4 as in OneTrainer's presets, INT_8, FLOAT_8, INT_W8A8, FLOAT_W8A8) stores it so in RAM, and it moves to the GPU quantized; the other settings are not.", tab="training", status=P, acted_on=("include", "weight_dtype"))
    text_encoder: TextEncoderPartConfig = opt(default_factory=_text_encoder, label="Text encoder", tooltip="Text encoder settings. Its learning rate replaces the base learning rate when set. By default it trains for the first 30 epochs only.", tab="training")
    text_encoder_layer_skip: int = opt(0, "Clip skip", "Skip the last N layers of the text encoder, in training and in samples (clip skip 1 = the second-to-last layer, as anime models built on NovelAI use).", ge=0, le=11, tab="training")
    text_encoder_sequence_length: int | None = opt(512, "Text encoder sequence length", "Tokens the text encoder (T5 or a language model) reads, in training and in samples; longer captions are cut. Padding is masked, so a longer window only costs time. Blank = the model's own window: PixArt-α 120, PixArt-Σ and Sana 300, HunyuanVideo 256, LTX-2 1024, Ideogram 4 2048, the others 512. WAN_2_1_I2V reads exactly 512.", ge=1, tab="training", advanced=True, applies_when=READS_TOKEN_WINDOW)
    text_encoder_2: TextEncoderPartConfig = opt(default_factory=_text_encoder, label="Text encoder 2", tooltip="SDXL: the second text encoder (OpenCLIP ViT-G). It is said to work better with natural language, the first one with tags. Its caption dropout is drawn separately from the first encoder's.", tab="training")
    text_encoder_2_layer_skip: int = opt(0, "Clip skip 2", "Skip the last N layers of the second text encoder, in training and in samples (SDXL counts from its second-to-last layer, as it always reads that one).", ge=0, tab="training")
    text_encoder_max_token_length: int = opt(75, "Max caption tokens (CLIP)", "SD 1.x/2.x and SDXL: the caption tokens the CLIP text encoders read, in training and in samples. 75 is CLIP's own window, past which a caption is cut (as in OneTrainer); 150 or 225 read a longer caption in windows of 75, each encoded on its own and joined, as A1111 and ComfyUI read a long prompt (each window keeps its start and end tokens there; kohya's max_token_length, which this imports, joins them without the inner ones: the same words, 231 tokens here for 227 there). Each window is one more pass of the text encoders (done once per caption when they do not train and the text is cached) and longer cross-attention.", ge=75, le=750, tab="training", advanced=True, applies_when=CLIP_CAPTIONS)
    text_encoder_2_sequence_length: int | None = opt(77, "Text encoder 2 sequence length", "Tokens the second text encoder reads (Flux: T5's tokens; blank = 512, the pipeline's default).", ge=1, tab="training", advanced=True)
    text_encoder_3: TextEncoderPartConfig = opt(default_factory=_text_encoder, label="Text encoder 3", tooltip="SD 3 / 3.5: the third text encoder (T5 XXL).", tab="training")
    text_encoder_3_sequence_length: int = opt(77, "T5 tokens (SD 3)", "SD 3 / 3.5: the caption tokens T5 reads, in training and in samples; a longer caption is cut. 77 is OneTrainer's; diffusers' pipeline and sd-scripts read 256 (its t5xxl_max_token_length). T5's padding is read too (SD 3 was trained so), so a sample is best made at the window it trained with.", ge=1, le=512, tab="training", advanced=True, applies_when=is_("model_type", "STABLE_DIFFUSION_3", "STABLE_DIFFUSION_35"))
    text_encoder_3_layer_skip: int = opt(0, "Clip skip 3", "Skip the last N layers of T5 (SD 3), its final norm applied.", ge=0, tab="training")
    text_encoder_4: LlamaPartConfig = opt(default_factory=_llama, label="Text encoder 4", tooltip="HiDream: the fourth text encoder (Llama 3.1) and where it comes from.", tab="training")
    text_encoder_4_layer_skip: int = opt(0, "Clip skip 4", "OneTrainer keeps this key, but none of its models reads it (HiDream's transformer takes Llama's layers as they are); nor does this trainer. Kept so that OneTrainer's configs load; not shown.", ge=0, tab="training", compat=True)
    vae: VaePartConfig = opt(default_factory=lambda: VaePartConfig(train=False), label="VAE", tooltip="VAE settings. Keep it at FLOAT_32 (or BFLOAT_16) to avoid black samples.", tab="training")
    effnet_encoder: SeparateModelPartConfig = opt(default_factory=SeparateModelPartConfig, label="EffNet encoder", tooltip="Würstchen / Stable Cascade: the EfficientNet image encoder that turns training images into the prior's latents.", tab="training")
    decoder: SeparateModelPartConfig = opt(default_factory=SeparateModelPartConfig, label="Decoder", tooltip="Würstchen / Stable Cascade: the decoder (stage B) that turns the prior's latents into an image for samples.", tab="training")
    decoder_text_encoder: ModelPartConfig = opt(default_factory=_part, label="Decoder text encoder", tooltip="Würstchen 2: the decoder's text encoder (loaded from the decoder model).", tab="training")
    decoder_vqgan: ModelPartConfig = opt(default_factory=_part, label="Decoder VQGAN", tooltip="Würstchen / Stable Cascade: the VQGAN (stage A, loaded from the decoder model).", tab="training")

    # --- Masked training ---------------------------------------------------------------------
    masked_training: bool = opt(False, "Masked training", "Learn only from the white parts of each image's mask (a black-and-white '<name>-masklabel.png' next to the image), e.g. the subject without its background.", tab="training", heading="Masked training")
    unmasked_probability: float = opt(0.1, "Unmasked probability", "Share of samples trained on the whole image instead of the mask (0 to 1); with batch size 1, the share of steps. OneTrainer's tooltip says the same, but its code draws it for inpainting models only (SD 1.5 / 2.0 / SDXL inpainting, Flux Fill): set 0 to train another model as OneTrainer does.", ge=0, le=1, tab="training", applies_when=MASKED, heading="Masked training")
    unmasked_weight: float = opt(0.1, "Unmasked weight", "Loss weight of the area outside the mask (0 to 1). Inpainting models (which also take the mask as input) are masked so too; OneTrainer trains them on the whole image (a limitation its code marks to be fixed).", ge=0, le=1, tab="training", applies_when=MASKED, heading="Masked training")
    normalize_masked_area_loss: bool = opt(False, "Normalize masked area loss", "Scale the loss by the mask's area. Use when masked areas are small compared to the image (e.g. jewellery); with larger masks it mostly raises the loss.", tab="training", applies_when=MASKED, heading="Masked training")
    masked_prior_preservation_weight: float = opt(0.0, "Masked prior preservation", "LoRA: outside the mask, also pull the prediction towards the base model's (the LoRA turned off) with this weight; 0 = off.", ge=0, tab="training", applies_when=MASKED & is_("training_method", "LORA", default="FINE_TUNE"), heading="Masked training")
    custom_conditioning_image: bool = opt(False, "Custom conditioning image", "Inpainting models: an image's '<name>-condlabel' image (beside it) is its conditioning image instead of the masked image, e.g. to learn object removal; images without one keep the masked image.", tab="training", applies_when=INPAINTS, heading="Masked training")
    multires_noise_iterations: int = opt(0, "Multires noise iterations", "Multi-resolution (pyramid) noise, as kohya's sd-scripts: noise drawn at this many sizes, each 2 to 4 times coarser than the last, is added to the training noise, which helps the model learn overall brightness, colour and large shapes. 6 to 10 is usual there; 0 turns it off.", ge=0, le=32, tab="training", heading="kohya's noise options")
    multires_noise_discount: float = opt(0.3, "Multires noise discount", "Multires noise: each coarser size is weakened by this factor once more (size i by discount^i); sd-scripts' default 0.3, lower keeps the noise finer.", gt=0, le=1, tab="training", applies_when=nonzero("multires_noise_iterations"), heading="kohya's noise options")
    offset_noise_random_strength: bool = opt(False, "Random offset strength", "Offset noise: each step draws its strength between 0 and the Offset noise weight, as kohya's noise_offset_random_strength.", tab="training", applies_when=nonzero("offset_noise_weight"), heading="kohya's noise options")
    adaptive_noise_scale: float = opt(0.0, "Adaptive noise scale", "Offset noise: adds this times each image's mean latent value per channel (its absolute value) to the offset's strength, so images far from the average brightness and colour get more, as kohya's adaptive_noise_scale (e.g. 0.00357, a tenth of the offset). Below 0 lowers it (never under 0).", ge=-1, le=1, tab="training", applies_when=nonzero("offset_noise_weight"), heading="kohya's noise options")
    perturbation_noise_random_strength: bool = opt(False, "Random perturbation strength", "Perturbation noise: each step draws its strength between 0 and the Perturbation noise weight, as kohya's ip_noise_gamma_random_strength.", tab="training", applies_when=nonzero("perturbation_noise_weight"), heading="kohya's noise options")

    # --- Embedding ---------------------------------------------------------------------------
    embedding_learning_rate: float | None = opt(None, "Embedding learning rate", "Learning rate of the embeddings (the EMBEDDING method's and the additional ones); replaces the base learning rate when set.", ge=0, tab="embedding")
    preserve_embedding_norm: bool = opt(False, "Preserve embedding norm", "After every step, scale the trained embedding vectors back to the median length of the model's own token embeddings.", tab="embedding")
    embedding: EmbeddingConfig = opt(default_factory=EmbeddingConfig, label="Embedding", tooltip="The embedding trained by the EMBEDDING method.", tab="embedding")
    additional_embeddings: list[EmbeddingConfig] = opt(default_factory=list, label="Additional embeddings", tooltip="More embeddings to train or use alongside a LoRA, fine-tune or embedding (e.g. a trigger token). Saved inside the LoRA file when 'Bundle embeddings' is on, else as files in '<output>_embeddings/' next to the output.", tab="embedding")
    embedding_weight_dtype: DataType = opt(DataType.FLOAT_32, "Embedding data type", "Data type of the trained embedding weights.", tab="embedding")

    cloud: dict[str, Any] = opt(default_factory=lambda: deepcopy(CLOUD_DEFAULTS), label="Cloud", tooltip="OneTrainer's cloud training settings (rent a GPU box and train there). Kept for OneTrainer configs; here, open the page through a share link on the rented box instead.", tab="general", status=P)

    peft_type: PeftType = opt(PeftType.LORA, "Adapter type", "LORA (optionally DoRA), LOHA (Hadamard product), LOKR (Kronecker product, rank = LoKr dimension) or OFT_2 (OFT v2: block-wise orthogonal rotations, no rank or alpha). LoHa/LoKr files load in A1111, Forge and ComfyUI, not in diffusers; OFT v2 files (oft_R keys, as OneTrainer writes them) load in OneTrainer and in ComfyUI with the ComfyUI-OFTv2 node, or merge them into a checkpoint with the Convert tool.", tab="lora", first=1, backup_must_match=LORA_METHOD)
    lora_model_name: str = opt("", "Base LoRA", "Continue training an existing LoRA (kohya or diffusers keys): a file, a Hugging Face file address, or a Civitai LoRA's address (downloaded once, with General → Civitai API key). It continues on its own layers, rank and alpha, whatever preset trained it (Layer preset, Rank and Alpha are for a new LoRA); a part whose training is off keeps the file's layers as they are. Blank = a new LoRA. A backup continues only with the Base LoRA it started from (its layers are the file's).", tab="lora", backup_must_match=LORA_METHOD)
    lora_rank: int = opt(16, "Rank", "Size of the LoRA matrices. 8/8 (rank/alpha) is good for a person, 16 may be better but less flexible; rank 16 is enough for most purposes.", ge=1, le=1024, tab="lora", applies_when=is_not("peft_type", "LOKR", "OFT_2", default="LORA"), first=2, backup_must_match=LORA_RANKED)
    lora_alpha: float = opt(1.0, "Alpha", "Scales the LoRA output by alpha/rank; keep alpha at or below the rank. alpha = rank means no scaling.", gt=0, tab="lora", applies_when=is_not("peft_type", "OFT_2", default="LORA"), first=3, backup_must_match=LORA_SCALED)
    lora_decompose: bool = opt(False, "DoRA", "Decompose weights into magnitude and direction (DoRA). KOHYA_LORA files (dora_scale) load in A1111, Forge and ComfyUI; diffusers loads DoRA only from diffusers/PEFT keys (DIFFUSERS_LORA) with the output axis on.", tab="lora", applies_when=PLAIN_LORA, first=5, backup_must_match=NEW_LORA & PLAIN_LORA)
    lora_decompose_norm_epsilon: bool = opt(True, "DoRA norm epsilon", "DoRA: add a small epsilon to the norm for stability.", tab="lora", advanced=True, applies_when=PLAIN_LORA & on("lora_decompose"), first=6)
    lora_decompose_output_axis: bool = opt(False, "DoRA output axis", "DoRA: take the norm over each output row (what peft and diffusers compute) instead of each input column (OneTrainer's default, the one A1111 reads).", tab="lora", advanced=True, applies_when=PLAIN_LORA & on("lora_decompose"), first=7, backup_must_match=DORA)
    lora_rank_dropout: float = opt(0.0, "Rank dropout", "While training, each rank of a LoRA layer is left out for an image with this probability (the others scaled up to make up for it), as kohya's rank_dropout (0.1 is usual there): a regulariser beside LoRA dropout. 0 turns it off. Plain LoRA only (not DoRA).", ge=0, lt=1, tab="lora", applies_when=PLAIN_LORA)
    lora_module_dropout: float = opt(0.0, "Module dropout", "While training, a whole LoRA layer is left out of a step with this probability, as kohya's module_dropout (0.1 is usual there). 0 turns it off. Plain LoRA only (not DoRA).", ge=0, lt=1, tab="lora", applies_when=PLAIN_LORA)
    lora_max_norm: float = opt(0.0, "Max norm (scale weight norms)", "After every optimizer step, a LoRA layer whose change to its weight (up x down x alpha/rank) has a norm above this is scaled back to it, as kohya's scale_weight_norms (1 is usual there): no layer moves far, so the LoRA combines better with others and overtrains less. 0 turns it off. LoRA and DoRA only.", ge=0, tab="lora", applies_when=PLAIN_LORA)
    lora_weight_dtype: DataType = opt(DataType.FLOAT_32, "LoRA weight data type", "Data type of the trained LoRA weights. BFLOAT_16 saves a little VRAM on cards that support it.", tab="lora")
    bundle_additional_embeddings: bool = opt(True, "Bundle embeddings", "Also save additional embeddings inside the LoRA file (bundle_emb keys, as OneTrainer): A1111 and Forge read them; ComfyUI's LoRA loader skips them and diffusers' load_lora_weights refuses such a file. Each embedding is always saved as its own file too, in <output>_embeddings/ beside the LoRA (ComfyUI's embedding loader reads those).", tab="lora")
    oft_block_size: int = opt(32, "OFT v2 block size", "The block size parameter used when creating a new OFT v2: each layer's inputs are rotated in blocks of this size (a size that does not divide a layer's inputs is moved to the nearest one that does, as OneTrainer does).", ge=1, tab="lora", applies_when=OFT, first=8, backup_must_match=OFT_SHAPE)
    oft_block_share: bool = opt(False, "Block share", "Share the OFT parameters between blocks. A single rotation matrix is shared across all blocks within a layer, drastically cutting the number of trainable parameters and yielding very compact adapter files, potentially improving generalization but at the cost of significant expressiveness, which can lead to underfitting on more complex or diverse tasks.", tab="lora", applies_when=OFT, backup_must_match=OFT_SHAPE)
    oft_scaled: bool = opt(False, "Scaled OFT (SOFT)", "Applies a scaling factor to the learned weights. This ensures that the effective learning rate remains consistent across different block sizes. Without this, different block sizes require significantly different learning rates.", tab="lora", applies_when=OFT, backup_must_match=OFT_SHAPE)
    lokr_dim: int = opt(16, "LoKr dimension", "LoKr: rank of the Kronecker factors (LoKr uses this, not Rank). A factor whose sides are both under twice this is trained as a full matrix; a layer whose two factors are both full matrices trains at scale 1 (alpha ignored), as in OneTrainer.", ge=1, tab="lora", applies_when=LOKR, first=4, backup_must_match=LOKR_SHAPE)
    lokr_decompose_both: bool = opt(False, "LoKr decompose both", "LoKr: decompose both Kronecker factors.", tab="lora", advanced=True, applies_when=LOKR, backup_must_match=LOKR_SHAPE)
    lokr_decompose_factor: int = opt(-1, "LoKr factor", "LoKr: factor for splitting dimensions (-1 = automatic).", tab="lora", advanced=True, applies_when=LOKR, backup_must_match=LOKR_SHAPE)
    lokr_use_tucker: bool = opt(False, "LoKr Tucker", "LoKr: use Tucker decomposition for conv layers. ComfyUI and Forge skip such conv layers of a kohya file (their merge of them fails); A1111 loads them.", tab="lora", advanced=True, applies_when=LOKR, backup_must_match=LOKR_SHAPE)
    lokr_weight_decompose: bool = opt(False, "LoKr weight decompose", "LoKr: DoRA on each LoKr layer: a trained magnitude (started at the base weight's norms) times the adapted weight divided by its norm. Saved as KOHYA_LORA with dora_scale; peft/diffusers keys have no form for it.", tab="lora", advanced=True, applies_when=LOKR, backup_must_match=LOKR_SHAPE)
    lokr_dora_on_output: bool = opt(True, "LoKr DoRA on output", "LoKr DoRA: take the norm over each output row (OneTrainer's default; LyCORIS applies it as trained, A1111, Forge and ComfyUI do not) instead of each input column (which A1111, Forge and ComfyUI apply as trained).", tab="lora", advanced=True, applies_when=LOKR & on("lokr_weight_decompose"), backup_must_match=LOKR_SHAPE & on("lokr_weight_decompose"))
    lokr_full_matrix: bool = opt(False, "LoKr full matrix", "LoKr: train the second Kronecker factor as one full matrix (lokr_w2) instead of a product of two matrices of rank LoKr dimension, whatever that dimension is. With the first factor whole too (LoKr decompose both off), the layer trains at scale 1 (alpha ignored), as in OneTrainer.", tab="lora", advanced=True, applies_when=LOKR, backup_must_match=LOKR_SHAPE)
    lokr_vec_trick: bool = opt(True, "LoKr vec trick", "LoKr: Linear layers apply the two factors to the input one after the other instead of building the full Kronecker matrix: the same result in less memory. Not used with LoKr weight decompose, which needs the full weight.", tab="lora", advanced=True, applies_when=LOKR)

    # --- Optimizer ---------------------------------------------------------------------------
    optimizer: OptimizerConfig = opt(default_factory=OptimizerConfig, label="Optimizer", tooltip="Optimizer and its settings. The defaults are the optimizer's own and often not the best for diffusion models.", tab="training", in_step=False)
    optimizer_defaults: dict[str, OptimizerConfig] = opt(default_factory=dict, label="Remembered optimizer settings", tooltip="The last settings used for each optimizer, recalled when switching back to it.", tab="training", compat=True, in_step=False)

    # --- Sampling ----------------------------------------------------------------------------
    sample_definition_file_name: str = opt("training_samples/samples.json", "Sample file", "OneTrainer keeps samples in a separate JSON file; it is read when a OneTrainer config is imported. Here samples are stored in the config itself.", tab="sampling", compat=True, in_step=False)
    samples: list[SampleConfig] = opt(default_factory=list, label="Samples", tooltip="Prompts to sample while training.", tab="sampling", in_step=False)
    sample_after: int = opt(10, "Sample after", "Generate samples every N units.", ge=0, tab="sampling", in_step=False)
    sample_after_unit: TimeUnit = opt(TimeUnit.MINUTE, "Sample unit", "Unit for 'sample after': STEP, EPOCH, SECOND, MINUTE, HOUR, or NEVER.", tab="sampling", in_step=False)
    sample_skip_first: int = opt(0, "Skip first", "Do not sample during the first N units of the interval's unit (steps, epochs, minutes...), as OneTrainer: every 5 steps skipping 12 first samples at step 15.", ge=0, tab="sampling", in_step=False)
    sample_image_format: ImageFormat = opt(ImageFormat.JPG, "Sample image format", "File format of sample images: JPG (small) or PNG (lossless).", tab="sampling", in_step=False)
    sample_video_format: VideoFormat = opt(VideoFormat.MP4, "Sample video format", "Video models: samples as MP4 clips, or as a folder of PNG or JPG frames each (the page shows the first frame).", tab="sampling", in_step=False, applies_when=TAKES_VIDEO)
    sample_audio_format: AudioFormat = opt(AudioFormat.MP3, "Sample audio format", "OneTrainer's file format of audio samples; none of its models makes audio (it writes none), and none here does. Kept so that OneTrainer's configs load; not shown.", tab="sampling", compat=True, in_step=False)
    samples_to_tensorboard: bool = opt(True, "Samples to TensorBoard", "With TensorBoard on, also write sample images to its log (video samples are not).", tab="sampling", in_step=False)
    non_ema_sampling: bool = opt(True, "Non-EMA sampling", "With EMA on, also sample with the non-EMA weights.", tab="sampling")

    # --- Backup ------------------------------------------------------------------------------
    backup_after: int = opt(30, "Backup after", "Write a backup (weights, optimizer, progress) every N units.", ge=0, tab="backup", in_step=False)
    backup_after_unit: TimeUnit = opt(TimeUnit.MINUTE, "Backup unit", "Unit for 'backup after'.", tab="backup", in_step=False)
    rolling_backup: bool = opt(False, "Rolling backup", "Keep only the newest backups.", tab="backup", in_step=False)
    rolling_backup_count: int = opt(3, "Rolling backup count", "How many backups rolling backup keeps.", ge=1, tab="backup", in_step=False)
    backup_before_save: bool = opt(True, "Backup before save", "Write a backup just before the final model is saved.", tab="backup", in_step=False)
    save_every: int = opt(0, "Save every", "Also save the model every N units (0 = only at the end).", ge=0, tab="backup", in_step=False)
    save_every_unit: TimeUnit = opt(TimeUnit.NEVER, "Save unit", "Unit for 'save every'.", tab="backup", in_step=False)
    save_keep_last: int = opt(0, "Keep last saves", "With Save every: keep only the newest N of the saves it writes, deleting older ones (and their embeddings' folders) as new ones are written, so a long run does not fill the disk; Save now checkpoints and the final model are never deleted. 0 keeps all. kohya's save_last_n_epochs / save_last_n_steps (there counted in epochs or steps, here in saves).", ge=0, tab="backup", in_step=False)
    save_skip_first: int = opt(0, "Save skip first", "Do not save during the first N units of the interval's unit (steps, epochs, minutes...), as OneTrainer: every 2 epochs skipping 3 first saves after epoch 4.", ge=0, tab="backup", in_step=False)
    save_filename_prefix: str = opt("", "Save file prefix", "Prefix of intermediate save file names.", tab="backup", in_step=False)

    secrets: SecretsConfig = opt(default_factory=SecretsConfig, label="Secrets", tooltip="Tokens. Stored in the config file: do not share that file.", tab="general")

    @field_validator("resolution")
    @classmethod
    def _check_resolution(cls, value: str) -> str:
        from .resolution import parse_resolutions

        parse_resolutions(value)
        return value

    @field_validator("text_encoder_max_token_length")
    @classmethod
    def _check_max_token_length(cls, value: int) -> int:
        if value % 75:
            raise ValueError(f"{value} is not a whole number of CLIP's 75-token windows; use 75, 150 or 225")
        return value

    @field_validator("frames")
    @classmethod
    def _check_frames(cls, value: str) -> str:
        text = str(value).strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"frames: '{value}' is not a whole number of frames of at least 1 (like 25)")
        return text
