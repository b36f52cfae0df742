"""Enumerations shared by the config, the trainer and the page.

Names and values are OneTrainer's, so that OneTrainer configs and presets import unchanged.
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:  # JSON and the page show the bare name
        return self.value


class ModelType(StrEnum):
    STABLE_DIFFUSION_15 = "STABLE_DIFFUSION_15"
    STABLE_DIFFUSION_15_INPAINTING = "STABLE_DIFFUSION_15_INPAINTING"
    STABLE_DIFFUSION_20 = "STABLE_DIFFUSION_20"
    STABLE_DIFFUSION_20_BASE = "STABLE_DIFFUSION_20_BASE"
    STABLE_DIFFUSION_20_INPAINTING = "STABLE_DIFFUSION_20_INPAINTING"
    STABLE_DIFFUSION_21 = "STABLE_DIFFUSION_21"
    STABLE_DIFFUSION_21_BASE = "STABLE_DIFFUSION_21_BASE"
    STABLE_DIFFUSION_XL_10_BASE = "STABLE_DIFFUSION_XL_10_BASE"
    STABLE_DIFFUSION_XL_10_BASE_INPAINTING = "STABLE_DIFFUSION_XL_10_BASE_INPAINTING"
    WUERSTCHEN_2 = "WUERSTCHEN_2"
    STABLE_CASCADE_1 = "STABLE_CASCADE_1"
    PIXART_ALPHA = "PIXART_ALPHA"
    STABLE_DIFFUSION_20_DEPTH = "STABLE_DIFFUSION_20_DEPTH"
    STABLE_DIFFUSION_3 = "STABLE_DIFFUSION_3"
    STABLE_DIFFUSION_35 = "STABLE_DIFFUSION_35"
    PIXART_SIGMA = "PIXART_SIGMA"
    FLUX_DEV_1 = "FLUX_DEV_1"
    FLUX_FILL_DEV_1 = "FLUX_FILL_DEV_1"
    FLUX_2 = "FLUX_2"
    SANA = "SANA"
    HUNYUAN_VIDEO = "HUNYUAN_VIDEO"
    HI_DREAM_FULL = "HI_DREAM_FULL"
    CHROMA_1 = "CHROMA_1"
    QWEN = "QWEN"
    Z_IMAGE = "Z_IMAGE"
    ANIMA = "ANIMA"
    KREA_2 = "KREA_2"
    ERNIE = "ERNIE"
    IDEOGRAM_4 = "IDEOGRAM_4"
    # Not in OneTrainer (its Wan request was closed as not planned); trained here.
    WAN_2_1 = "WAN_2_1"
    WAN_2_1_I2V = "WAN_2_1_I2V"
    WAN_2_2_TI2V_5B = "WAN_2_2_TI2V_5B"
    WAN_2_2_T2V_A14B = "WAN_2_2_T2V_A14B"
    WAN_2_2_I2V_A14B = "WAN_2_2_I2V_A14B"
    LTX_2 = "LTX_2"
    # Not in OneTrainer (its users ask for it: issues #1035, #1665): image-conditioned editing, trained here.
    QWEN_IMAGE_EDIT = "QWEN_IMAGE_EDIT"


class Expert(StrEnum):
    """Which transformer of a two-expert model (Wan 2.2 A14B) a run trains: the one for high noise
    (the first steps of a sample, t >= its boundary) or the one for low noise (the rest)."""

    HIGH_NOISE = "HIGH_NOISE"
    LOW_NOISE = "LOW_NOISE"


class TrainingMethod(StrEnum):
    FINE_TUNE = "FINE_TUNE"
    LORA = "LORA"
    EMBEDDING = "EMBEDDING"
    FINE_TUNE_VAE = "FINE_TUNE_VAE"


class DataType(StrEnum):
    NONE = "NONE"
    FLOAT_8 = "FLOAT_8"
    FLOAT_16 = "FLOAT_16"
    FLOAT_32 = "FLOAT_32"
    BFLOAT_16 = "BFLOAT_16"
    TFLOAT_32 = "TFLOAT_32"
    INT_8 = "INT_8"
    NFLOAT_4 = "NFLOAT_4"
    INT_W8A8 = "INT_W8A8"  # 8-bit weights and 8-bit matmuls (training/quantize.py LinearW8A8)
    FLOAT_W8A8 = "FLOAT_W8A8"
    GGUF = "GGUF"  # the transformer's weights as a .gguf transformer.model_name stores them (models/transformer_file.py gguf_options)
    # the same .gguf weights, each forward's matmuls in 8 bits: the weight dequantized and requantized per
    # row, the activations per token (training/quantize.py), as OneTrainer's GGUF A8 float / int
    GGUF_A8_FLOAT = "GGUF_A8_FLOAT"
    GGUF_A8_INT = "GGUF_A8_INT"


# the weight types that quantize a part's Linear layers when it loads (training/quantize.py)
QUANTIZED_TYPES = (DataType.FLOAT_8, DataType.INT_8, DataType.NFLOAT_4, DataType.INT_W8A8, DataType.FLOAT_W8A8)
# the weight types that read a .gguf transformer file (config/gguf.py)
GGUF_TYPES = (DataType.GGUF, DataType.GGUF_A8_FLOAT, DataType.GGUF_A8_INT)


class ModelFormat(StrEnum):
    DIFFUSERS = "DIFFUSERS"
    CKPT = "CKPT"
    SAFETENSORS = "SAFETENSORS"
    LEGACY_SAFETENSORS = "LEGACY_SAFETENSORS"
    ORIGINAL_SINGLE_FILE = "ORIGINAL_SINGLE_FILE"
    KOHYA_LORA = "KOHYA_LORA"
    INTERNAL = "INTERNAL"
    # Newer OneTrainer output formats, accepted on import.
    COMFY_LORA = "COMFY_LORA"
    DIFFUSERS_LORA = "DIFFUSERS_LORA"
    ORIGINAL_LORA = "ORIGINAL_LORA"
    LEGACY_LORA = "LEGACY_LORA"
    ORIGINAL_TRANSFORMER = "ORIGINAL_TRANSFORMER"
    COMFY_TRANSFORMER = "COMFY_TRANSFORMER"


# Formats that hold LoRA weights (the rest hold a whole model or a part of it).
LORA_FORMATS = frozenset({
    ModelFormat.KOHYA_LORA, ModelFormat.SAFETENSORS, ModelFormat.COMFY_LORA,
    ModelFormat.DIFFUSERS_LORA, ModelFormat.ORIGINAL_LORA, ModelFormat.LEGACY_LORA,
})
# The LoRA formats the trainer writes in one key layout whatever the family: kohya names (lora_unet_...,
# lora_te_...; what A1111, ComfyUI and Forge read; OneTrainer's COMFY_LORA is this layout, and its
# LEGACY_SAFETENSORS LoRA is kohya-named too, and its ORIGINAL_LORA's original-namespace names load in
# the same programs) or diffusers/PEFT names (what a pipeline's load_lora_weights reads). SAFETENSORS
# takes the family's layout (config/families.lora_layout).
KOHYA_LORA_FORMATS = frozenset({ModelFormat.KOHYA_LORA, ModelFormat.COMFY_LORA, ModelFormat.LEGACY_SAFETENSORS,
                                ModelFormat.ORIGINAL_LORA})
DIFFUSERS_LORA_FORMATS = frozenset({ModelFormat.DIFFUSERS_LORA})


class GradientCheckpointing(StrEnum):
    """Per model part. AUTO (ours): on only when the run would not fit in memory without it (the
    memory planner, training/memory_plan.py, decides and logs why). OneTrainer writes a bool per
    part; True/False load as ON/OFF."""

    AUTO = "AUTO"
    ON = "ON"
    OFF = "OFF"

    @classmethod
    def _missing_(cls, value: object) -> GradientCheckpointing | None:
        if isinstance(value, bool):
            return cls.ON if value else cls.OFF
        return None


class TimeUnit(StrEnum):
    EPOCH = "EPOCH"
    STEP = "STEP"
    SECOND = "SECOND"
    MINUTE = "MINUTE"
    HOUR = "HOUR"
    NEVER = "NEVER"
    ALWAYS = "ALWAYS"


class LearningRateScheduler(StrEnum):
    CONSTANT = "CONSTANT"
    LINEAR = "LINEAR"
    COSINE = "COSINE"
    COSINE_WITH_RESTARTS = "COSINE_WITH_RESTARTS"
    COSINE_WITH_HARD_RESTARTS = "COSINE_WITH_HARD_RESTARTS"
    REX = "REX"
    ADAFACTOR = "ADAFACTOR"
    CUSTOM = "CUSTOM"


class Optimizer(StrEnum):
    ADAGRAD = "ADAGRAD"
    ADAGRAD_8BIT = "ADAGRAD_8BIT"
    ADAM = "ADAM"
    ADAM_8BIT = "ADAM_8BIT"
    ADAMW = "ADAMW"
    ADAMW_8BIT = "ADAMW_8BIT"
    LAMB = "LAMB"
    LAMB_8BIT = "LAMB_8BIT"
    LARS = "LARS"
    LARS_8BIT = "LARS_8BIT"
    LION = "LION"
    LION_8BIT = "LION_8BIT"
    RMSPROP = "RMSPROP"
    RMSPROP_8BIT = "RMSPROP_8BIT"
    SGD = "SGD"
    SGD_8BIT = "SGD_8BIT"
    DADAPT_ADA_GRAD = "DADAPT_ADA_GRAD"
    DADAPT_ADAM = "DADAPT_ADAM"
    DADAPT_ADAN = "DADAPT_ADAN"
    DADAPT_LION = "DADAPT_LION"
    DADAPT_SGD = "DADAPT_SGD"
    PRODIGY = "PRODIGY"
    ADAFACTOR = "ADAFACTOR"
    CAME = "CAME"
    SCHEDULE_FREE_ADAMW = "SCHEDULE_FREE_ADAMW"
    SCHEDULE_FREE_SGD = "SCHEDULE_FREE_SGD"
    ADEMAMIX = "AdEMAMix"
    # Newer OneTrainer optimizers (names as in its optimizer defaults), accepted on import.
    ADABELIEF = "ADABELIEF"
    ADAMUON_ADV = "ADAMUON_ADV"
    ADAMW_ADV = "ADAMW_ADV"
    ADOPT = "ADOPT"
    ADOPT_ADV = "ADOPT_ADV"
    AIDA = "AIDA"
    ADEMAMIX_8BIT = "AdEMAMix_8BIT"
    CAME_8BIT = "CAME_8BIT"
    LION_ADV = "LION_ADV"
    MUON = "MUON"
    MUON_ADV = "MUON_ADV"
    PRODIGY_ADV = "PRODIGY_ADV"
    PRODIGY_PLUS_SCHEDULE_FREE = "PRODIGY_PLUS_SCHEDULE_FREE"
    SIGNSGD_ADV = "SIGNSGD_ADV"
    TIGER = "TIGER"
    YOGI = "YOGI"


class EMAMode(StrEnum):
    OFF = "OFF"
    GPU = "GPU"
    CPU = "CPU"


class LossWeight(StrEnum):
    CONSTANT = "CONSTANT"
    P2 = "P2"
    MIN_SNR_GAMMA = "MIN_SNR_GAMMA"
    DEBIASED_ESTIMATION = "DEBIASED_ESTIMATION"
    SIGMA = "SIGMA"


class BatchScaler(StrEnum):
    """What `loss_scaler` and `learning_rate_scaler` multiply by (OneTrainer's `get_scale`): the
    batch size per process, the accumulation steps, or both; GLOBAL_* also the processes (GPUs)."""

    def scale(self, batch_size: int, accumulation_steps: int, processes: int = 1) -> int:
        batch = batch_size * (processes if self.value.startswith("GLOBAL_") else 1)
        return {"NONE": 1, "BATCH": batch, "GLOBAL_BATCH": batch, "GRADIENT_ACCUMULATION": accumulation_steps,
                "BOTH": batch * accumulation_steps, "GLOBAL_BOTH": batch * accumulation_steps}[self.value]


class LossScaler(BatchScaler):
    NONE = "NONE"
    BATCH = "BATCH"
    GLOBAL_BATCH = "GLOBAL_BATCH"
    GRADIENT_ACCUMULATION = "GRADIENT_ACCUMULATION"
    BOTH = "BOTH"
    GLOBAL_BOTH = "GLOBAL_BOTH"


class LearningRateScaler(BatchScaler):
    NONE = "NONE"
    BATCH = "BATCH"
    GLOBAL_BATCH = "GLOBAL_BATCH"
    GRADIENT_ACCUMULATION = "GRADIENT_ACCUMULATION"
    BOTH = "BOTH"
    GLOBAL_BOTH = "GLOBAL_BOTH"


class TimestepDistribution(StrEnum):
    UNIFORM = "UNIFORM"
    SIGMOID = "SIGMOID"
    LOGIT_NORMAL = "LOGIT_NORMAL"
    HEAVY_TAIL = "HEAVY_TAIL"
    COS_MAP = "COS_MAP"
    INVERTED_PARABOLA = "INVERTED_PARABOLA"
    BETA = "BETA"


class AttentionMechanism(StrEnum):
    DEFAULT = "DEFAULT"
    XFORMERS = "XFORMERS"
    SDP = "SDP"
    FLASH = "FLASH"
    FLEX = "FLEX"  # PyTorch's FlexAttention, a diffusers attention backend (models/attention.py)


class NoiseScheduler(StrEnum):
    DDIM = "DDIM"
    EULER = "EULER"
    EULER_A = "EULER_A"
    DPMPP = "DPMPP"
    DPMPP_SDE = "DPMPP_SDE"
    UNIPC = "UNIPC"
    EULER_KARRAS = "EULER_KARRAS"
    DPMPP_KARRAS = "DPMPP_KARRAS"
    DPMPP_SDE_KARRAS = "DPMPP_SDE_KARRAS"
    UNIPC_KARRAS = "UNIPC_KARRAS"


class ImageFormat(StrEnum):
    PNG = "PNG"
    JPG = "JPG"


class VideoFormat(StrEnum):
    PNG_IMAGE_SEQUENCE = "PNG_IMAGE_SEQUENCE"
    JPG_IMAGE_SEQUENCE = "JPG_IMAGE_SEQUENCE"
    MP4 = "MP4"


class AudioFormat(StrEnum):
    MP3 = "MP3"


class ConceptType(StrEnum):
    STANDARD = "STANDARD"
    VALIDATION = "VALIDATION"
    PRIOR_PREDICTION = "PRIOR_PREDICTION"


class BalancingStrategy(StrEnum):
    REPEATS = "REPEATS"
    SAMPLES = "SAMPLES"


class PromptSource(StrEnum):
    SAMPLE = "sample"        # one .txt per image, same name
    CONCEPT = "concept"      # one text file for the whole concept
    FILENAME = "filename"    # the image's file name


class PeftType(StrEnum):
    LORA = "LORA"
    LOHA = "LOHA"
    LOKR = "LOKR"
    OFT_2 = "OFT_2"


class ConfigPart(StrEnum):
    NONE = "NONE"
    SETTINGS = "SETTINGS"
    ALL = "ALL"


class GradientReducePrecision(StrEnum):
    WEIGHT_DTYPE = "WEIGHT_DTYPE"
    FLOAT_32 = "FLOAT_32"
    WEIGHT_DTYPE_STOCHASTIC = "WEIGHT_DTYPE_STOCHASTIC"
    FLOAT_32_STOCHASTIC = "FLOAT_32_STOCHASTIC"


def native_resolution(model_type: ModelType) -> int:
    """The side length a model family was trained at; samples far from it come out as noise."""
    name = model_type.value
    if name in ("STABLE_DIFFUSION_20", "STABLE_DIFFUSION_21"):
        return 768
    if name.startswith("STABLE_DIFFUSION_") and "XL" not in name and not name.startswith("STABLE_DIFFUSION_3"):
        return 512
    if name == "HUNYUAN_VIDEO":
        return 720  # 544x960 (its smaller size; 720x1280 is about 960 px square)
    if name == "WAN_2_1":
        return 640  # 480x832 (the 1.3B model's size; about 632 px square)
    if name == "LTX_2":
        return 640  # 512x768, the pipeline's default size (about 627 px square)
    if name == "WAN_2_2_TI2V_5B":
        return 960  # 704x1280 (about 950 px square)
    if name in ("WAN_2_2_T2V_A14B", "WAN_2_2_I2V_A14B"):
        return 640  # 480x832 (its smaller size; 720x1280 is about 960 px square)
    return 1024
