"""musubi-tuner's configs (`--config_file` TOML: sd-scripts' options with its own `dit`, `task`,
`t5` / `text_encoder` and network modules) and its dataset TOML (`[[datasets]]` with
`image_directory` / `video_directory`): read as musubi-tuner trains them, not as an SD 1.5 kohya
config without a dataset, as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from ot_gradio.config.io import config_to_dict, load_config
from ot_gradio.config.validation import ConfigError

# musubi-tuner's docs/wan.md training command, as the TOML its --config_file reads
WAN = """task = "t2v-14B"
dit = "/models/wan2.1_t2v_14B_bf16.safetensors"
vae = "/models/wan_2.1_vae.safetensors"
t5 = "/models/models_t5_umt5-xxl-enc-bf16.pth"
dataset_config = "{dataset}"
sdpa = true
mixed_precision = "bf16"
fp8_base = true
optimizer_type = "adamw8bit"
learning_rate = 2e-4
gradient_checkpointing = true
max_data_loader_n_workers = 2
persistent_data_loader_workers = true
network_module = "networks.lora_wan"
network_dim = 32
timestep_sampling = "shift"
discrete_flow_shift = 3.0
max_train_epochs = 16
save_every_n_epochs = 1
seed = 42
output_dir = "/out"
output_name = "my-wan-lora"
blocks_to_swap = 20
"""
# its docs/dataset_config.md: an image dataset and a video one
DATASET = """[general]
resolution = [960, 544]
caption_extension = ".txt"
batch_size = 1
enable_bucket = true
bucket_no_upscale = false

[[datasets]]
image_directory = "{images}"
cache_directory = "/cache/images"
num_repeats = 2

[[datasets]]
video_directory = "{videos}"
cache_directory = "/cache/videos"
target_frames = [1, 25, 45]
frame_extraction = "head"
"""


def _files(tmp_path: Path, config: str = WAN) -> Path:
    (tmp_path / "images").mkdir()
    (tmp_path / "videos").mkdir()
    (tmp_path / "dataset.toml").write_text(DATASET.format(images=tmp_path / "images", videos=tmp_path / "videos"))
    (tmp_path / "train.toml").write_text(config.replace("{dataset}", str(tmp_path / "dataset.toml")))
    return tmp_path / "train.toml"


def test_musubi_tuners_wan_config_trains_wan_from_its_files(tmp_path):
    result = load_config(_files(tmp_path))
    c = config_to_dict(result.config)
    assert (c["model_type"], c["base_model_name"], c["training_method"]) == ("WAN_2_1", "Wan-AI/Wan2.1-T2V-14B-Diffusers", "LORA")
    assert (c["transformer"]["model_name"], c["transformer"]["weight_dtype"]) == ("/models/wan2.1_t2v_14B_bf16.safetensors", "FLOAT_8")
    assert c["vae"]["model_name"] == "/models/wan_2.1_vae.safetensors"
    assert c["text_encoder"]["model_name"] == ""  # the original repo's .pth T5 is not read: said
    assert [(x["path"], x["balancing"]) for x in c["concepts"]] == [(str(tmp_path / "images"), 2.0), (str(tmp_path / "videos"), 1.0)]
    assert [x["image"]["media"] for x in c["concepts"]] == ["IMAGES", "CLIPS"]  # each reads its one kind of file, as there
    assert (c["resolution"], c["frames"], c["batch_size"], c["aspect_ratio_bucketing"]) == ("960x544", "45", 1, True)
    # musubi-tuner's buckets around 960 x 544's area (kohya's, 16 px steps from half its side), not one fixed 960x544
    assert (c["bucket_resolution_step"], c["min_bucket_resolution"], c["max_bucket_resolution"]) == (16, 352, 1472)
    assert c["random_clip_window"] is False  # frame_extraction "head": each clip's first frames, as there
    # shift: a sigmoid of a normal, shifted by discrete_flow_shift
    assert (c["timestep_distribution"], c["timestep_shift"], c["dynamic_timestep_shifting"]) == ("LOGIT_NORMAL", 3.0, False)
    assert (c["epochs"], c["lora_rank"], c["learning_rate"], c["optimizer"]["optimizer"]) == (16, 32, 2e-4, "ADAMW_8BIT")
    assert c["transformer"]["offload_fraction"] == 0.5  # 20 of the 14B's 40 blocks
    assert c["output_model_destination"] == str(Path("/out") / "my-wan-lora.safetensors")
    warning = result.warnings[0]
    assert warning.startswith(f"musubi-tuner config {tmp_path / 'train.toml'}: read as musubi-tuner's")
    assert "t5 models_t5_umt5-xxl-enc-bf16.pth: a text encoder in its original repo's layout is not read here" in warning
    assert "not carried over" not in warning  # every setting of this config is read (or how musubi-tuner runs)


@pytest.mark.parametrize("lines, model_type, extra", [
    ('network_module = "networks.lora_qwen_image"\ndit = "/m/qwen_image_bf16.safetensors"\ntext_encoder = "/m/qwen_2.5_vl_7b.safetensors"\n',
     "QWEN", {"text_encoder": "/m/qwen_2.5_vl_7b.safetensors"}),
    ('network_module = "networks.lora_qwen_image"\nedit = true\ndit = "/m/qwen_image_edit_bf16.safetensors"\n', "QWEN_IMAGE_EDIT", {}),
    ('network_module = "networks.lora_zimage"\ndit = "/m/z_image_turbo_bf16.safetensors"\n', "Z_IMAGE", {}),
    ('network_module = "networks.lora_wan"\ntask = "t2v-A14B"\ndit = "/m/wan2.2_t2v_high_noise_14B.safetensors"\nmin_timestep = 875\n',
     "WAN_2_2_T2V_A14B", {"trained_expert": "HIGH_NOISE"}),
    ('network_module = "networks.lora_wan"\ntask = "i2v-A14B"\ndit = "/m/wan2.2_i2v_low_noise_14B.safetensors"\nmax_timestep = 900\n',
     "WAN_2_2_I2V_A14B", {"trained_expert": "LOW_NOISE"}),
    ('network_module = "networks.lora"\ndit = "/m/mp_rank_00_model_states.pt"\nguidance_scale = 1.0\n', "HUNYUAN_VIDEO", {}),
])
def test_each_family_musubi_tuner_trains(lines, model_type, extra):
    c = config_to_dict(load_config({**_toml(lines), "network_dim": 16, "output_dir": "/out"}).config)
    assert c["model_type"] == model_type
    if "text_encoder" in extra:
        assert c["text_encoder"]["model_name"] == extra["text_encoder"]
    if model_type == "HUNYUAN_VIDEO":  # the original repo's .pt: the base model's transformer, said
        # musubi-tuner feeds the embedding guidance_scale as is; the model reads guidance x 1000 (ours scales by 1000)
        assert c["transformer"]["model_name"] == "" and c["transformer"]["guidance_scale"] == 0.001
    if "trained_expert" in extra:  # an A14B expert's file with its timesteps: that expert (the range is the expert's here)
        assert c["trained_expert"] == extra["trained_expert"] and (c["min_noising_strength"], c["max_noising_strength"]) == (0.0, 1.0)
        assert "model_name" not in c["transformer"] or c["transformer"]["model_name"] == ""  # A14B: its experts come from the base model


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


@pytest.mark.parametrize("lines, message", [
    ('network_module = "networks.lora_framepack"\ndit = "/m/x.safetensors"\n', r"network_module: this musubi-tuner config trains FramePack"),
    ('network_module = "networks.lora_wan"\ntask = "t2v-14B-FC"\ndit = "/m/x.safetensors"\n', r"task: 't2v-14b-fc' is Wan's Fun Control"),
    ('network_module = "networks.lora_wan"\ntask = "t2v-7B"\ndit = "/m/x.safetensors"\n', r"task: 't2v-7b' is no Wan task"),
    ('network_module = "networks.lora_flux"\ndit = "/m/flux1-kontext-dev.safetensors"\n', r"trains FLUX.1 Kontext"),
])
def test_what_musubi_tuner_trains_that_has_no_model_type_here_is_refused(lines, message):
    with pytest.raises(ConfigError, match=message):
        load_config({**_toml(lines), "network_dim": 16, "output_dir": "/out"})


def test_a_musubi_config_naming_its_model_by_module_and_task_is_musubi_tuners():
    """Its dit given on the command line: network_module and task are musubi-tuner's still."""
    result = load_config({"network_module": "networks.lora_wan", "task": "t2v-1.3B", "learning_rate": 2e-4})
    assert result.config.model_type.value == "WAN_2_1" and "read as musubi-tuner's" in result.warnings[0]


def test_sd_scripts_flux_config_stays_sd_scripts(tmp_path):
    """sd-scripts' Flux module without a `dit` is not musubi-tuner's Kontext."""
    c = load_config({"network_module": "networks.lora_flux", "pretrained_model_name_or_path": "/m/flux1-dev.safetensors",
                     "network_dim": 16, "output_dir": "/out"})
    assert c.config.model_type.value == "FLUX_DEV_1" and "read as kohya_ss's" in c.warnings[0]


def test_a_musubi_dataset_toml_by_itself_imports_its_folders(tmp_path):
    _files(tmp_path)
    c = config_to_dict(load_config(tmp_path / "dataset.toml").config)
    assert [x["path"] for x in c["concepts"]] == [str(tmp_path / "images"), str(tmp_path / "videos")]
    assert {x["text"]["caption_lines"] for x in c["concepts"]} == {"WHOLE"}  # musubi-tuner reads a caption file whole


def test_musubi_tuners_own_readings():
    """Qwen's model_version picks the Edit repo (2509 / 2511) and wins over `edit`; Flux.2's picks
    Klein's; a Wan config without task is t2v-14B (musubi-tuner's default); `sigma` (its default)
    draws unshifted timesteps, whatever discrete_flow_shift says; a Wan 2.2 expert from
    timestep_boundary, or its file's name; Qwen-Image-Layered is refused."""
    def load(text: str) -> dict:
        return config_to_dict(load_config({**_toml(text), "network_dim": 8, "output_dir": "/out"}).config)

    c = load('network_module = "networks.lora_qwen_image"\nedit = true\nmodel_version = "edit-2511"\ndit = "/m/q.safetensors"\n')
    assert (c["model_type"], c["base_model_name"]) == ("QWEN_IMAGE_EDIT", "Qwen/Qwen-Image-Edit-2511")
    c = load('network_module = "networks.lora_qwen_image"\nedit_plus = true\n')
    assert c["base_model_name"] == "Qwen/Qwen-Image-Edit-2509"
    c = load('network_module = "networks.lora_flux_2"\nmodel_version = "klein-4b"\ndit = "/m/flux-2-klein-4b.safetensors"\nfp8_text_encoder = true\n')
    assert (c["model_type"], c["base_model_name"], c["text_encoder"]["weight_dtype"]) == ("FLUX_2", "black-forest-labs/FLUX.2-klein-4B", "FLOAT_8")
    c = load('network_module = "networks.lora_wan"\ndit = "/m/wan.safetensors"\ndiscrete_flow_shift = 5.0\n')
    assert (c["model_type"], c["base_model_name"]) == ("WAN_2_1", "Wan-AI/Wan2.1-T2V-14B-Diffusers")
    assert (c["timestep_distribution"], c["timestep_shift"]) == ("UNIFORM", 1.0)
    c = load('network_module = "networks.lora_wan"\ntask = "t2v-A14B"\ndit = "/m/x.safetensors"\ntimestep_boundary = 0.5\nmin_timestep = 600\n')
    assert c["trained_expert"] == "HIGH_NOISE"  # 600 is above this job's boundary (500)
    c = load('network_module = "networks.lora_wan"\ntask = "t2v-A14B"\ndit = "/m/wan2.2_t2v_low_noise_14B_fp16.safetensors"\nmax_timestep = 900\n')
    assert c["trained_expert"] == "LOW_NOISE"  # across the boundary: the file's name says which expert
    with pytest.raises(ConfigError, match=r"model_version: Qwen-Image 'layered' has no model type here"):
        load('network_module = "networks.lora_qwen_image"\nmodel_version = "layered"\n')


def test_a_musubi_video_dataset_takes_its_defaults(tmp_path):
    """Without target_frames musubi-tuner cuts 1-frame clips; without enable_bucket it buckets nothing."""
    (tmp_path / "clips").mkdir()
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nvideo_directory = "{tmp_path / "clips"}"\n')
    result = load_config({"network_module": "networks.lora_wan", "task": "t2v-1.3B", "dit": "/m/w.safetensors", "network_dim": 8,
                          "output_dir": "/out", "dataset_config": str(tmp_path / "data.toml")})
    c = config_to_dict(result.config)
    # clips: bucketed whatever enable_bucket says (musubi-tuner's video caching), at Wan's 16 fps (its source_fps rate)
    assert (c["frames"], c["resolution"], c["aspect_ratio_bucketing"], c["bucket_no_upscale"]) == ("1", "960x544", True, False)
    assert c["frame_rate"] == 16.0
    assert "musubi-tuner cuts 1-frame clips then" in result.warnings[0]
    assert "without source_fps: musubi-tuner trains every frame" in result.warnings[0]
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nvideo_directory = "{tmp_path / "clips"}"\ntarget_frames = [17]\n'
                                        'frame_extraction = "chunk"\n')
    result = load_config({"network_module": "networks.lora_wan", "task": "t2v-1.3B", "dit": "/m/w.safetensors", "network_dim": 8,
                          "output_dir": "/out", "dataset_config": str(tmp_path / "data.toml")})
    assert config_to_dict(result.config)["random_clip_window"] is True  # several windows there: one at random each time here
    assert "frame_extraction 'chunk': musubi-tuner trains several windows" in result.warnings[0]
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nvideo_directory = "{tmp_path / "clips"}"\ntarget_frames = [1, 25, 45]\n'
                                        'source_fps = 30.0\n')
    result = load_config({"network_module": "networks.lora", "dit": "/m/hv.safetensors", "network_dim": 8, "output_dir": "/out",
                          "dataset_config": str(tmp_path / "data.toml")})
    c = config_to_dict(result.config)
    assert (c["model_type"], c["frames"], c["frame_rate"]) == ("HUNYUAN_VIDEO", "45", 24.0)  # HunyuanVideo's rate
    assert "source_fps" not in result.warnings[0]  # (carried over: taken at the model's rate, as there)
    assert "target_frames [1, 25, 45]: musubi-tuner trains a clip once for each length" in result.warnings[0]
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nimage_directory = "{tmp_path / "other"}"\nenable_bucket = true\n'
                                        f'bucket_no_upscale = true\n[[datasets]]\nvideo_directory = "{tmp_path / "clips"}"\n')
    result = load_config({"network_module": "networks.lora", "dit": "/m/hv.safetensors", "network_dim": 8, "output_dir": "/out",
                          "dataset_config": str(tmp_path / "data.toml")})
    assert config_to_dict(result.config)["bucket_no_upscale"] is True  # the image dataset's, said for the clips
    assert "bucket_no_upscale: musubi-tuner upscales clips to their buckets whatever it says" in result.warnings[0]
    (tmp_path / "other").mkdir()
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nvideo_directory = "{tmp_path / "clips"}"\ntarget_frames = [17]\n'
                                        'frame_extraction = "uniform"\n'  # one sample (frame_sample 1): musubi makes it head
                                        f'[[datasets]]\nvideo_directory = "{tmp_path / "other"}"\ntarget_frames = [17]\n'
                                        'frame_extraction = "slide"\nbatch_size = 2\n')
    result = load_config({"network_module": "networks.lora_wan", "task": "t2v-1.3B", "dit": "/m/w.safetensors", "network_dim": 8,
                          "output_dir": "/out", "dataset_config": str(tmp_path / "data.toml")})
    assert config_to_dict(result.config)["random_clip_window"] is True  # one setting here: said
    assert "the video datasets take their frames differently" in result.warnings[0] and "'uniform'" not in result.warnings[0]
    assert "dataset 2 sets batch_size 2: here every dataset trains at the first's, 1" in result.warnings[0]


def test_a_musubi_edit_dataset_reads_its_control_directory(tmp_path):
    """Qwen-Image-Edit's source images in musubi-tuner's control_directory: the concept's Control image folder;
    the start check then counts the pairs when the data is read, not beside the images."""
    from ot_gradio.config.doctor import errors

    for name in ("edited", "sources"):
        (tmp_path / name).mkdir()
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nimage_directory = "{tmp_path / "edited"}"\n'
                                        f'control_directory = "{tmp_path / "sources"}"\n')
    result = load_config({"network_module": "networks.lora_qwen_image", "edit": True, "dit": "/m/q.safetensors", "network_dim": 8,
                          "output_dir": "/out", "dataset_config": str(tmp_path / "data.toml")})
    assert result.config.concepts[0].image.control_folder == str(tmp_path / "sources")
    assert not [e for e in errors(result.config) if "control image" in e]
    (tmp_path / "sources").rmdir()
    assert [e for e in errors(result.config) if "concepts[0].image.control_folder" in e and "does not exist" in e]


def test_a_musubi_dataset_of_a_metadata_jsonl_file_trains_the_images_it_names(tmp_path):
    """musubi-tuner's image_jsonl_file / video_jsonl_file datasets (`image_path` or `video_path` and
    `caption` rows): a concept in the folder of the files they name, the file its Captions file."""
    import json

    from PIL import Image

    from ot_gradio.data import scan_concept

    (tmp_path / "imgs").mkdir()
    for name in ("a.png", "b.png", "skip.png"):
        Image.new("RGB", (16, 16)).save(tmp_path / "imgs" / name)
    rows = tmp_path / "meta.jsonl"
    rows.write_text("".join(json.dumps({"image_path": str(tmp_path / "imgs" / n), "caption": f"{n} line one\nline two"}) + "\n"
                            for n in ("a.png", "b.png")))
    clips = tmp_path / "clips.jsonl"
    clips.write_text(json.dumps({"video_path": str(tmp_path / "vids" / "walk.mp4"), "caption": "walking"}) + "\n")
    (tmp_path / "data.toml").write_text(f'[[datasets]]\nimage_jsonl_file = "{rows}"\ncache_directory = "/c"\n'
                                        f'[[datasets]]\nvideo_jsonl_file = "{clips}"\ntarget_frames = [17]\n')
    result = load_config(tmp_path / "data.toml")
    concepts = result.config.concepts
    assert [(c.path, c.text.captions_file, c.text.caption_lines) for c in concepts] == [
        (str(tmp_path / "imgs"), str(rows), "WHOLE"), (str(tmp_path / "vids"), str(clips), "WHOLE")]
    assert result.config.frames == "17"
    assert {i.relpath: i.captions for i in scan_concept(concepts[0]).items} == {
        "a.png": ("a.png line one\nline two",), "b.png": ("b.png line one\nline two",)}  # (skip.png: not named)
    rows.write_text(rows.read_text() + json.dumps({"image_path": str(tmp_path / "imgs" / "a.png"), "caption": "again",
                                                   "control_path": str(tmp_path / "src" / "a.png")}) + "\n")
    warning = load_config(tmp_path / "data.toml").warnings[0]
    assert "control_path images are not carried over" in warning and "a file named in several rows" in warning
