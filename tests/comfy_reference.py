"""The LoRA layer names ComfyUI maps for a model, written by us from its source (comfy/lora.py
`model_lora_keys_unet` / `model_lora_keys_clip`, comfy/utils.py `flux_to_diffusers`,
`z_image_to_diffusers`, `pixart_to_diffusers`, its Flux / Flux.2 / Chroma / Lumina2 / PixArt / HunyuanVideo model
and text encoder classes), so tests can check our files without ComfyUI. The rules are checked
against ComfyUI's own code by scripts/check_comfyui_lora.py.

A name maps when it is a key of ComfyUI's map; a file entry is `<name>.<lora_down.weight | ...>`.
"""

from __future__ import annotations


def _flat(path: str) -> str:
    return path.replace(".", "_")


def generic_unet(original: list[str]) -> set[str]:
    """Every model: `lora_unet_<key _>`, `<key>` and `diffusion_model.<key>` per original weight."""
    out = set()
    for key in original:
        out |= {"lora_unet_" + _flat(key), "diffusion_model." + key}
    return out


def flux_original(double: int, single: int, *, guidance: bool, flux2: bool, chroma: bool = False) -> list[str]:
    """The weights of ComfyUI's Flux model (comfy/ldm/flux/model.py; Flux.2 and Chroma variants)."""
    keys = []
    for i in range(double):
        keys += [f"double_blocks.{i}.{s}_{k}" for s in ("img", "txt") for k in ("attn.qkv", "attn.proj", "mlp.0", "mlp.2")]
        if not (flux2 or chroma):
            keys += [f"double_blocks.{i}.img_mod.lin", f"double_blocks.{i}.txt_mod.lin"]
    for i in range(single):
        keys += [f"single_blocks.{i}.linear1", f"single_blocks.{i}.linear2"]
        if not (flux2 or chroma):
            keys.append(f"single_blocks.{i}.modulation.lin")
    keys += ["img_in", "txt_in", "final_layer.linear"]
    if not chroma:
        keys += ["time_in.in_layer", "time_in.out_layer", "final_layer.adaLN_modulation.1"]
        keys += ["guidance_in.in_layer", "guidance_in.out_layer"] if guidance else []
    if flux2:
        keys += ["double_stream_modulation_img.lin", "double_stream_modulation_txt.lin", "single_stream_modulation.lin"]
    elif not chroma:
        keys += ["vector_in.in_layer", "vector_in.out_layer"]
    return keys


def chroma_approximator(n_layers: int) -> list[str]:
    root = "distilled_guidance_layer"
    return [f"{root}.in_proj", f"{root}.out_proj"] + [f"{root}.layers.{i}.{k}" for i in range(n_layers) for k in ("in_layer", "out_layer")]


def flux_map(double: int, single: int) -> set[str]:
    """`transformer.` / `lycoris_` / `lora_transformer_` names over flux_to_diffusers' diffusers paths
    (ComfyUI's table as of its Flux.1 support; Flux.2's own block names are not assumed)."""
    paths = []
    for i in range(double):
        b = f"transformer_blocks.{i}"
        paths += [f"{b}.attn.{n}" for n in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out")]
        paths += [f"{b}.{n}" for n in ("norm1.linear", "norm1_context.linear", "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj",
                                        "ff_context.net.2")]
    for i in range(single):
        b = f"single_transformer_blocks.{i}"
        paths += [f"{b}.attn.to_q", f"{b}.attn.to_k", f"{b}.attn.to_v", f"{b}.proj_mlp", f"{b}.norm.linear", f"{b}.proj_out"]
    paths += ["proj_out", "x_embedder", "context_embedder", "norm_out.linear", "controlnet_x_embedder"]
    paths += [f"time_text_embed.{e}.linear_{j}" for e in ("timestep_embedder", "text_embedder", "guidance_embedder") for j in (1, 2)]
    out = set()
    for p in paths:
        out |= {"transformer." + p, "lycoris_" + _flat(p), "lora_transformer_" + _flat(p), p}
    return out


def z_image_map(n_layers: int, n_refiner: int) -> set[str]:
    """ComfyUI's Lumina2 (Z-Image) map over z_image_to_diffusers: `diffusion_model.`, `transformer.`,
    `lycoris_` and bare diffusers paths."""
    paths = []
    for blocks, n, adaln in (("layers", n_layers, True), ("context_refiner", n_refiner, False), ("noise_refiner", n_refiner, True)):
        for i in range(n):
            b = f"{blocks}.{i}"
            paths += [f"{b}.attention.{p}" for p in ("to_q", "to_k", "to_v", "to_out.0")]
            paths += [f"{b}.feed_forward.w{j}" for j in (1, 2, 3)] + ([f"{b}.adaLN_modulation.0"] if adaln else [])
    paths += ["all_final_layer.2-1.linear", "all_final_layer.2-1.adaLN_modulation.1", "all_x_embedder.2-1", "cap_embedder.1",
              "t_embedder.mlp.0", "t_embedder.mlp.2"]
    out = set()
    for p in paths:
        out |= {"diffusion_model." + p, "transformer." + p, "lycoris_" + _flat(p), p}
    return out


def hidream_map(original: list[str]) -> set[str]:
    """HiDream (comfy/lora.py): the generic names and SimpleTuner's `transformer.<key>` and
    `lycoris_<key _>` per weight of its model, whose layer names are diffusers' (comfy/ldm/hidream/model.py)."""
    return generic_unet(original) | {"transformer." + k for k in original} | {"lycoris_" + _flat(k) for k in original}


def wan_original(n_blocks: int, i2v: bool = False) -> list[str]:
    """The Linear / Conv weights of ComfyUI's Wan 2.1 model (comfy/ldm/wan/model.py): text-to-video,
    or with `i2v` its image-to-video one (WanI2VCrossAttention's k_img / v_img, MLPProj's two linears)."""
    keys = [f"blocks.{i}.{a}.{p}" for i in range(n_blocks) for a in ("self_attn", "cross_attn") for p in "qkvo"]
    keys += [f"blocks.{i}.ffn.{j}" for i in range(n_blocks) for j in (0, 2)]
    if i2v:
        keys += [f"blocks.{i}.cross_attn.{p}_img" for i in range(n_blocks) for p in "kv"] + ["img_emb.proj.1", "img_emb.proj.3"]
    return keys + ["patch_embedding", "text_embedding.0", "text_embedding.2", "time_embedding.0", "time_embedding.2",
                   "time_projection.1", "head.head"]


def wan_map(n_blocks: int, umt5_blocks: int, i2v: bool = False) -> set[str]:
    """Wan: the generic names of the original weights; UMT5 (its clip named `umt5xxl`, no T5 rule):
    only `text_encoders.umt5xxl.transformer.<key>`."""
    return generic_unet(wan_original(n_blocks, i2v)) | {"text_encoders.umt5xxl.transformer." + k for k in t5_keys(umt5_blocks)}


def anima_original(n_blocks: int) -> list[str]:
    """The linear weights of Anima's DiT (Cosmos-Predict2's MiniTrainDIT, ComfyUI's comfy/ldm/cosmos/predict2.py),
    the checkpoint's `net.` wrapper stripped as ComfyUI loads it; the llm_adapter is not trained."""
    keys = ["x_embedder.proj.1", "t_embedder.1.linear_1", "t_embedder.1.linear_2", "final_layer.linear",
            "final_layer.adaln_modulation.1", "final_layer.adaln_modulation.2"]
    for i in range(n_blocks):
        b = f"blocks.{i}"
        keys += [f"{b}.{attn}.{p}" for attn in ("self_attn", "cross_attn") for p in ("q_proj", "k_proj", "v_proj", "output_proj")]
        keys += [f"{b}.adaln_modulation_{m}.{j}" for m in ("self_attn", "cross_attn", "mlp") for j in (1, 2)]
        keys += [f"{b}.mlp.layer1", f"{b}.mlp.layer2"]
    return keys


def anima_map(transformer) -> set[str]:
    """Anima: the generic names of the DiT's weights."""
    return generic_unet(anima_original(transformer.config.num_layers))


def pixart_map(depth: int, micro_conditions: bool) -> set[str]:
    """ComfyUI's PixArt map over pixart_to_diffusers: `transformer.`, `base_model.model.`, `unet.base_model.model.`."""
    paths = []
    for i in range(depth):
        b = f"transformer_blocks.{i}"
        paths += [f"{b}.attn{a}.{p}" for a in (1, 2) for p in ("to_q", "to_k", "to_v", "to_out.0")]
        paths += [f"{b}.ff.net.0.proj", f"{b}.ff.net.2"]
    paths += ["pos_embed.proj", "caption_projection.linear_1", "caption_projection.linear_2", "adaln_single.linear", "proj_out",
              "adaln_single.emb.timestep_embedder.linear_1", "adaln_single.emb.timestep_embedder.linear_2"]
    if micro_conditions:
        paths += [f"adaln_single.emb.{e}.linear_{j}" for e in ("resolution_embedder", "aspect_ratio_embedder") for j in (1, 2)]
    out = set()
    for p in paths:
        out |= {"transformer." + p, "base_model.model." + p, "unet.base_model.model." + p}
    return out


def clip_l_map(n_layers: int) -> set[str]:
    """CLIP-L's layers (LORA_CLIP_MAP): `lora_te_` and `lora_te1_text_model_encoder_layers_N_...`."""
    names = ("self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj", "self_attn_out_proj", "mlp_fc1", "mlp_fc2")
    return {f"{p}text_model_encoder_layers_{i}_{n}" for p in ("lora_te_", "lora_te1_") for i in range(n_layers) for n in names}


def clip_l_generic(name: str, n_layers: int) -> set[str]:
    """A CLIP-L text encoder's generic `text_encoders.<name>.transformer.text_model.encoder.layers.N.<layer>` names."""
    names = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "mlp.fc1", "mlp.fc2")
    return {f"text_encoders.{name}.transformer.text_model.encoder.layers.{i}.{n}" for i in range(n_layers) for n in names}


def t5_keys(n_blocks: int) -> list[str]:
    """ComfyUI's T5 encoder weights (comfy/text_encoders/t5.py, gated feed-forward)."""
    attn = [f"encoder.block.{i}.layer.0.SelfAttention.{p}" for i in range(n_blocks) for p in "qkvo"]
    ff = [f"encoder.block.{i}.layer.1.DenseReluDense.{p}" for i in range(n_blocks) for p in ("wi_0", "wi_1", "wo")]
    return attn + ff


def t5_map(n_blocks: int, clip_l: bool, clip_g: bool = False) -> set[str]:
    """model_lora_keys_clip's T5 rule: `lora_te<N>_` numbered after the CLIPs present (and `lora_te2_`
    too with CLIP-L alone, OneTrainer's Flux), plus `text_encoders.t5xxl.transformer.<key>`."""
    out = set()
    index = 1 + clip_g + clip_l
    for key in t5_keys(n_blocks):
        out |= {f"lora_te{index}_{_flat(key)}", "text_encoders.t5xxl.transformer." + key}
        if clip_l and not clip_g:
            out.add(f"lora_te2_{_flat(key)}")
    return out


def llm_map(name: str, n_layers: int) -> set[str]:
    """A Llama-style encoder (comfy/text_encoders/llama.py: `model.layers.N.self_attn.*_proj`,
    `mlp.*_proj`) has only the generic `text_encoders.<name>.transformer.<key>` names."""
    keys = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(n_layers) for p in "qkvo"]
    keys += [f"model.layers.{i}.mlp.{p}_proj" for i in range(n_layers) for p in ("gate", "up", "down")]
    return {f"text_encoders.{name}.transformer.{k}" for k in keys}


def hunyuan_video_original(double: int, single: int, refiner: int, guidance: bool) -> list[str]:
    """The Linear weights of ComfyUI's HunyuanVideo model (comfy/ldm/hunyuan_video/model.py: Flux's
    double and single blocks, the token refiner `txt_in`; `img_in.proj` is a Conv3d, which LoRA does not train)."""
    keys = ["txt_in.input_embedder", "final_layer.linear", "final_layer.adaLN_modulation.1"]
    keys += [f"{e}.{k}" for e in ("time_in", "vector_in", "txt_in.t_embedder", "txt_in.c_embedder") + (("guidance_in",) if guidance else ())
             for k in ("in_layer", "out_layer")]
    for i in range(refiner):
        b = f"txt_in.individual_token_refiner.blocks.{i}"
        keys += [f"{b}.{k}" for k in ("adaLN_modulation.1", "self_attn.qkv", "self_attn.proj", "mlp.0", "mlp.2")]
    for i in range(double):
        keys += [f"double_blocks.{i}.{s}_{k}" for s in ("img", "txt") for k in ("mod.lin", "attn.qkv", "attn.proj", "mlp.0", "mlp.2")]
    for i in range(single):
        keys += [f"single_blocks.{i}.{k}" for k in ("linear1", "linear2", "modulation.lin")]
    return keys


def hunyuan_video_comfy_key(key: str) -> str:
    """ComfyUI's name of an original HunyuanVideo checkpoint key (comfy/supported_models.py HunyuanVideo
    `process_unet_state_dict`: what ComfyUI renames on load, and the names a model it saves has)."""
    for a, b in (("txt_in.t_embedder.mlp.0.", "txt_in.t_embedder.in_layer."), ("txt_in.t_embedder.mlp.2.", "txt_in.t_embedder.out_layer."),
                 ("txt_in.c_embedder.linear_1.", "txt_in.c_embedder.in_layer."), ("txt_in.c_embedder.linear_2.", "txt_in.c_embedder.out_layer."),
                 ("_mod.linear.", "_mod.lin."), ("_attn_qkv.", "_attn.qkv."), ("mlp.fc1.", "mlp.0."), ("mlp.fc2.", "mlp.2."),
                 ("_attn_q_norm.weight", "_attn.norm.query_norm.scale"), ("_attn_k_norm.weight", "_attn.norm.key_norm.scale"),
                 (".q_norm.weight", ".norm.query_norm.scale"), (".k_norm.weight", ".norm.key_norm.scale"), ("_attn_proj.", "_attn.proj."),
                 (".modulation.linear.", ".modulation.lin."), ("_in.mlp.2.", "_in.out_layer."), ("_in.mlp.0.", "_in.in_layer.")):
        key = key.replace(a, b)
    return key


def hunyuan_video_map(double: int, single: int, refiner: int, guidance: bool) -> set[str]:
    """model_lora_keys_unet for HunyuanVideo: the generic names and diffusion-pipe's `transformer.` /
    `diffusion_model.` + the key with its renames (`img_attn.qkv` -> `img_attn_qkv`, `mlp.0` -> `mlp.fc1`, ...)."""
    out = generic_unet(keys := hunyuan_video_original(double, single, refiner, guidance))
    for key in keys:
        k = f"diffusion_model.{key}.weight"
        k = k.replace("_mod.lin.", "_mod.linear.").replace("_attn.qkv.", "_attn_qkv.").replace("_attn.proj.", "_attn_proj.")
        k = k.replace("mlp.0.", "mlp.fc1.").replace("mlp.2.", "mlp.fc2.").replace(".modulation.lin.", ".modulation.linear.")
        k = k[len("diffusion_model."):-len(".weight")]
        out |= {"transformer." + k, "diffusion_model." + k}
    return out


def hunyuan_video_rows(double: int, single: int, refiner: int) -> dict[str, tuple[list[str], bool]]:
    """Each original weight (hunyuan_video_original) -> (the diffusers layers whose rows it stacks, in
    order; whether its two halves are swapped), as diffusers' scripts/convert_hunyuan_video_to_diffusers.py
    splits it (`final_layer.adaLN_modulation.1` through its scale/shift swap)."""
    out = {"txt_in.input_embedder": (["context_embedder.proj_in"], False),
           "final_layer.linear": (["proj_out"], False), "final_layer.adaLN_modulation.1": (["norm_out.linear"], True)}
    for original, diffusers in (("time_in", "time_text_embed.timestep_embedder"), ("vector_in", "time_text_embed.text_embedder"),
                                ("guidance_in", "time_text_embed.guidance_embedder"),
                                ("txt_in.t_embedder", "context_embedder.time_text_embed.timestep_embedder"),
                                ("txt_in.c_embedder", "context_embedder.time_text_embed.text_embedder")):
        out |= {f"{original}.in_layer": ([f"{diffusers}.linear_1"], False), f"{original}.out_layer": ([f"{diffusers}.linear_2"], False)}
    for i in range(refiner):
        o, d = f"txt_in.individual_token_refiner.blocks.{i}", f"context_embedder.token_refiner.refiner_blocks.{i}"
        out |= {f"{o}.adaLN_modulation.1": ([f"{d}.norm_out.linear"], False),
                f"{o}.self_attn.qkv": ([f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"], False),
                f"{o}.self_attn.proj": ([f"{d}.attn.to_out.0"], False), f"{o}.mlp.0": ([f"{d}.ff.net.0.proj"], False),
                f"{o}.mlp.2": ([f"{d}.ff.net.2"], False)}
    for i in range(double):
        o, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        out |= {f"{o}.img_mod.lin": ([f"{d}.norm1.linear"], False), f"{o}.txt_mod.lin": ([f"{d}.norm1_context.linear"], False),
                f"{o}.img_attn.qkv": ([f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"], False),
                f"{o}.txt_attn.qkv": ([f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"], False),
                f"{o}.img_attn.proj": ([f"{d}.attn.to_out.0"], False), f"{o}.txt_attn.proj": ([f"{d}.attn.to_add_out"], False),
                f"{o}.img_mlp.0": ([f"{d}.ff.net.0.proj"], False), f"{o}.img_mlp.2": ([f"{d}.ff.net.2"], False),
                f"{o}.txt_mlp.0": ([f"{d}.ff_context.net.0.proj"], False), f"{o}.txt_mlp.2": ([f"{d}.ff_context.net.2"], False)}
    for i in range(single):
        o, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        out |= {f"{o}.linear1": ([f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v", f"{d}.proj_mlp"], False),
                f"{o}.linear2": ([f"{d}.proj_out"], False), f"{o}.modulation.lin": ([f"{d}.norm.linear"], False)}
    return out
