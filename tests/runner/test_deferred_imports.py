"""runner/deferred_imports.py: diffusers no longer imports bitsandbytes at start-up, and code that
uses bitsandbytes afterwards gets the real package (checked in a fresh interpreter, since the test
session's own modules are already imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    from ot_gradio.runner.deferred_imports import defer_optional_imports, is_loaded
    assert defer_optional_imports() == ["bitsandbytes", "onnxruntime"], "both are installed here"
    assert defer_optional_imports() == [], "a second call defers nothing"
    import torch
    from diffusers import StableDiffusionPipeline, UNet2DConditionModel  # noqa: F401
    from diffusers.utils import is_bitsandbytes_available
    print("after diffusers:", is_loaded("bitsandbytes"), is_loaded("onnxruntime"), is_bitsandbytes_available())
    from bitsandbytes.optim import AdamW8bit  # a submodule import loads the package first
    import bitsandbytes as bnb
    assert is_loaded("bitsandbytes")
    assert bnb.optim.AdamW8bit is AdamW8bit and sys.modules["bitsandbytes"].nn.Linear4bit is bnb.nn.Linear4bit
    p = torch.nn.Parameter(torch.ones(64, 64))
    p.grad = torch.ones_like(p)
    AdamW8bit([p], lr=0.1).step()
    print("8-bit step moved the weight:", bool((p != 1).all()))
    """
)


def _python(script: str) -> str:
    """`script` run by a fresh interpreter in the repository; its stdout (it must exit 0)."""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_diffusers_starts_without_bitsandbytes_and_hands_it_over_when_used():
    stdout = _python(SCRIPT)
    assert "after diffusers: False False True" in stdout, stdout
    assert "8-bit step moved the weight: True" in stdout, stdout


def test_a_package_that_is_not_installed_is_left_alone():
    from ot_gradio.runner.deferred_imports import defer_optional_imports

    assert defer_optional_imports(("no_such_package_for_ot_gradio",)) == []
    assert "no_such_package_for_ot_gradio" not in sys.modules


PEFT_SCRIPT = textwrap.dedent(
    """
    import torch
    from ot_gradio.runner.deferred_imports import defer_optional_imports, is_loaded, keep_peft_from_bitsandbytes
    defer_optional_imports()
    import diffusers  # noqa: F401
    assert keep_peft_from_bitsandbytes(), "peft's checks answered 'not installed'"
    from peft import LoraConfig, inject_adapter_in_model
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    inject_adapter_in_model(LoraConfig(r=2, lora_alpha=2, target_modules=["0", "2"]), model)
    print("lora layers:", sum(1 for n, _ in model.named_modules() if n.endswith("lora_A")), "bitsandbytes loaded:", is_loaded("bitsandbytes"))
    from bitsandbytes.optim import AdamW8bit  # an 8-bit optimizer still gets the real package
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in params:
        p.grad = torch.ones_like(p)
    AdamW8bit(params, lr=0.1).step()
    print("bitsandbytes loaded:", is_loaded("bitsandbytes"), "and stepped")
    """
)


def test_a_lora_run_without_quantized_layers_keeps_peft_from_importing_bitsandbytes():
    stdout = _python(PEFT_SCRIPT)
    assert "lora layers: 2 bitsandbytes loaded: False" in stdout, stdout
    assert "bitsandbytes loaded: True and stepped" in stdout, stdout


def test_needs_bnb_layers_reads_every_part_of_the_family():
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.runner.deferred_imports import needs_bnb_layers

    flux = TrainConfig.model_validate({"model_type": "FLUX_DEV_1", "training_method": "LORA"})
    assert not needs_bnb_layers(flux)
    flux.text_encoder_2.weight_dtype = "NFLOAT_4"
    assert needs_bnb_layers(flux)
    sd = TrainConfig.model_validate({"model_type": "STABLE_DIFFUSION_15", "training_method": "LORA"})
    sd.unet.weight_dtype = "INT_8"
    assert needs_bnb_layers(sd)
    sd.unet.weight_dtype = "FLOAT_8"  # our own float8 layers, not bitsandbytes'
    assert not needs_bnb_layers(sd)
