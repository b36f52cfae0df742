"""A base model on Civitai: the address forms users copy, and the download through a local
stand-in for Civitai's API (tests/fake_civitai.py): the key reaches Civitai and not its storage
host, the file is checked against the listed SHA-256, resumed after a break, reused offline, and
what cannot be trained on is refused before it downloads."""

import hashlib
import json

import pytest

from ot_gradio.config.civitai import CivitaiAddress, address_problem, base_model_mismatch, civitai_address
from ot_gradio.config.schema import TrainConfig
from ot_gradio.models import civitai_download
from ot_gradio.models.common import ModelLoadError, base_model_source, embedding_file, lora_file, part_file
from ot_gradio.runner.startcheck import model_problems
from tests.fake_civitai import FakeCivitai, Version

KEY = "civitai-key"


@pytest.mark.parametrize("value, expected", [
    ("https://civitai.com/models/827184", CivitaiAddress(827184, None)),
    ("https://civitai.com/models/827184/wai-illustrious-sdxl?modelVersionId=2514310", CivitaiAddress(827184, 2514310)),
    (" https://www.civitai.com/models/5/x/ ", CivitaiAddress(5, None)),
    ("https://civitai.green/models/5?modelVersionId=6", CivitaiAddress(5, 6)),
    ("https://civitai.com/api/download/models/2514310", CivitaiAddress(None, 2514310)),
    ("https://civitai.com/api/download/models/7?type=Model&format=SafeTensor&size=pruned&fp=fp16",
     CivitaiAddress(None, 7, {"type": "Model", "format": "SafeTensor", "size": "pruned", "fp": "fp16"})),
    ("https://civitai.com/api/download/models/7?token=abc", CivitaiAddress(None, 7, token_in_address=True)),
    ("urn:air:sdxl:checkpoint:civitai:827184@2514310", CivitaiAddress(827184, 2514310)),
    ("https://civitai.com/images/123", None),
    ("https://civitai.com/models/abc", None),
    ("https://notcivitai.com/models/5", None),
    ("https://huggingface.co/a/b", None),
    ("civitai.com/models/5", None),
])
def test_the_addresses_users_copy(value, expected):
    assert civitai_address(value) == expected


def test_the_start_check_takes_civitai_models_and_keeps_keys_out_of_configs():
    def problems(name: str) -> list[str]:
        return [p for p in model_problems(TrainConfig(base_model_name=name)) if p.startswith("base_model_name")]

    assert problems("https://civitai.com/models/827184?modelVersionId=2514310") == []
    assert problems("urn:air:sdxl:checkpoint:civitai:827184@2514310") == []
    (problem,) = problems("https://civitai.com/api/download/models/7?token=SECRETKEY")
    assert "Civitai API key" in problem and "SECRETKEY" not in problem
    (problem,) = problems("https://civitai.com/images/123")
    assert "modelVersionId" in problem
    assert address_problem("https://civitai.com/models/1") is None
    # a part's own model takes one too (a transformer-only Flux checkpoint lives there)
    config = TrainConfig(model_type="FLUX_DEV_1", transformer={"model_name": "https://civitai.com/models/1?modelVersionId=2"})
    assert not [p for p in model_problems(config) if p.startswith("transformer.model_name")]


def test_a_version_made_for_another_model_is_named():
    assert base_model_mismatch("SD 1.5", "STABLE_DIFFUSION_XL_10_BASE").startswith("it is a SD 1.5 model, which loads as STABLE_DIFFUSION_15")
    assert base_model_mismatch("Illustrious", "STABLE_DIFFUSION_XL_10_BASE") is None
    assert base_model_mismatch("Pony", "STABLE_DIFFUSION_XL_10_BASE_INPAINTING") is None
    assert base_model_mismatch("Some New Model", "STABLE_DIFFUSION_15") is None  # an unknown tag is not judged


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A Civitai with model 1 (versions 10 and 11: 11 the newest, with an fp16 and an fp32 file), and the key set."""
    files = {}
    for name, size in (("old.safetensors", 3000), ("model-fp16.safetensors", 70_000), ("model-fp32.safetensors", 90_000)):
        files[name] = tmp_path / "site" / name
        files[name].parent.mkdir(exist_ok=True)
        files[name].write_bytes(hashlib.sha256(name.encode()).digest() * (size // 32))
    versions = [Version(10, 1, {"old.safetensors": files["old.safetensors"]}),
                Version(11, 1, {"model-fp16.safetensors": files["model-fp16.safetensors"],
                                "model-fp32.safetensors": files["model-fp32.safetensors"]},
                        fp={"model-fp16.safetensors": "fp16", "model-fp32.safetensors": "fp32"})]
    with FakeCivitai(versions, key=KEY) as fake:
        monkeypatch.setenv("CIVITAI_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.delenv("CIVITAI_TOKEN", raising=False)
        monkeypatch.delenv("CIVITAI_API_KEY", raising=False)
        civitai_download.use_token(KEY)
        fake.files = files
        yield fake
    civitai_download.use_token(None)


def load(address: str, cache, offline: bool = False, model_type: str = "STABLE_DIFFUSION_15") -> str:
    return base_model_source(address, cache_dir=str(cache), offline=offline, token=None, model_type=model_type)


def test_a_model_page_downloads_its_newest_version_once_and_offline_after(site, tmp_path):
    path = load("https://civitai.com/models/1/some-model", tmp_path / "hf")
    assert path == str(tmp_path / "hf" / "civitai" / "11" / "model-fp16.safetensors")  # the primary file of the newest
    assert open(path, "rb").read() == site.files["model-fp16.safetensors"].read_bytes()
    # the key went to Civitai's download link, never to the storage host it redirected to
    assert [(p, a) for m, p, a, r in site.requests if p.startswith("/api/download/")] == [("/api/download/models/11", f"Bearer {KEY}")]
    assert [a for m, p, a, r in site.requests if p.startswith("/storage/")] == [None]
    meta = json.loads((tmp_path / "hf" / "civitai" / "11" / "model-fp16.safetensors.civitai.json").read_text())
    assert meta["sha256"] == hashlib.sha256(site.files["model-fp16.safetensors"].read_bytes()).hexdigest() and meta["baseModel"] == "SD 1.5"
    assert not list((tmp_path / "hf" / "civitai").rglob("*.part"))
    note = civitai_download.unpinned_version_note("https://civitai.com/models/1/some-model", path)
    assert "the newest, 11 (model-fp16.safetensors)" in note and "https://civitai.com/models/1?modelVersionId=11" in note
    assert civitai_download.unpinned_version_note("https://civitai.com/models/1?modelVersionId=11", path) is None

    assert load("https://civitai.com/models/1?modelVersionId=11", tmp_path / "hf") == path
    assert len(site.downloads()) == 1  # known: not fetched again
    site.requests.clear()
    assert load("https://civitai.com/models/1", tmp_path / "hf", offline=True) == path  # offline: the newest here
    assert load("urn:air:sd1:checkpoint:civitai:1@11", tmp_path / "hf", offline=True) == path
    assert site.requests == []
    with pytest.raises(ModelLoadError, match="has not been downloaded .* offline mode is on"):
        load("https://civitai.com/models/1?modelVersionId=10", tmp_path / "hf", offline=True)


def test_a_download_link_chooses_its_file_and_a_part_takes_one_too(site, tmp_path):
    path = load("https://civitai.com/api/download/models/11?type=Model&format=SafeTensor&fp=fp32", tmp_path / "hf")
    assert path.endswith("/11/model-fp32.safetensors")
    assert part_file("https://civitai.com/models/1?modelVersionId=10", "transformer.model_name", cache_dir=str(tmp_path / "hf"),
                     offline=False, token=None).name == "old.safetensors"


def test_without_a_key_the_message_says_where_to_get_one(site, tmp_path):
    civitai_download.use_token(None)
    with pytest.raises(ModelLoadError) as err:
        load("https://civitai.com/models/1", tmp_path / "hf")
    assert "base_model_name" in str(err.value) and "General → Civitai API key" in str(err.value)
    assert "civitai.com/user/account" in str(err.value)
    civitai_download.use_token("wrong")
    with pytest.raises(ModelLoadError, match="no access to it"):
        load("https://civitai.com/models/1", tmp_path / "hf")


def test_a_broken_download_resumes_where_it_stopped(site, tmp_path):
    site.cut_after = 30_000
    with pytest.raises(ModelLoadError, match="start again"):
        load("https://civitai.com/models/1", tmp_path / "hf")
    part = tmp_path / "hf" / "civitai" / "11" / "model-fp16.safetensors.part"
    assert part.stat().st_size == 30_000 and not part.with_suffix("").exists()
    site.cut_after = None
    path = load("https://civitai.com/models/1", tmp_path / "hf")
    assert site.downloads()[-1][1] == "bytes=30000-"  # only the rest
    assert open(path, "rb").read() == site.files["model-fp16.safetensors"].read_bytes()


def test_other_bytes_than_listed_are_thrown_away(site, tmp_path):
    site.versions[11].sha256["model-fp16.safetensors"] = "0" * 64
    with pytest.raises(ModelLoadError, match="other bytes than Civitai lists"):
        load("https://civitai.com/models/1", tmp_path / "hf")
    assert not [p for p in (tmp_path / "hf" / "civitai" / "11").iterdir() if p.name.startswith("model")]


def test_what_cannot_be_trained_on_is_refused_before_it_downloads(site, tmp_path):
    with pytest.raises(ModelLoadError, match="it is a SD 1.5 model, which loads as STABLE_DIFFUSION_15"):
        load("https://civitai.com/models/1", tmp_path / "hf", model_type="STABLE_DIFFUSION_XL_10_BASE")
    site.versions[10].model_type = "LORA"
    with pytest.raises(ModelLoadError, match="is a LORA, not a model to train on"):
        load("https://civitai.com/models/1?modelVersionId=10", tmp_path / "hf")
    pickle = tmp_path / "site" / "model.ckpt"
    pickle.write_bytes(b"x" * 100)
    site.versions[12] = Version(12, 2, {"model.ckpt": pickle})
    with pytest.raises(ModelLoadError, match="is a pickle, which can run code"):
        load("https://civitai.com/models/2", tmp_path / "hf")
    with pytest.raises(ModelLoadError, match="Civitai has no such model"):
        load("https://civitai.com/models/99", tmp_path / "hf")
    assert site.downloads() == []


def test_a_lora_field_takes_a_civitai_lora_and_refuses_a_checkpoint(site, tmp_path):
    def start_from(address: str, model_type: str = "STABLE_DIFFUSION_15"):
        return lora_file(address, "lora_model_name", cache_dir=str(tmp_path / "hf"), offline=False, token=None, model_type=model_type)

    with pytest.raises(ModelLoadError, match=r"lora_model_name: .* is a Checkpoint, not a LoRA"):
        start_from("https://civitai.com/models/1?modelVersionId=10")
    site.versions[10].model_type = "LORA"
    with pytest.raises(ModelLoadError, match="it is a SD 1.5 model, which loads as STABLE_DIFFUSION_15"):
        start_from("https://civitai.com/models/1?modelVersionId=10", model_type="STABLE_DIFFUSION_XL_10_BASE")
    assert site.downloads() == []
    assert start_from("https://civitai.com/models/1?modelVersionId=10").read_bytes() == site.files["old.safetensors"].read_bytes()
    with pytest.raises(ModelLoadError, match="gone.safetensors does not exist; give a LoRA .safetensors file"):
        start_from(str(tmp_path / "gone.safetensors"))
    with pytest.raises(ModelLoadError, match="is a web address but not of a Hugging Face file"):
        start_from("https://example.com/style.safetensors")


def test_an_embedding_field_takes_a_civitai_textual_inversion_and_refuses_a_lora(site, tmp_path):
    def use(address: str, model_type: str = "STABLE_DIFFUSION_15"):
        return embedding_file(address, "additional_embeddings[0].model_name", cache_dir=str(tmp_path / "hf"), offline=False,
                              token=None, model_type=model_type)

    site.versions[10].model_type = "LORA"
    with pytest.raises(ModelLoadError, match=r"additional_embeddings\[0\].model_name: .* is a LORA, not an embedding; give an "
                                             r"embedding's address \(Textual Inversion\)"):
        use("https://civitai.com/models/1?modelVersionId=10")
    # most older Textual Inversions have an A1111 .pt only: taken (read weights-only), a .safetensors first where both are
    pt, tensors = tmp_path / "site" / "ti.pt", tmp_path / "site" / "ti.safetensors"
    pt.write_bytes(b"p" * 2000)
    tensors.write_bytes(b"s" * 3000)
    site.versions[20] = Version(20, 2, {"ti.pt": pt}, model_type="TextualInversion")
    site.versions[21] = Version(21, 2, {"ti.pt": pt, "ti.safetensors": tensors}, model_type="TextualInversion")
    assert use("https://civitai.com/models/2?modelVersionId=20").read_bytes() == pt.read_bytes()
    assert use("https://civitai.com/models/2?modelVersionId=21").name == "ti.safetensors"
    with pytest.raises(ModelLoadError, match="it is a SD 1.5 model, which loads as STABLE_DIFFUSION_15"):
        use("https://civitai.com/models/2?modelVersionId=21", model_type="STABLE_DIFFUSION_XL_10_BASE")
    site.versions[22] = Version(22, 3, {"model.pt": pt})  # a checkpoint's pickle is still refused as a base model
    with pytest.raises(ModelLoadError, match="is a pickle, which can run code"):
        load("https://civitai.com/models/3?modelVersionId=22", tmp_path / "hf")
    with pytest.raises(ModelLoadError, match=r"gone.pt does not exist; give an embedding .safetensors \(or .pt\) file"):
        use(str(tmp_path / "gone.pt"))


def test_a_file_downloaded_before_serves_when_civitai_is_out_of_reach(site, tmp_path, monkeypatch):
    path = load("https://civitai.com/models/1?modelVersionId=11", tmp_path / "hf")
    monkeypatch.setenv("CIVITAI_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert load("https://civitai.com/models/1?modelVersionId=11", tmp_path / "hf") == path
    with pytest.raises(ModelLoadError, match="could not reach Civitai"):
        load("https://civitai.com/models/1?modelVersionId=10", tmp_path / "hf")
