"""The cost of `lora_max_norm` (kohya's scale_weight_norms, training/lora_max_norm.py) per step:
the time of one `LoraMaxNorm.apply` over the LoRA layers of a full-size model, against computing
each layer's whole weight change (up @ down, the weight's size) for its norm, as sd-scripts does.

The layers are the model's own shapes (read from its config on the meta device), each a plain
Linear / Conv2d with a LoRA of --rank; the up matrices random, so every layer has a norm to cap.
Times are the median of --repeats calls after one warm-up call.

    python bench/max_norm_cost.py [--model sd15|sdxl] [--preset full|attn-mlp] [--rank 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {  # the UNets' published configs (diffusers' unet/config.json), the parts that set the layers' shapes
    "sd15": {"cross_attention_dim": 768, "block_out_channels": (320, 640, 1280, 1280), "attention_head_dim": 8},
    "sdxl": {"cross_attention_dim": 2048, "block_out_channels": (320, 640, 1280), "attention_head_dim": (5, 10, 20),
             "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
             "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
             "transformer_layers_per_block": (1, 2, 10), "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
             "projection_class_embeddings_input_dim": 2816, "use_linear_projection": True},
}


def layer_shapes(model: str, preset: str) -> list[tuple[str, tuple[int, ...]]]:
    import torch
    from diffusers import UNet2DConditionModel

    sys.path.insert(0, str(ROOT))
    from ot_gradio.training.lora import select_lora_targets

    with torch.device("meta"):
        unet = UNet2DConditionModel(**CONFIGS[model])
    names = select_lora_targets(unet, kind="unet", layer_preset=preset)
    modules = dict(unet.named_modules())
    return [(type(modules[n]).__name__, tuple(modules[n].weight.shape)) for n in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="sd15")
    parser.add_argument("--preset", default="full")  # this trainer's default layer preset
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch
    from torch import nn

    sys.path.insert(0, str(ROOT))
    from ot_gradio.training.lora import add_lora
    from ot_gradio.training.lora_max_norm import LoraMaxNorm, lora_pairs

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = layer_shapes(args.model, args.preset)
    layers = nn.ModuleList()
    for kind, shape in shapes:
        layers.append(nn.Linear(shape[1], shape[0], bias=False) if kind == "Linear"
                      else nn.Conv2d(shape[1], shape[0], shape[2:], bias=False))
    add_lora(layers, kind="unet", rank=args.rank, alpha=float(args.rank), dropout=0.0, layer_preset="full")
    pairs = lora_pairs([layers])
    for _, up, _ in pairs:
        up.data.normal_(std=0.01)
    cap = LoraMaxNorm([layers], 1e9)  # a limit no layer reaches: every norm computed, nothing changed

    def whole_products() -> None:  # each layer's full weight change for its norm, read back one by one
        with torch.no_grad():
            for down, up, scale in pairs:
                delta = up.reshape(up.shape[0], -1) @ down.reshape(down.shape[0], -1) * scale
                float(delta.norm())

    times = {}
    for name, fn in (("gram", cap.apply), ("whole", whole_products)):
        fn()
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs)
    print(json.dumps({"model": args.model, "preset": args.preset, "rank": args.rank, "threads": args.threads,
                      "layers": len(pairs), "gram_ms": round(times["gram"] * 1000, 1),
                      "whole_product_ms": round(times["whole"] * 1000, 1)}))


if __name__ == "__main__":
    main()
