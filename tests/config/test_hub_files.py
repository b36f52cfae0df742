"""Hugging Face addresses a base model takes: a file's (downloaded, then a single file) and a
repo page's (its id); any other web address is named before the run."""

import pytest

from ot_gradio.config.hub_files import hub_file_address, hub_repo_address
from ot_gradio.config.schema import TrainConfig
from ot_gradio.runner.startcheck import model_problems


@pytest.mark.parametrize("value, file, repo", [
    ("https://huggingface.co/a/b/blob/main/x.safetensors", ("a/b", "main", "x.safetensors"), None),
    (" https://huggingface.co/a/b/resolve/v2/sub/x.safetensors ", ("a/b", "v2", "sub/x.safetensors"), None),
    ("https://huggingface.co/stable-diffusion-v1-5/stable-diffusion-v1-5", None, "stable-diffusion-v1-5/stable-diffusion-v1-5"),
    ("https://huggingface.co/a/b/", None, "a/b"),
    ("https://huggingface.co/a/b/tree/main", None, "a/b"),
    ("https://huggingface.co/datasets/a", None, None),
    ("https://huggingface.co/datasets/a/b", None, None),
    ("https://civitai.com/api/download/models/1", None, None),
    ("a/b", None, None),
])
def test_hub_addresses(value, file, repo):
    assert hub_file_address(value) == file and hub_repo_address(value) == repo


def test_the_start_check_takes_hub_addresses_and_names_other_sites():
    def problems(name: str) -> list[str]:
        return [p for p in model_problems(TrainConfig(base_model_name=name)) if p.startswith("base_model_name")]

    assert problems("https://huggingface.co/a/b/blob/main/x.safetensors") == []
    assert problems("https://huggingface.co/a/b") == []
    (problem,) = problems("https://example.com/files/model.safetensors")
    assert "not of a Hugging Face file" in problem and "or a Civitai model" in problem and "download the file and give its path" in problem
    # a part's own model takes a file address, not a repo's page
    config = TrainConfig(transformer={"model_name": "https://huggingface.co/a/b"}, model_type="FLUX_DEV_1")
    assert any(p.startswith("transformer.model_name") for p in model_problems(config))


def test_a_repo_page_address_loads_as_its_id():
    from ot_gradio.models.common import base_model_source

    hub = {"cache_dir": None, "offline": True, "token": None}
    assert base_model_source("https://huggingface.co/a/b/tree/main", **hub) == "a/b"
    assert base_model_source("a/b", **hub) == "a/b" and base_model_source("/models/x.safetensors", **hub) == "/models/x.safetensors"
