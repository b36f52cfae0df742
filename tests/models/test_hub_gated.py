"""A gated hub repo (Flux.1-dev, SD 3) through the real download code, from a local stand-in for
the hub (tests/fake_hub.py): without a granted token the load says what to do on the hub and where
the token goes; with it, every part loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fake_hub import FakeHub

LOAD = """
import json, sys
from ot_gradio.models.common import ModelLoadError
from ot_gradio.models.registry import get_family
for model_type, repo in json.loads(sys.argv[1]):
    for token in (None, "hf_granted"):
        try:
            model = get_family(model_type).load(repo, cache_dir=sys.argv[2], offline=False, token=token)
            print("RESULT " + json.dumps([model_type, token, sorted(model.parts)]))
        except ModelLoadError as err:
            print("RESULT " + json.dumps([model_type, token, str(err)]))
"""


def test_a_gated_repo_loads_with_a_granted_token_and_says_what_to_do_without(tmp_path):
    from ot_gradio.models.tiny import resolve_tiny

    jobs = [("STABLE_DIFFUSION_15", "sd15"), ("FLUX_DEV_1", "flux")]  # the SD pipeline's loading and the flow families'
    repos = {f"gated/{tiny}": resolve_tiny(f"tiny:{tiny}").diffusers_dir for _, tiny in jobs}
    with FakeHub(repos, gated=dict.fromkeys(repos, "hf_granted")) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        out = subprocess.run([sys.executable, "-c", LOAD, json.dumps([(t, f"gated/{tiny}") for t, tiny in jobs]), str(tmp_path / "hf")],
                             env=env, capture_output=True, text=True, timeout=600)
    results = [json.loads(line.removeprefix("RESULT ")) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 4, out.stderr[-3000:]
    for (model_type, tiny), (refused, granted) in zip(jobs, zip(results[::2], results[1::2], strict=True), strict=True):
        message = refused[2]
        assert refused[:2] == [model_type, None] and isinstance(message, str), refused
        assert f"gated/{tiny} is gated" in message and f"https://huggingface.co/gated/{tiny}" in message, message
        assert "General → Hugging Face token" in message
        assert granted[:2] == [model_type, "hf_granted"] and isinstance(granted[2], list) and "vae" in granted[2], granted
