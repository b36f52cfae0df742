"""What only Wan 2.1 does: its prompts are encoded exactly as WanPipeline encodes them, an image
is a one-frame video, and its ComfyUI layer names are the original model's (diffusers' own
converter of the original layout names each of them back to our layer)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def wan():
    from ot_gradio.models.tiny.wan import tiny_wan_components
    from ot_gradio.models.wan import Wan21

    return Wan21(tiny_wan_components())


def test_prompts_are_encoded_as_the_pipeline_does(wan):
    prompts = ["a  cat &amp; a dog ", "a yellow square moving left"]
    ours = wan.encode_text(prompts)["encoder_hidden_states"]
    theirs, _ = wan.pipeline().encode_prompt(prompts, do_classifier_free_guidance=False, max_sequence_length=512)
    assert ours.shape == (2, 512, 32) and torch.equal(ours[0, 12:], torch.zeros_like(ours[0, 12:]))
    torch.testing.assert_close(ours, theirs)


def test_the_runs_token_window_is_the_one_encoded(wan):
    from types import SimpleNamespace

    wan.configure_flow(SimpleNamespace(text_encoder_sequence_length=64))
    try:
        assert wan.encode_text(["a cat"])["encoder_hidden_states"].shape == (1, 64, 32)
    finally:
        wan.configure_flow(SimpleNamespace(text_encoder_sequence_length=None))
    assert wan.text_encoder_sequence_length == 512


def test_an_image_is_a_one_frame_video_and_frames_fold_by_four(wan):
    image = torch.rand(1, 3, 32, 32) * 2 - 1
    one = wan.encode_images(image, sample=False)
    assert one.shape == (1, 16, 1, 4, 4)
    torch.testing.assert_close(one, wan.encode_images(image.unsqueeze(2), sample=False))
    assert wan.encode_images(torch.zeros(1, 3, 9, 32, 32), sample=False).shape == (1, 16, 3, 4, 4)
    assert wan.decode_latents(one).shape == (1, 3, 1, 32, 32)


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "wan21-i2v"])
def test_comfyui_names_are_the_original_layout(wan, i2v):
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    from ot_gradio.models.comfy_lora_names import wan_original
    from ot_gradio.models.key_layout import layer_paths
    from ot_gradio.models.tiny.wan import tiny_wan_transformer

    transformer = tiny_wan_transformer(0, in_channels=36, image_dim=32, added_kv_proj_dim=24) if i2v else wan.transformer
    paths = layer_paths(transformer)
    assert any("image_embedder" in p for p in paths) == i2v
    original = {wan_original(p): p for p in paths}
    assert None not in original and len(original) == len(paths)
    converted = convert_wan_transformer_to_diffusers({f"{o}.weight": torch.zeros(1) for o in original})
    assert set(converted) == {f"{p}.weight" for p in paths}


def test_a_training_sample_is_an_mp4_of_the_runs_frames(wan, tmp_path):
    """With Frames 5 the trainer's sample is a clip: an .mp4 (h264) that decodes to 5 frames of
    the sample's size, and the sample event names it."""
    import av

    from ot_gradio.config.parts import SampleConfig
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.video import FrameSampling, probe_clip
    from ot_gradio.training.backup import Counters
    from ot_gradio.training.device import Precision
    from ot_gradio.training.distributed import Distributed
    from ot_gradio.training.method_base import Method
    from ot_gradio.training.run_state import Reporter, RunPaths, RunState
    from ot_gradio.training.samples import sample_during_training

    class Events(Reporter):
        def __init__(self):
            self.samples = []

        def status(self, status, message=""):
            pass

        def sample(self, **fields):
            self.samples.append(fields)

    config = TrainConfig(model_type="WAN_2_1", frames="6", frame_rate=8.0,
                         samples=[SampleConfig(prompt="a yellow square", width=80, height=64, diffusion_steps=2, cfg_scale=2.0),
                                  SampleConfig(prompt="a yellow square", width=80, height=64, diffusion_steps=2, cfg_scale=2.0, frames=10)])
    wan.configure_flow(config)
    assert wan.sample_frames == 5  # 6 cut to 4k+1
    weight = torch.nn.Parameter(torch.zeros(1))
    paths = RunPaths(tmp_path / "samples", tmp_path / "backup", tmp_path / "save", None, [tmp_path])
    run = RunState(config, paths, Events(), Distributed(), torch.device("cpu"), Precision(config.train_dtype, torch.device("cpu"), False),
                   wan, Method(), [weight], Counters(epoch=1, epoch_step=0, global_step=3), None, optimizer=torch.optim.SGD([weight], lr=0.1))
    sample_during_training(run)
    event, longer = run.report.samples
    assert event["path"].endswith("step000003-epoch1-0.mp4")
    info = probe_clip(event["path"], FrameSampling(frames=100, step=1, fps=1000.0))
    assert (info.width, info.height, info.available) == (80, 64, 5)
    # a sample's own Frames (10, cut to 4k+1 = 9) for that sample only; its Frames 1 (the default) is the run's
    assert probe_clip(longer["path"], FrameSampling(frames=100, step=1, fps=1000.0)).available == 9
    assert wan.sample_frames == 5
    with av.open(event["path"]) as clip:
        assert clip.streams.video[0].codec_context.name in ("h264", "mpeg4")
        assert float(clip.streams.video[0].average_rate) == 8.0
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["step000003-epoch1-0.mp4", "step000003-epoch1-1.mp4"]  # no temp file


@pytest.mark.parametrize("expert", ["HIGH_NOISE", "LOW_NOISE"])
def test_wan22_a14b_draws_t_in_its_experts_range_only_and_samples_with_both(expert):
    """The trained expert is the transformer part; t is drawn only where the pipeline runs it
    (t * 1000 >= 875 for HIGH_NOISE, below for LOW_NOISE), spread over that range; the pipeline
    has it in its own place and the other expert in the other."""
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.models.tiny.wan import tiny_wan_components, tiny_wan_transformer
    from ot_gradio.models.wan import Wan22T2VA14B
    from ot_gradio.training.flow_matching import FlowMatchingSchedule

    model = Wan22T2VA14B({**tiny_wan_components(), "transformer_2": tiny_wan_transformer(1)})
    config = TrainConfig(model_type="WAN_2_2_T2V_A14B", trained_expert=expert, timestep_distribution="LOGIT_NORMAL", frames="5")
    model.configure_flow(config)
    high = expert == "HIGH_NOISE"
    t = FlowMatchingSchedule(model, config, torch.device("cpu")).draw_timesteps(torch.zeros(1, 16, 1, 4, 4), 4000)
    assert bool(((t * 1000 >= 875) == high).all()) and bool((t > 0).all() and (t <= 1).all())
    assert float(t.max() - t.min()) > (0.1 if high else 0.7)
    pipe = model.pipeline()
    assert pipe.config.boundary_ratio == 0.875
    assert (pipe.transformer if high else pipe.transformer_2) is model.transformer
    assert (pipe.transformer_2 if high else pipe.transformer) is model.idle_expert is not model.transformer
    assert not any(p.requires_grad for p in model.idle_expert.parameters())


def test_a_two_expert_folder_is_refused_as_a_one_transformer_wan_and_the_reverse():
    from ot_gradio.models.common import ModelLoadError
    from ot_gradio.models.tiny.wan import tiny_wan_components, tiny_wan_transformer
    from ot_gradio.models.wan import Wan21, Wan22T2VA14B

    with pytest.raises(ModelLoadError, match="pick the model type WAN_2_2_T2V_A14B"):
        Wan21({**tiny_wan_components(), "transformer_2": tiny_wan_transformer(1)})
    with pytest.raises(ModelLoadError, match="no transformer_2"):
        Wan22T2VA14B({**tiny_wan_components(), "transformer_2": None})


def test_wan22_a14b_samples_with_one_expert_on_the_device_at_a_time():
    """Each expert is sent to the sampling device as the pipeline turns to it, the other sent home
    first (on the CPU both places are one: the order of the moves is what is checked)."""
    from ot_gradio.models.tiny.wan import tiny_wan_components, tiny_wan_transformer
    from ot_gradio.models.wan import Wan22T2VA14B

    model = Wan22T2VA14B({**tiny_wan_components(), "transformer_2": tiny_wan_transformer(1)})
    events = []
    for name, expert in (("high", model.transformer), ("low", model.idle_expert)):
        move = expert.to
        expert.to = lambda *a, name=name, move=move, **k: events.append(f"move {name}") or move(*a, **k)
        expert.register_forward_hook(lambda *_, name=name: events.append(f"run {name}"))
    frames = model.sample("a cat", height=32, width=32, steps=2, device="cpu")
    assert len(frames) == 5
    runs = [i for i, e in enumerate(events) if e.startswith("run")]
    assert {events[i] for i in runs} == {"run high", "run low"}
    for i in runs:
        this = events[i].split()[1]
        other = "low" if this == "high" else "high"
        assert events[i - 2: i] == [f"move {other}", f"move {this}"], events[max(0, i - 3): i + 1]
    assert not model.transformer._forward_pre_hooks and not model.idle_expert._forward_pre_hooks


@pytest.mark.parametrize("tiny", ["wan", "wan22-5b", "wan21-i2v"])
def test_the_transformer_file_is_the_original_layout_read_back_by_diffusers(tiny, tmp_path):
    """ORIGINAL_TRANSFORMER writes Wan-AI's names (the file ComfyUI loads): diffusers' own converter
    of that layout gives back every weight exactly (Wan 2.1 I2V's image projection and image keys
    and values too), and the file loads as `transformer.model_name`."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
    from safetensors.torch import load_file

    from ot_gradio.config.enums import ModelType
    from ot_gradio.models.registry import get_family
    from ot_gradio.models.tiny import all_tiny_models

    Wan21 = get_family({"wan": ModelType.WAN_2_1, "wan22-5b": ModelType.WAN_2_2_TI2V_5B, "wan21-i2v": ModelType.WAN_2_1_I2V}[tiny])
    saved = all_tiny_models()[f"tiny:{tiny}"][1](tmp_path / "base")
    model = Wan21.load(str(saved.diffusers_dir))
    with torch.no_grad():  # a changed weight, to see it come back from the file
        model.transformer.blocks[0].attn1.to_q.weight.add_(1.0)
    file = model.save_single_file(tmp_path / "wan.safetensors", torch.float32)
    original = load_file(str(file))
    assert "head.modulation" in original and "blocks.0.self_attn.q.weight" in original and "blocks.0.norm3.weight" in original
    if tiny == "wan21-i2v":
        assert {"img_emb.proj.0.weight", "img_emb.proj.1.weight", "img_emb.proj.3.weight", "img_emb.proj.4.weight",
                "blocks.0.cross_attn.k_img.weight", "blocks.0.cross_attn.norm_k_img.weight"} <= original.keys()
    ours = model.transformer.state_dict()
    back = convert_wan_transformer_to_diffusers(dict(original))
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)
    reloaded = Wan21.load(str(saved.diffusers_dir), part_models={"transformer": str(file)}).transformer.state_dict()
    assert all(torch.equal(reloaded[k], ours[k]) for k in ours)


def test_what_the_transformer_keeps_in_float32_stays_there_and_a_float16_run_predicts():
    """diffusers keeps Wan's rotary tables, time embedder, modulation table and norms in float32
    (`_keep_in_fp32_modules`) when it loads the rest in bfloat16, and so must the load and a cast
    (`cast_parts` took the first parameter, the float32 modulation table, for the whole part's type
    and cast all of it). A FLOAT_16 run with the BFLOAT_16 transformer of the presets then predicts:
    a float16 autocast refuses to concatenate the bfloat16 rotary tables."""
    from ot_gradio.models.common import cast_parts, compute_dtype, module_dtype
    from ot_gradio.models.wan import Wan21

    def kept(module):
        return {n: t.dtype for n, t in [*module.named_parameters(), *module.named_buffers()]
                if t.is_floating_point() and {"rope", "time_embedder", "scale_shift_table", "norm2"} & set(n.split("."))}

    loaded = Wan21.load("tiny:wan", dtypes={"transformer": torch.bfloat16})
    cast = Wan21.load("tiny:wan")
    cast_parts(cast.parts, {**{p: torch.float32 for p in cast.parts}, "transformer": torch.bfloat16})
    for model in (loaded, cast):
        transformer = model.transformer
        assert {"rope.freqs_cos", "time_embedder.linear_1.weight"} <= {n.partition("condition_embedder.")[2] or n for n in kept(transformer)}
        assert set(kept(transformer).values()) == {torch.float32}
        assert transformer.patch_embedding.weight.dtype == torch.bfloat16
        assert module_dtype(transformer) == compute_dtype(transformer) == torch.bfloat16
    noisy = torch.randn(1, loaded.transformer.config.in_channels, 1, 4, 4)
    conditioning = {"encoder_hidden_states": torch.randn(1, 8, loaded.transformer.config.text_dim)}
    with torch.autocast("cpu", dtype=torch.float16):
        out = loaded.predict(noisy, torch.tensor([0.5]), conditioning)
    assert out.shape == noisy.shape and torch.isfinite(out).all()


def test_masked_training_masks_every_frame_of_a_clip(wan):
    """A clip's mask (its `-masklabel.png`, [B, 1, H, W]) holds for each latent frame: black
    everywhere learns nothing, half white learns less than no mask."""
    from ot_gradio.config.schema import TrainConfig
    from ot_gradio.data.batches import Batch
    from ot_gradio.training.device import Precision
    from ot_gradio.training.diffusion import DiffusionStep

    cpu = torch.device("cpu")
    latents = torch.randn(2, 16, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(2, 1, 32, 32)
    mask[1, :, :, :16] = 1.0

    def loss(mask, **values) -> float:
        config = TrainConfig.model_validate({"model_type": "WAN_2_1", "concepts": [], "samples": [], **values})
        step = DiffusionStep(wan, config, cpu, Precision("FLOAT_32", cpu), noise_fn=lambda lat: (noise[: len(lat)], torch.tensor([500] * len(lat))))
        n = len(mask) if mask is not None else 2
        batch = Batch(size=(32, 32), captions=["a yellow square"] * n, loss_weights=torch.ones(n), image_paths=["clip.mp4"] * n,
                      latents=latents[:n], mask=mask)
        with torch.no_grad():
            return step.loss(batch).item()

    masked = {"masked_training": True, "unmasked_weight": 0.0, "unmasked_probability": 0.0}
    full = loss(None)
    assert loss(mask[:1], **masked) == 0.0
    assert 0 < loss(mask, **masked) < full
    assert loss(mask, **{**masked, "unmasked_probability": 1.0}) == pytest.approx(full, rel=1e-6)
