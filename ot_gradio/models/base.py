"""The interface of a model family, as the trainer, the methods and the tools use it.

A family is one class in one module of this package, registered with
`@register_family(ModelType...)`, which gives it the parts, denoiser, text encoders, bucket
step, schedule and inpainting flag of its torch-free description (config/family_info). The trainer
never names a family; everything it does goes through these members.

The flow-matching families (Flux.1, Flux Fill, Chroma, SD 3 / 3.5, Z-Image, Flux.2, Sana) subclass
`flow_family.FlowFamily`, this interface as a class: it declares the class attributes and the
per-family hooks with their docstrings and holds what they share (loading and its errors, parts,
attention, layer skips, the VAE side, sampling with the parts parked and restored, saving). A new
flow family sets the attributes and writes `encode_text`, `predict`, `configure_flow` and
`pipeline_inputs`. Every family class derives from `family.Family`, which declares the optional
facts with their defaults (inpainting, learns_variance, bucket_step, embedding keys, LoRA layer
presets and kohya names, modelspec architecture), so the trainer reads them without probing.
What several families share comes as mixins from `family_parts.py` (loading guards, the KL VAE's
latents, the DDPM noise schedule and targets). The DDPM families (SD 1.5/2/XL, PixArt,
Würstchen, Cascade) follow the prose below; `sd15.StableDiffusion15` is their reference. Where the two differ:
flow families have `schedule_kind = "flow_matching"` and `prediction_type = "flow"`, take their
options in `configure_flow(config)` (`configure_noise_schedule` refuses the DDPM-only ones), and
their `predict(noisy, t, conditioning, batch)` takes t in (0, 1) and returns the velocity
(training/flow_matching.py draws t and makes the noisy input and the target).

Class attributes
- `model_type`, `native_resolution`
- `denoiser`: the part name of the network that predicts noise ("unet", "prior", "transformer").
- `text_encoder_names`: text encoder part names in order ("text_encoder", "text_encoder_2").

Loading
- `load(name, *, cache_dir, offline, token, dtypes, config_dir) -> family`: a hub id, a local
  diffusers folder, a single file, or `tiny:<family>` (models/tiny.py). `dtypes` maps part names
  to torch dtypes. Errors the user can fix raise `ModelLoadError` with what to do.

Parts and options
- `parts -> dict[str, nn.Module]`: every part by its config section name.
- `to(device)`, `prediction_type`, `configure_noise_schedule(prediction_type=, zero_terminal_snr=)`,
  `set_attention(mechanism, device)`, `layer_skips: dict[str, int]` (clip skip per text encoder,
  set by the trainer, used in training and sampling).

A training step
- `noise_scheduler`: has `config.num_train_timesteps`, `alphas_cumprod`, `betas` (for the
  timestep loss weights and generalized offset noise); integer timesteps in
  [0, num_train_timesteps) are what the trainer samples and passes on.
- `vae_id` (identity of the image encoder for the latent cache), `encode_images(pixels, sample=,
  generator=)` -> latents, `decode_latents(latents)`.
- `add_noise(latents, noise, timesteps)`, `prediction_target(latents, noise, timesteps)`.
- `encode_text(captions, grad=frozenset()) -> dict`: the conditioning; gradients flow through the
  text encoders named in `grad` only. A family with several text encoders also takes `captions`
  as {text encoder part: captions} (the training step drops captions per encoder).
- `predict(noisy, timesteps, conditioning, batch) -> tensor`: `batch` is the data Batch (sizes,
  crops, masks, conditioning latents for families that need them).
- Inpainting families (`inpainting = True`, models/sd_inpainting.py) also have
  `encode_conditioning(pixels, mask)` -> masked-image latents (cached by the trainer with masked
  training) and read `batch.latent_mask` (set by the training step) in `predict`.

Tokens (embeddings; training/embeddings.py)
- `tokenizers -> dict[str, tokenizer]`: the tokenizer of each text encoder part, the very objects
  the family tokenizes training captions and sample prompts with, held in plain attributes of
  the model (embeddings add their tokens to them, and swap them for token-free copies while a
  fine-tune is saved).
- `embedding_keys: dict[str, str]`: text encoder part -> the key of its vectors in an A1111
  embedding file: {"text_encoder": "emb_params"} for SD 1.x/2.x, "clip_l"/"clip_g" for SDXL's
  two encoders (OneTrainer: "clip_g" for Würstchen/Cascade, "t5" for PixArt).
- Every text encoder has transformers' `get_input_embeddings()` / `set_input_embeddings()` and
  looks its input ids up through that module, in training and in `sample` (embeddings swap in
  one that also knows the new ids).

Outputs
- `sample(prompt, negative_prompt, height, width, steps, cfg_scale, seed, sampler, device) -> PIL.Image`
- `save_single_file(path, dtype, metadata=None) -> Path` (the header keys merged into the file's),
  `save_diffusers(directory, dtype) -> Path` (atomic).
- `lora_base_model_version` (e.g. "sd_v1", "sd_v2", "sdxl_base_v1-0"): written to LoRA metadata
  and picks the kohya key prefixes.
"""
