"""Groups of settings nested in the config: a model part (UNet, text encoder, VAE, ...), a sample,
an embedding, quantization and secrets. The optimizer lives in optimizer.py."""

from __future__ import annotations

import uuid
from typing import Any

from .conditions import INCLUDABLE_PART, LORA_PART, READS_TEXT_ENCODER_FILES, TAKES_VIDEO, ZEROES_PADDING
from .enums import DataType, GradientCheckpointing, NoiseScheduler, TimeUnit
from .fields import PLANNED, Section, opt
from .optimizer import OptimizerConfig

__all__ = [
    "CLOUD_DEFAULTS", "EmbeddingConfig", "ModelPartConfig", "OptimizerConfig", "QuantizationConfig",
    "LlamaPartConfig", "SampleConfig", "SecretsConfig", "SeparateModelPartConfig", "TextEncoderPartConfig", "TransformerPartConfig",
    "VaePartConfig",
]


class ModelPartConfig(Section):
    model_name: str = opt("", "Override model", "OneTrainer keeps this key for every part but loads only the prior, transformer, EffNet encoder, decoder, VAE and HiDream's Llama from another model (those parts show it); so does this trainer, and the text encoders of some families (Flux.1, SD 3, Wan...: the Text encoder file field) from files of their own. Kept so that OneTrainer's configs load; not shown.", compat=True, on_frozen_part=True)
    include: bool = opt(True, "Include", "As OneTrainer, for the text encoders of SD 3 / 3.5, Flux.1 (and Fill), HiDream and HunyuanVideo, and Ideogram 4's unconditional transformer: off leaves the part out of the run: it is neither read from disk nor kept in memory, so its other settings do nothing (the page hides them; a set one is said to be ignored), Train aside. A text encoder left out: the model reads zeros in place of its output, in training, cached text and samples; it cannot train (Train off). Ideogram 4's unconditional transformer (the negative branch of CFG in samples) left out: samples with CFG above 1 still work, by running an empty prompt through the trained transformer instead, at less memory and load time; a fine-tune is saved without it. Every other part, and every part of other model types, always loads: the switch is ignored there (and said so).", applies_when=INCLUDABLE_PART)
    train: bool = opt(True, "Train", "Train this part. For LoRA: attach LoRA layers to it. The VAE is only trained by FINE_TUNE_VAE.", backup_must_match=LORA_PART)
    stop_training_after: int | None = opt(None, "Stop training after", "Freeze this part after this many units (see the unit), e.g. stop the text encoder after 30 epochs while the UNet goes on. Blank = never.", ge=0)
    stop_training_after_unit: TimeUnit = opt(TimeUnit.NEVER, "Stop training unit", "EPOCH, STEP or SECOND/MINUTE/HOUR trained; NEVER: never; ALWAYS: at once.")
    learning_rate: float | None = opt(None, "Learning rate", "Learning rate for this part; it replaces the base learning rate when set. Blank = the base learning rate. With Prodigy use 1 everywhere.", ge=0)
    dropout_probability: float = opt(0.0, "Caption dropout", "Text encoders: probability of training a sample with an empty caption, so the model also learns the unconditioned image.", ge=0, le=1, text_encoder_only=True)
    train_embedding: bool = opt(True, "Train embedding", "Text encoders: train the embeddings' vectors in this encoder (off = use them as they are; models with several text encoders).", text_encoder_only=True)
    attention_mask: bool = opt(False, "Attention mask", "OneTrainer keeps this key for every part but acts on the transformer's only (Training tab, the transformer's Attention mask); so does this trainer. Kept so that OneTrainer's configs load; not shown.", compat=True)
    guidance_scale: float = opt(1.0, "Guidance scale", "Guidance-distilled models only (Flux.1 dev): the value fed to the transformer's guidance embedding while training (OneTrainer's default 1). Samples use their CFG scale as the guidance value.", ge=0)
    gradient_checkpointing: GradientCheckpointing = opt(GradientCheckpointing.AUTO, "Gradient checkpointing", "Recompute activations in the backward pass: much less memory (about 2 GB for SD 1.5), at least 30% slower. AUTO: on only when the run would not fit in the device's free memory without it (the run's log says which and why); ON/OFF always.")
    weight_dtype: DataType = opt(DataType.FLOAT_32, "Weight data type", "Data type this part's weights are kept in. FLOAT_16 / BFLOAT_16 halve memory (on CPU they stay float32); keep the VAE at FLOAT_32 or BFLOAT_16 if samples come out black. For a part not trained (under a LoRA): FLOAT_8, INT_8 and NFLOAT_4 store its Linear layers in 8 or 4 bits (INT_8, NFLOAT_4: bitsandbytes); INT_W8A8 / FLOAT_W8A8 also multiply in 8 bits, faster on GPUs with 8-bit matmul units (float8: RTX 40, H100 and newer), elsewhere as FLOAT_8. A .gguf Transformer file: GGUF keeps its quantized weights, GGUF_A8_INT / GGUF_A8_FLOAT multiply them in 8 bits.", on_frozen_part=True)
    offload_fraction: float = opt(0.0, "Offload fraction", "Share of this part's blocks (the last ones) whose frozen weights are kept in CPU memory and moved to the GPU for each use, to fit big models in little VRAM; those blocks always use activation checkpointing. Denoiser and text encoders; a LoRA's weights stay on the GPU; a fine-tune's move too with the fused back pass (each goes back after its step). Nothing to move when training on the CPU.", ge=0, le=1)
    activation_offloading: bool = opt(False, "Activation offloading", "Keep the activations saved for the backward pass in CPU memory instead of VRAM (denoiser and text encoders; nothing to move when training on the CPU).")


class TransformerPartConfig(ModelPartConfig):
    """The denoising transformer, which (as OneTrainer's) may come from a file of its own."""

    attention_mask: bool = opt(False, "Attention mask", "Flux.1, SD 3 / 3.5 and HiDream (as OneTrainer): zero the prompt embeddings of the padding tokens (the text encoders' outputs times their token mask) before the transformer reads them, in training and in samples, so the padding carries no text (OneTrainer's name: the attention itself is not masked). These models were trained without it; changing it re-encodes cached text. Other model types are refused.", applies_when=ZEROES_PADDING)
    model_name: str = opt("", "Transformer file", "Load the transformer from this file instead of the base model, whose other parts and configs are kept: a .safetensors file, a .gguf file (weight data type GGUF, for a LoRA), a Hugging Face file address as OneTrainer's DeTurbo presets give (https://huggingface.co/<owner>/<repo>/blob/main/<file>: downloaded once, then read from the hub cache), or a Civitai model's address (https://civitai.com/models/<id>?modelVersionId=<version>, with General → Civitai API key). A family that reads no such file says so before the run (the README's family table lists them). Blank = from the base model.")



class TextEncoderPartConfig(ModelPartConfig):
    """A text encoder, which (Flux.1, Flux Fill, Chroma, SD 3 / 3.5, Z-Image, Qwen-Image, HiDream, Wan, HunyuanVideo;
    not in OneTrainer) may come from a file of its own."""

    model_name: str = opt("", "Text encoder file", "Flux.1, Flux Fill, Chroma, Flux.2, SD 3 / 3.5, Z-Image, Qwen-Image (and Edit), HiDream (its CLIPs and T5), Anima, Sana, Wan and HunyuanVideo: load this text encoder from a .safetensors file of its own instead of the base model, as ComfyUI and kohya keep them (clip_l, clip_g, t5xxl, umt5_xxl, qwen_3_4b, qwen_2.5_vl_7b, llava_llama3, mistral_3_small_flux2, qwen_3_06b_base, gemma_2_2b: fp16, fp8, or ComfyUI's scaled fp8 and fp8 / int8 mixed files), or from a .gguf file (T5, UMT5, Qwen3, Llama, Mistral, Qwen2.5-VL but for Qwen-Image-Edit: dequantized on load, then stored in the Weight data type), or from a local folder of it in transformers' layout (its .safetensors shards), read with the base model's config for it; the base model's own weights of it are then neither loaded nor downloaded (T5's: 9.5 GB). Also a Hugging Face file address or a Civitai model's address. Blank = from the base model. Other model types do not read it (OneTrainer reads none).", on_frozen_part=True, applies_when=READS_TEXT_ENCODER_FILES)


class VaePartConfig(ModelPartConfig):
    """The VAE, which (as OneTrainer's) may come from a model of its own, e.g. SDXL's fp16-fix VAE."""

    model_name: str = opt("", "VAE model", "Load the VAE from here instead of the base model, e.g. madebyollin/sdxl-vae-fp16-fix (SDXL in half precision without black images) or a fine-tuned VAE: a Hugging Face id, a diffusers VAE folder, a VAE .safetensors/.ckpt file (diffusers or original key names; ComfyUI's ae, flux2-vae, wan_2.1_vae and qwen_image_vae files too), or a Civitai VAE's address. It must be a VAE for this base model (same latent channels). Cached latents are remade for it. Blank = the base model's VAE.", on_frozen_part=True)


class LlamaPartConfig(ModelPartConfig):
    """HiDream's fourth text encoder, Llama 3.1, which its repos ship without (OneTrainer's text_encoder_4 model name)."""

    model_name: str = opt("", "Llama model", "HiDream: where its Llama 3.1 text encoder and tokenizer come from, a Hugging Face id or a folder (OneTrainer's preset: meta-llama/Llama-3.1-8B-Instruct, gated: accept its license and set the access token). HiDream-ai's repos ship without it. Blank = the base model's text_encoder_4 folder.", on_frozen_part=True)


class SeparateModelPartConfig(ModelPartConfig):
    """A part that can come from a model of its own (Würstchen 2 / Stable Cascade: the prior, the
    decoder and the EffNet encoder), as OneTrainer's prior, decoder and effnet model names."""

    model_name: str = opt("", "Model", "Where this part comes from: a hub id, folder or file. Prior: replaces the base model's prior network (Stable Cascade: also an original stage_c .safetensors). Decoder: the decoder model, stage B with its VQGAN (e.g. warp-ai/wuerstchen, stabilityai/stable-cascade, stabilityai/stable-cascade/decoder_lite). EffNet encoder: its weights (warp-ai/EfficientNetEncoder; Stable Cascade's effnet_encoder.safetensors). Blank = the family's default.", on_frozen_part=True)


class SampleConfig(Section):
    enabled: bool = opt(True, "Enabled", "Generate this sample during training.")
    prompt: str = opt("", "Prompt", "The prompt. For embeddings, put <embedding> where the trained token goes, or every sample looks the same. FINE_TUNE_VAE: the path of an image shows it encoded and decoded by the trained VAE (as OneTrainer).")
    negative_prompt: str = opt("", "Negative prompt", "What the image should not show.")
    height: int = opt(512, "Height", "Sample height in pixels. Use the model's native resolution (512 for SD 1.5, 1024 for SDXL): at the wrong size samples come out as noise.", ge=64, le=4096)
    width: int = opt(512, "Width", "Sample width in pixels. Use the model's native resolution.", ge=64, le=4096)
    frames: int = opt(1, "Frames", "Video models: this sample's clip length in frames, cut to the form the model needs (Wan, HunyuanVideo: 4k+1; LTX-2: 8k+1), as OneTrainer's HunyuanVideo sampler takes it. 1 = the run's Frames (Training tab), so a sample list from OneTrainer, whose default is 1, samples clips of the training length here.", ge=1, applies_when=TAKES_VIDEO)
    length: float = opt(10.0, "Length", "OneTrainer's length in seconds of an audio sample; none of its models makes audio, and none here does. Kept so that OneTrainer's sample lists load; not shown.", ge=0, compat=True)
    seed: int = opt(42, "Seed", "Noise seed; keep it fixed to compare samples across the run.")
    random_seed: bool = opt(False, "Random seed", "Use a new seed each time instead of the fixed seed.")
    diffusion_steps: int = opt(20, "Steps", "Denoising steps.", ge=1, le=1000)
    cfg_scale: float = opt(7.0, "CFG scale", "How strongly the prompt is followed (classifier-free guidance).", ge=0, le=50)
    noise_scheduler: NoiseScheduler = opt(NoiseScheduler.DDIM, "Sampler", "The sampler (noise scheduler) used to generate the sample.")
    text_encoder_1_layer_skip: int = opt(0, "Clip skip", "OneTrainer replaces this with the training's Clip skip when it samples; so does this trainer: every sample uses the Training tab's Clip skip. Kept so that OneTrainer's sample lists load; not shown.", ge=0, compat=True)
    text_encoder_1_sequence_length: int | None = opt(None, "Text encoder 1 sequence length", "OneTrainer replaces this with the training's text encoder sequence length when it samples; so does this trainer: every sample uses the Training tab's text encoder sequence length. Kept so that OneTrainer's sample lists load; not shown.", ge=1, compat=True)
    text_encoder_2_layer_skip: int = opt(0, "Clip skip 2", "OneTrainer replaces this with the training's Clip skip 2 when it samples; so does this trainer: every sample uses the Training tab's Clip skip 2. Kept so that OneTrainer's sample lists load; not shown.", ge=0, compat=True)
    text_encoder_2_sequence_length: int | None = opt(None, "Text encoder 2 sequence length", "OneTrainer replaces this with the training's text encoder 2 sequence length when it samples; so does this trainer: every sample uses the Training tab's text encoder 2 sequence length. Kept so that OneTrainer's sample lists load; not shown.", ge=1, compat=True)
    text_encoder_3_layer_skip: int = opt(0, "Clip skip 3", "OneTrainer replaces this with the training's Clip skip 3 when it samples; so does this trainer: every sample uses the Training tab's Clip skip 3. Kept so that OneTrainer's sample lists load; not shown.", ge=0, compat=True)
    text_encoder_4_layer_skip: int = opt(0, "Clip skip 4", "OneTrainer replaces this with the training's Clip skip 4 when it samples, which none of its models reads; nor does this trainer. Kept so that OneTrainer's sample lists load; not shown.", ge=0, compat=True)
    transformer_attention_mask: bool = opt(False, "Transformer attention mask", "Flux.1, SD 3 / 3.5 and HiDream: zero the prompt embeddings of this sample's padding tokens (and the negative prompt's), as the transformer's attention mask does in training. A run with the transformer's attention mask on does it for every sample, as OneTrainer. Other model types are refused.", applies_when=ZEROES_PADDING)
    force_last_timestep: bool = opt(False, "Force last timestep", "OneTrainer sets this from the training's Zero terminal SNR when it samples; so does this trainer: with Zero terminal SNR on, every sample starts at the last timestep (the sampler's 'trailing' spacing) and its guidance is rescaled by 0.7 (SD 1.x / 2.x and SDXL from a prompt, SDXL inpainting), as OneTrainer. Kept so that OneTrainer's sample lists load; not shown.", compat=True)
    sample_inpainting: bool = opt(False, "Inpainting sample", "Inpainting models (SD inpainting, Flux Fill): repaint the base image inside the mask instead of drawing from the prompt alone. Needs both files; refused before the run for other model types.")
    base_image_path: str = opt("", "Base image", "Inpainting samples: the image to repaint, resized to the sample's width and height.")
    mask_image_path: str = opt("", "Mask image", "Inpainting samples: the mask, white = repaint, black = keep; resized like the base image.")
    control_image: str = opt("", "Control image", "Image-editing models (QWEN_IMAGE_EDIT): the image the sample edits (blank: the control image of the first training pair). Image-to-video (WAN_2_1_I2V, WAN_2_2_I2V_A14B, WAN_2_2_TI2V_5B, LTX_2): the image or clip whose first frame the sample starts from (blank: the first training clip's; WAN_2_2_TI2V_5B and LTX_2: a text-to-video sample, unless Image-to-video share is 1).")


class EmbeddingConfig(Section):
    """A textual-inversion embedding: new tokens learnt in the text encoder(s)."""

    uuid: str = opt(default_factory=lambda: str(uuid.uuid4()), label="Id", tooltip="Identifies this embedding inside backups; set automatically.", compat=True)
    model_name: str = opt("", "Base embedding", "Continue training an existing embedding, or (additional embeddings) use it: an A1111, OneTrainer or diffusers embedding file (.safetensors, or an A1111 .pt read weights-only), a Hugging Face file address (https://huggingface.co/<owner>/<repo>/blob/main/<file>) or a Civitai Textual Inversion's address (with General → Civitai API key), downloaded once into the hub cache. Blank = a new embedding.")
    placeholder: str = opt("<embedding>", "Placeholder", "The text that stands for the embedding. Put it in captions and sample prompts, e.g. 'a photo of <embedding>'; without it the embedding is never used.")
    train: bool = opt(True, "Train", "Train this embedding (off = only use it).")
    stop_training_after: int | None = opt(None, "Stop training after", "Freeze the embedding after this many units. Blank = never.", ge=0)
    stop_training_after_unit: TimeUnit = opt(TimeUnit.NEVER, "Stop training unit", "EPOCH, STEP or SECOND/MINUTE/HOUR trained; NEVER: never; ALWAYS: at once.")
    token_count: int | None = opt(1, "Token count", "How many tokens the embedding uses. More tokens can hold more detail but overfit sooner. Blank = as many as the initial text has. CLIP reads 75 tokens of a caption; T5 and LLM encoders more.", ge=1, le=512)
    initial_embedding_text: str = opt("*", "Initial text", "Text whose embedding is the starting point, e.g. a word close to the concept ('woman', 'dog'). '*' = a neutral start.")
    is_output_embedding: bool = opt(False, "Output embedding", "Learn the embedding on the text encoder's output instead of its input (OneTrainer's output embedding): its tokens enter the prompt as zeros, and the encoder's output at them (after clip skip) is replaced by trained float32 vectors (the embedding weight data type is not used for them), which start as the encoder's output for the initial text. Applies to the encoder sequences the model reads: CLIP in SD 1.x/2.x, SDXL, SD 3, Würstchen and Stable Cascade; T5 in PixArt, Flux, Chroma, SD 3 and HiDream; Gemma in Sana; Llama in HunyuanVideo. The other encoders keep input vectors: the CLIPs of Flux, HiDream and HunyuanVideo, which give only a pooled vector, read the initial text, frozen (OneTrainer trains them as input vectors); HiDream's Llama reads zeros at the embedding's tokens, as in OneTrainer, which never applies Llama's output vectors. Saved in the output data type as '<key>_out' keys that only OneTrainer and this trainer read, not A1111, Forge or ComfyUI. A base embedding file with such keys continues as an output embedding.")


class QuantizationConfig(Section):
    layer_filter: str = opt("", "Quantization layer filter", "Which of the denoiser's Linear layers a FLOAT_8 / INT_8 / NFLOAT_4 / INT_W8A8 / FLOAT_W8A8 weight type quantizes: comma-separated parts of module names (e.g. transformer_block for Flux's blocks, layers for Z-Image's). Blank = every Linear layer. Text encoders always quantize every Linear layer.")
    layer_filter_preset: str = opt("full", "Quantization layer preset", "OneTrainer's name for the filter it fills in (full = blank filter); the filter above is what decides.")
    layer_filter_regex: bool = opt(False, "Filter is regex", "Treat the quantization layer filter as regular expressions.")
    svd_dtype: DataType = opt(DataType.NONE, "SVD data type", "SVDQuant (OneTrainer's): each quantized Linear layer keeps its weight's largest singular directions (a frozen low-rank part, SVD rank of them) in this data type and quantizes only the rest, so the quantization error is smaller. Costs (inputs + outputs) x rank values per layer of memory and one SVD per layer when the model loads, on the train GPU (on a CPU a 3072x3072 layer takes seconds to tens of seconds; the SVD cache folder saves it next time). NONE = off. Not for GGUF weights.", choices=["NONE", "FLOAT_32", "FLOAT_16", "BFLOAT_16"])
    svd_rank: int = opt(16, "SVD rank", "How many singular directions of each quantized weight SVDQuant keeps unquantized: higher = smaller error, more memory.", ge=1)
    cache_dir: str | None = opt(None, "SVD cache folder", "Where SVDQuant keeps each weight's SVD (as .safetensors, keyed by a SHA-256 of the weight, at least rank 128), so a later run with a rank up to that skips it. A relative path is taken from the folder the app was started in. Blank = no cache.")


# OneTrainer's cloud settings (rent a GPU box and train there). Kept as a dict until supported.
CLOUD_DEFAULTS: dict[str, Any] = {
    "enabled": False, "type": "RUNPOD", "api_key": "", "create": True, "name": "OneTrainer", "id": "",
    "tensorboard_tunnel": True, "sub_type": "", "gpu_type": "", "volume_size": 100, "min_download": 0,
    "huggingface_token": "", "host": "", "port": 0, "user": "root", "workspace_dir": "/workspace",
    "huggingface_cache_dir": "/workspace/huggingface_cache", "onetrainer_dir": "/workspace/OneTrainer",
    "install_cmd": "git clone https://github.com/Nerogar/OneTrainer", "install_onetrainer": True,
    "detach_trainer": False, "run_id": "job1", "download_samples": True, "download_output_model": True,
    "download_saves": True, "download_backups": False, "download_tensorboard": False,
    "on_finish": "NONE", "on_error": "NONE", "on_detached_finish": "NONE", "on_detached_error": "NONE",
}


class SecretsConfig(Section):
    huggingface_token: str = opt("", "Hugging Face token", "Token for gated or private models on the hub. Kept in the workspace's secrets.json (owner-only), never in configs, backups or models. The page never shows a stored one: its field stays empty and says one is stored; left empty, the stored one is kept; type a new one to replace it, or - to remove it.", tab="general")
    civitai_token: str = opt("", "Civitai API key", "For a base model given as a Civitai address (https://civitai.com/models/<id>?modelVersionId=<version>): Civitai asks for a key to download. Create one at civitai.com → Account settings → API Keys. Kept in the workspace's secrets.json (owner-only), never in configs, backups or models. The page never shows a stored one: its field stays empty and says one is stored; left empty, the stored one is kept; type a new one to replace it, or - to remove it. CIVITAI_TOKEN in the environment works too.", tab="general")
    cloud: dict[str, Any] = opt(default_factory=dict, label="Cloud secrets", tooltip="OneTrainer's cloud credentials (API key, host, user). Stored in the config file: do not share that file.", tab="general", status=PLANNED)


def learning_rate_or_base(own: float | None, base: float) -> float:
    """The learning rate a part (or the embeddings) trains with: its own when set (0 included),
    else the base `learning_rate`; blank means "the base" on the page and in every method."""
    return base if own is None else own
