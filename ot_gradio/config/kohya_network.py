"""kohya_ss / sd-scripts network settings (kohya_import.py's helper): the LoRA type and its layers,
rank and alpha, LyCORIS's LoKr and DoRA options, kohya's dropouts and max norm, and the LoRA to
continue from, from kohya_ss's page keys or sd-scripts' `network_module` / `network_args`."""

from __future__ import annotations

from typing import Any

from .enums import ModelType as M
from .kohya_reader import KohyaReader, is_set

# kohya_ss's LoRA types ("Flux1": sd-scripts' lora_flux, every linear layer of the blocks)
ADAPTERS = {"standard": ("LORA", "attn-mlp"), "kohya locon": ("LORA", "full"), "lycoris/locon": ("LORA", "full"),
            "lycoris/loha": ("LOHA", "full"), "lycoris/lokr": ("LOKR", "full"), "flux1": ("LORA", "blocks"),
            # sd-scripts' lora_anima: the blocks' attention and MLP layers, not their modulation; its own LoHa / LoKr
            "anima": ("LORA", "attn-mlp"), "kohya loha": ("LOHA", "attn-mlp"), "kohya lokr": ("LOKR", "attn-mlp")}
# families whose sd-scripts LoRA module adapts every linear layer of the transformer blocks
BLOCK_FAMILIES = frozenset({M.FLUX_DEV_1, M.CHROMA_1, M.STABLE_DIFFUSION_3, M.STABLE_DIFFUSION_35})
# sd-scripts' lora_flux `train_blocks`: the double (joint) or the single blocks alone, as layer filters here
FLUX_BLOCKS = {"double": r"^transformer_blocks\.", "single": r"^single_transformer_blocks\."}


def key_values(value: Any) -> dict[str, str]:
    """sd-scripts' `name=value` arguments ("algo=lokr", "factor=8" ...: a list, or one string) as a dict."""
    items = value if isinstance(value, list) else str(value or "").replace('"', "").split()
    pairs = (str(item).partition("=") for item in items)
    return {key.strip(): val.strip().strip("'\"") for key, _, val in pairs if key.strip()}


def network_args(r: KohyaReader) -> dict[str, str]:
    """sd-scripts' `network_args` as a dict."""
    return key_values(r.data.get("network_args"))


def network(r: KohyaReader, out: dict[str, Any], notes: list[str], model_type: M) -> None:
    args = network_args(r)
    if "network_args" in r.data:
        r.get("network_args")
    for key in ("factor", "use_cp", "use_tucker", "decompose_both", "dora_wd", "conv_dim", "conv_alpha", "rank_dropout",
                "module_dropout"):
        if key in args and key not in r.data:  # kohya_ss's page has these keys of its own
            r.data[key] = args[key]
    algo = args.get("algo", "").lower()
    if str(r.data.get("network_module") or "") in ("networks.lora", "networks.lora_flux", "networks.lora_sd3"):
        r.get("network_module")  # sd-scripts' LoRA of each family: the plain LoRA here
    if "lycoris" in str(r.data.get("network_module") or "") and algo and not r.given("LoRA_type"):
        r.get("network_module")
        r.data["LoRA_type"] = f"LyCORIS/{ {'locon': 'LoCon', 'loha': 'LoHa', 'lokr': 'LoKr'}.get(algo, algo) }"
    if (str(r.data.get("network_module") or "") == "networks.lora" and not r.given("LoRA_type")
            and is_set(args.get("conv_dim")) and float(args["conv_dim"]) > 0):
        r.data["LoRA_type"] = "Kohya LoCon"  # sd-scripts' LoRA with conv_dim in network_args: LoCon, its 3x3 convs too
    kind = str(r.get("LoRA_type") or "Standard")
    if kind.lower() == "standard":  # kohya_ss's page sends conv_dim / conv_alpha only with its LoCon types
        r.get("conv_dim")
        r.get("conv_alpha")
    peft, preset = ADAPTERS.get(kind.lower(), ("LORA", "attn-mlp"))
    if kind.lower() not in ADAPTERS:
        notes.append(f"LoRA_type '{kind}' has no counterpart here: it trains as a plain LoRA of the attention and MLP layers")
    if model_type in BLOCK_FAMILIES and preset == "attn-mlp":  # sd-scripts' lora_flux / lora_sd3: every linear of the blocks
        preset = "blocks"
    out.update(peft_type=peft, layer_filter_preset=preset)
    blocks = str(r.data.get("train_blocks") or args.get("train_blocks") or "all").lower()
    if blocks in FLUX_BLOCKS and model_type in (M.FLUX_DEV_1, M.CHROMA_1) and preset == "blocks":
        r.get("train_blocks")
        out.update(layer_filter_preset="custom", layer_filter=FLUX_BLOCKS[blocks], layer_filter_regex=True)
    if kind.lower() != "lycoris/lokr" and "use_cp" not in args:
        r.get("use_cp")  # kohya_ss's page sends it with LoKr alone
    if not (r.given("rank_dropout") and r.number("rank_dropout") > 0):
        r.get("rank_dropout_scale")  # it scales a rank dropout there is none of
    r.get("bypass_mode")  # LyCORIS's forward beside the frozen weight: the same result, and peft's forward here
    lycoris_preset = str(r.get("LyCORIS_preset") or args.get("preset") or "full")
    if kind.lower().startswith("lycoris/") and lycoris_preset.lower() != "full":
        notes.append(f"LyCORIS_preset '{lycoris_preset}': here the Layer preset is 'full' (choose another on the Training tab, Layers)")
    for key, ours, kind_ in (("network_dim", "lokr_dim" if peft == "LOKR" else "lora_rank", int),
                             ("network_alpha", "lora_alpha", float), ("network_dropout", "dropout_probability", float)):
        if r.given(key):
            out[ours] = r.number(key, kind_)
    if peft == "LOKR":  # LyCORIS's LoKr options (a dimension larger than half a factor's sides trains it whole, as there)
        if r.given("factor"):
            out["lokr_decompose_factor"] = r.number("factor", int)
        out["lokr_decompose_both"] = r.flag("decompose_both")
        out["lokr_use_tucker"] = r.flag("use_tucker") or r.flag("use_cp")
    if r.flag("dora_wd"):
        if peft == "LOKR":
            out["lokr_weight_decompose"] = True
        elif peft == "LORA":  # on the input axis, which A1111, Forge and ComfyUI apply as trained
            out["lora_decompose"] = True
        else:
            notes.append(f"dora_wd: {kind} has no DoRA here; it trains without")
    if preset == "full" and r.given("conv_dim"):  # LyCORIS's conv layers: here at the linear layers' rank and alpha
        conv = (r.get("conv_dim"), r.get("conv_alpha") if r.given("conv_alpha") else r.data.get("network_alpha"))
        if [str(v) for v in conv] != [str(r.data.get("network_dim")), str(r.data.get("network_alpha"))]:
            notes.append(f"conv_dim {conv[0]} / conv_alpha {conv[1]}: the conv layers train at the same rank and alpha as "
                         "the others here")
    for key in ("rank_dropout", "module_dropout"):
        if r.given(key) and r.number(key) > 0:
            if peft == "LORA" and not out.get("lora_decompose"):
                out[f"lora_{key}"] = r.number(key)
            else:
                notes.append(f"{key} {r.data[key]}: kohya's {key.replace('_', ' ')} acts here on plain LoRA layers, not "
                             f"{'DoRA' if peft == 'LORA' else kind}; it trains without")
    if r.given("scale_weight_norms") and r.number("scale_weight_norms") > 0:  # kohya's max-norm regularisation
        if peft == "LORA":
            out["lora_max_norm"] = r.number("scale_weight_norms")
        else:
            notes.append(f"scale_weight_norms {r.data['scale_weight_norms']}: the max norm here caps plain LoRA and DoRA "
                         f"layers, not {kind}; it trains without")
    for key in ("network_weights", "lora_network_weights"):  # the LoRA to continue from (the latter: older kohya_ss pages)
        if r.given(key):
            out.setdefault("lora_model_name", str(r.get(key)))
    r.get("dim_from_weights")  # here the LoRA to continue from always trains at its own rank and alpha
