"""The files a run reads besides its base model, named by the check before Start (the page's Start,
`validate`, `train`) instead of minutes later once the model has loaded: the LoRA a LORA run
continues, and the embeddings a run continues or uses."""

from ot_gradio.config.schema import TrainConfig
from ot_gradio.runner.startcheck import embedding_problems, lora_problems, placeholder_problems, start_problems


def test_the_start_check_names_a_lora_to_start_from_that_cannot_be_had(tmp_path):
    def problems(name: str, method: str = "LORA") -> list[str]:
        return lora_problems(TrainConfig(training_method=method, lora_model_name=name))

    (tmp_path / "mine.safetensors").write_bytes(b"x")
    for fine in ("", str(tmp_path / "mine.safetensors"), "https://civitai.com/models/5?modelVersionId=6",
                 "https://huggingface.co/someone/loras/blob/main/style.safetensors"):
        assert problems(fine) == [], fine
    (missing,) = problems(str(tmp_path / "gone.safetensors"))
    assert missing.startswith("lora_model_name: ") and "does not exist" in missing and "Civitai LoRA's address" in missing
    (elsewhere,) = problems("https://example.com/style.safetensors")
    assert "not of a Hugging Face file" in elsewhere
    (keyed,) = problems("https://civitai.com/api/download/models/7?token=SECRETKEY")
    assert "Civitai API key" in keyed and "SECRETKEY" not in keyed
    assert problems(str(tmp_path / "gone.safetensors"), method="FINE_TUNE") == []  # only a LORA run reads it


def test_the_start_check_names_embedding_files_that_cannot_be_had(tmp_path):
    (tmp_path / "mine.safetensors").write_bytes(b"x")
    here, gone = str(tmp_path / "mine.safetensors"), str(tmp_path / "gone.safetensors")
    config = TrainConfig(training_method="EMBEDDING", embedding={"model_name": gone},
                         additional_embeddings=[{"model_name": here}, {"model_name": "https://civitai.com/models/1"},
                                                {"model_name": "https://huggingface.co/someone/ti/blob/main/style.pt"},
                                                {"model_name": "https://example.com/style.pt"}, {}])
    main, web = embedding_problems(config)  # a Civitai and a Hugging Face address download at the start
    assert main.startswith("embedding.model_name: ") and "/gone.safetensors does not exist" in main and "leave it blank" in main
    assert "Civitai embedding's address" in main
    assert web.startswith("additional_embeddings[3].model_name: https://example.com/style.pt is a web address but not of")
    assert "Civitai embedding (" in web
    data = config.model_dump(mode="json")
    assert main in start_problems(config, data, tmp_path) and web in start_problems(config, data, tmp_path)
    # a LoRA run reads the additional embeddings only; a VAE fine-tune none
    assert embedding_problems(config.model_copy(update={"training_method": "LORA"})) == [web]
    assert embedding_problems(config.model_copy(update={"training_method": "FINE_TUNE_VAE"})) == []


def test_an_embedding_run_whose_captions_never_hold_its_placeholder_is_refused(tmp_path):
    """OneTrainer's wiki: samples that never change mean `<embedding>` is in neither the sample
    prompt nor the captions. A run without it in any caption trained nothing and said done."""
    from PIL import Image

    data = tmp_path / "cat"
    data.mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (8, 8)).save(data / f"{name}.png")
        (data / f"{name}.txt").write_text("a photo of a cat on a sofa\n")
    config = TrainConfig(training_method="EMBEDDING", concepts=[{"name": "cat", "path": str(data)}])
    (problem,) = placeholder_problems(config)
    assert problem.startswith("embedding.placeholder: '<embedding>' is in none of the captions of the 2 item(s) of 'cat'")
    assert problem in start_problems(config, config.model_dump(mode="json"), tmp_path)
    assert placeholder_problems(config.model_copy(update={"training_method": "LORA"})) == []  # a LoRA needs none
    (data / "b.txt").write_text("a photo of <embedding> on a sofa\n")  # one caption holding it is enough here
    assert placeholder_problems(config) == []
    (data / "b.txt").write_text("a photo of a cat\n")
    (tmp_path / "prompts.txt").write_text("a photo of <embedding>\nart by <embedding>\n")
    from_file = TrainConfig(training_method="EMBEDDING", concepts=[
        {"name": "cat", "path": str(data), "text": {"prompt_source": "concept", "prompt_path": str(tmp_path / "prompts.txt")}}])
    assert placeholder_problems(from_file) == []
    named = TrainConfig(training_method="EMBEDDING", embedding={"placeholder": "cat"}, concepts=[{"name": "cat", "path": str(data)}])
    assert placeholder_problems(named) == []  # a placeholder that is a word of the captions
