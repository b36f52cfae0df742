"""Layer offloading (training/offload.py) on CPU: the offload and train devices are both the CPU,
and an injected mover records which tensors are moved where, so the hooks are observable. Real
CUDA transfers (pinned, non-blocking copies) are not tested here: there is no GPU."""

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from ot_gradio.training.offload import find_blocks, install_offloading


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.lora = nn.Linear(width, width, bias=False)  # stands for a trained adapter
        self.register_buffer("scale", torch.full((width,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x) + self.lora(x)) * self.scale + x


class Denoiser(nn.Module):
    def __init__(self, width: int = 8, depth: int = 10) -> None:
        super().__init__()
        self.proj_in = nn.Linear(width, width)
        self.transformer_blocks = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.transformer_blocks:
            x = block(x)
        return x


class Part:
    def __init__(self, fraction: float, activations: bool = False) -> None:
        self.offload_fraction, self.activation_offloading = fraction, activations


class Config:
    def __init__(self, fraction: float, activations: bool = False, fused_back_pass: bool = False) -> None:
        self.transformer = Part(fraction, activations)
        self.async_offloading = True
        self.optimizer = SimpleNamespace(optimizer="ADAFACTOR", fused_back_pass=fused_back_pass)


class Model:
    def __init__(self, denoiser: nn.Module) -> None:
        self.denoiser, self.text_encoder_names, self.parts = "transformer", [], {"transformer": denoiser}


def _frozen(denoiser: nn.Module) -> nn.Module:
    for name, p in denoiser.named_parameters():
        p.requires_grad_(".lora." in name)
    return denoiser


class Recorder:
    """A device-mapping function: records (id of the moved tensor's block, target device)."""

    def __init__(self) -> None:
        self.moves: list[tuple[int, str]] = []

    def __call__(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        self.moves.append((t.untyped_storage().data_ptr(), device.type))
        return t.clone() if device.type == "meta" else t.to(device)


def _loss_and_grads(denoiser: nn.Module, x: torch.Tensor):
    loss = denoiser(x).pow(2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in denoiser.named_parameters() if p.grad is not None}


def test_offloaded_blocks_give_the_same_loss_and_gradients():
    torch.manual_seed(0)
    reference = _frozen(Denoiser())
    offloaded = copy.deepcopy(reference)
    x = torch.randn(4, 8)
    loss_ref, grads_ref = _loss_and_grads(reference, x)

    recorder = Recorder()
    done, message = install_offloading(Model(offloaded), Config(0.25), torch.device("cpu"), mover=recorder, force=True)
    assert len(done) == 1 and done[0].n_blocks == 10
    blocks = done[0].blocks
    assert len(blocks) == math.ceil(0.25 * 10) == 3
    assert [b.block for b in blocks] == list(offloaded.transformer_blocks[-3:])  # the last ones
    # frozen weights and buffers (linear.weight, linear.bias, scale) are offloaded; the trained lora stays
    for b in blocks:
        assert sorted(e[1] for e in b.entries) == ["bias", "scale", "weight"]
        assert all(e[2] is not b.block.lora.weight for e in b.entries)
    assert "3 of 10 blocks" in message and "activation checkpointing" in message

    loss, grads = _loss_and_grads(offloaded, x)
    assert torch.allclose(loss, loss_ref, atol=1e-6)
    assert grads.keys() == grads_ref.keys()
    for name in grads:
        assert torch.allclose(grads[name], grads_ref[name], atol=1e-6), name
    # forward + the backward pass's recomputation: each offloaded block moved its weights in twice
    assert [b.loads for b in blocks] == [2, 2, 2]
    moved_in = [m for m in recorder.moves if m[1] == "cpu"]
    assert len(moved_in) == 3 * 3 + 3 * 3 * 2  # the RAM copies at install, then 3 tensors x 3 blocks x 2 loads


class NormBlock(nn.Module):
    """A frozen weight that autograd saves as it is (an RMS norm's weight in a product), beside
    a trained adapter: Z-Image's and Flux's blocks have such norms."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm_weight = nn.Parameter(torch.rand(width) + 0.5)
        self.linear = nn.Linear(width, width)
        self.lora = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        return torch.tanh(self.linear(h) + self.lora(h)) + x


class NormDenoiser(Denoiser):
    def __init__(self, width: int = 8, depth: int = 4, outer_checkpoint: bool = False) -> None:
        super().__init__(width, 0)
        self.transformer_blocks = nn.ModuleList(NormBlock(width) for _ in range(depth))
        self.outer_checkpoint = outer_checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.transformer_blocks:  # diffusers' per-block gradient checkpointing when asked
            x = torch.utils.checkpoint.checkpoint(block.__call__, x, use_reentrant=False) if self.outer_checkpoint else block(x)
        return x


@pytest.mark.parametrize("outer_checkpoint", [False, True])
@pytest.mark.parametrize("activations", [False, True])
def test_a_saved_frozen_weight_stays_on_the_device_through_the_recomputed_backward(outer_checkpoint, activations):
    """On a GPU the RAM copies and the device copies differ in device; here in dtype (RAM float64,
    "device" float32), which torch.utils.checkpoint checks the same way. A frozen weight that
    autograd saves itself must keep the device copy's type until the block's backward has used it:
    swapping the one parameter's `.data` back to RAM after the recomputation made checkpoint
    refuse the step ("Recomputed values ... have different metadata"; Z-Image with offloading on
    an H200), with and without diffusers' own checkpointing around the block."""
    torch.manual_seed(0)
    reference = _frozen(NormDenoiser(outer_checkpoint=outer_checkpoint))
    offloaded = copy.deepcopy(reference)
    x = torch.randn(4, 8)
    loss_ref, grads_ref = _loss_and_grads(reference, x)

    def mover(t: torch.Tensor, device: torch.device) -> torch.Tensor:
        return t.to(torch.float64) if device.type == "meta" else t.to(torch.float32)

    (part,), _ = install_offloading(Model(offloaded), Config(0.5, activations=activations), torch.device("cpu"), mover=mover,
                                   offload_device=torch.device("meta"), force=True)
    assert len(part.blocks) == 2 and all(e[3].dtype == torch.float64 for b in part.blocks for e in b.entries)
    for _ in range(2):
        offloaded.zero_grad(set_to_none=True)
        loss, grads = _loss_and_grads(offloaded, x)
        assert torch.allclose(loss, loss_ref, atol=1e-6)
        assert grads.keys() == grads_ref.keys()
        assert all(torch.allclose(grads[n], grads_ref[n], atol=1e-5) for n in grads)
    # between calls the modules hold the RAM copies again: nothing of the offloaded blocks stays on the "device"
    assert all(b.block.norm_weight.dtype == b.block.linear.weight.dtype == torch.float64 for b in part.blocks)
    assert all(b.block.lora.weight.dtype == torch.float32 for b in part.blocks)


def test_the_memory_probe_runs_a_part_with_activation_offloading():
    """The planner's meta probe through a part whose saved activations go to RAM: meta tensors
    cannot be copied there (the probe failed: "Cannot copy out of meta tensor"), so on meta they
    are counted where they are made, on the device (an upper bound)."""
    from ot_gradio.training.memory_probe import on_meta

    torch.manual_seed(0)
    denoiser = _frozen(Denoiser(depth=4))
    install_offloading(Model(denoiser), Config(0.5, activations=True), torch.device("cpu"), mover=Recorder(), force=True)
    with on_meta([denoiser]):
        out = denoiser(torch.empty(2, 8, device="meta", requires_grad=True))
        assert out.device.type == "meta"
        out.sum().backward()
    loss, grads = _loss_and_grads(denoiser, torch.randn(2, 8))  # and the real weights are back, training
    assert torch.isfinite(loss) and grads


def test_checkpointing_is_forced_on_for_offloaded_blocks_only():
    torch.manual_seed(0)
    denoiser = _frozen(Denoiser(depth=4))
    done, _ = install_offloading(Model(denoiser), Config(0.5), torch.device("cpu"), mover=Recorder(), force=True)
    calls = []
    for i, block in enumerate(denoiser.transformer_blocks):
        block.linear.register_forward_hook(lambda *_a, i=i: calls.append(i))
    _loss_and_grads(denoiser, torch.randn(2, 8))
    # blocks 0 and 1 run once; the offloaded 2 and 3 run again in the backward pass (recomputed)
    assert sorted(calls) == [0, 1, 2, 2, 3, 3]
    with torch.no_grad():  # sampling: no checkpointing, one load each
        before = [b.loads for b in done[0].blocks]
        denoiser(torch.randn(2, 8))
        assert [b.loads - n for b, n in zip(done[0].blocks, before, strict=True)] == [1, 1]


def test_activation_offloading_keeps_saved_tensors_on_cpu():
    torch.manual_seed(0)
    reference = _frozen(Denoiser(depth=3))
    denoiser = copy.deepcopy(reference)
    x = torch.randn(2, 8)
    install_offloading(Model(denoiser), Config(0.0, activations=True), torch.device("cpu"), mover=Recorder(), force=True)
    packed = []
    original = torch.autograd.graph.save_on_cpu.__init__

    def spy(self, pin_memory=False, device_type="cuda"):
        packed.append(pin_memory)
        original(self, pin_memory=pin_memory, device_type=device_type)

    torch.autograd.graph.save_on_cpu.__init__ = spy
    try:
        loss, grads = _loss_and_grads(denoiser, x)
    finally:
        torch.autograd.graph.save_on_cpu.__init__ = original
    loss_ref, grads_ref = _loss_and_grads(reference, x)
    assert packed == [False] and torch.allclose(loss, loss_ref, atol=1e-6)
    assert all(torch.allclose(grads[n], grads_ref[n], atol=1e-6) for n in grads)


def test_cpu_train_device_says_there_is_nothing_to_move():
    denoiser = _frozen(Denoiser(depth=2))
    done, message = install_offloading(Model(denoiser), Config(0.1), torch.device("cpu"))
    assert done == [] and "train device is CPU: the layers are in RAM already" in message
    assert install_offloading(Model(denoiser), Config(0.0), torch.device("cpu")) == ([], None)


def test_find_blocks_of_a_tiny_flux_transformer():
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=2, num_single_layers=3, attention_head_dim=8,
                                   num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=16,
                                   axes_dims_rope=(2, 2, 4))
    blocks = find_blocks(model)
    assert blocks == [*model.transformer_blocks, *model.single_transformer_blocks]

    # with diffusers' own checkpointing on too (checkpoints nest): same loss and input gradients
    model.requires_grad_(False)
    offloaded = copy.deepcopy(model)
    offloaded.enable_gradient_checkpointing()
    offloaded.train()
    done, _ = install_offloading(Model(offloaded), Config(0.5), torch.device("cpu"), mover=Recorder(), force=True)
    assert len(done[0].blocks) == 3
    torch.manual_seed(0)
    inputs = dict(hidden_states=torch.randn(1, 16, 4), encoder_hidden_states=torch.randn(1, 5, 16),
                  pooled_projections=torch.randn(1, 16), timestep=torch.tensor([0.5]),
                  img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(5, 3))
    results = []
    for m in (model, offloaded):
        x = inputs["hidden_states"].clone().requires_grad_(True)
        loss = m(**{**inputs, "hidden_states": x}).sample.pow(2).mean()
        loss.backward()
        results.append((loss.detach(), x.grad))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)
    assert all(b.loads == 2 for b in done[0].blocks)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from ot_gradio.data import ensure_demo_dataset

    return ensure_demo_dataset(tmp_path_factory.mktemp("data") / "shapes")


def test_qwen_preset_like_lora_run_offloads_through_the_trainer(shapes, tmp_path, monkeypatch):
    """Like OneTrainer's qwen-LoRA-24GB preset (FLOAT_8 transformer, transformer.offload_fraction
    0.1) on tiny Flux, through the real trainer. On CPU the trainer installs nothing and says so;
    the run here forces the install (CPU to CPU, moves recorded) to see the hooks work in training."""
    from pathlib import Path

    from ot_gradio.config.doctor import errors
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.training import offload
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    presets = Path(__file__).resolve().parents[2] / "presets"
    config = config_to_dict(load_config(presets / "flux-dev-1-lora.json").config)
    config.update(base_model_name="tiny:flux", concepts=[{"name": "shapes", "path": str(shapes)}],
                  output_model_destination=str(tmp_path / "out" / "lora.safetensors"), workspace_dir=str(tmp_path / "ws"),
                  cache_dir=str(tmp_path / "cache"), train_device="cpu", resolution="64", epochs=1, batch_size=2,
                  learning_rate_warmup_steps=0, samples=[], sample_after=0)
    config["transformer"].update(weight_dtype="FLOAT_8", offload_fraction=0.1)
    config["text_encoder_2"].update(weight_dtype="FLOAT_8")
    loaded = load_config(config).config
    assert errors(loaded) == []

    class Collect(Reporter):
        def __init__(self):
            self.statuses, self.losses = [], []

        def status(self, state, message=""):
            self.statuses.append(message)

        def metrics(self, **fields):
            if "loss" in fields:
                self.losses.append(fields["loss"])

        def warning(self, message):
            pass

    real = offload.install_offloading
    unforced, recorder = [], Recorder()

    def forced(model, cfg, device, **kw):
        unforced.append(real(model, cfg, device)[1])
        return real(model, cfg, device, mover=recorder, force=True)

    monkeypatch.setattr(offload, "install_offloading", forced)
    report = Collect()
    run = tmp_path / "run"
    trainer = Trainer(loaded, RunPaths(run / "samples", run / "backup", run / "save", None, []), report)
    trainer.setup()
    assert "train device is CPU: the layers are in RAM already" in unforced[0]
    (part,) = trainer.layer_offload
    assert part.part == "transformer" and len(part.blocks) == math.ceil(0.1 * part.n_blocks) >= 1
    assert part.blocks[0].block is offload.find_blocks(trainer.model.transformer)[-1]
    assert any(e[3].dtype == torch.float8_e4m3fn for e in part.blocks[0].entries)  # FLOAT_8 weights are offloaded
    assert any(f"{len(part.blocks)} of {part.n_blocks} blocks" in s and "activation checkpointing" in s for s in report.statuses)
    assert trainer.train() == "done"
    assert report.losses and all(math.isfinite(x) for x in report.losses)
    # every training step: a forward and the backward pass's recomputation
    assert part.blocks[0].loads >= 2 * len(report.losses)
    assert (tmp_path / "out" / "lora.safetensors").exists()


def test_onetrainer_z_image_finetune_preset_offloads_trained_weights_through_the_trainer(shapes, tmp_path, monkeypatch):
    """OneTrainer's "#z-image Finetune 16GB" imported unchanged (Adafactor with the fused back
    pass, transformer.offload_fraction 0.1) on tiny Z-Image, through the real trainer with the
    install forced on CPU (a cloning mover: each load is a separate copy, as on a GPU): the trained
    weights of the offloaded block move, and the run trains exactly as without offloading."""
    from pathlib import Path

    from ot_gradio.config.doctor import check, errors
    from ot_gradio.config.io import config_to_dict, load_config
    from ot_gradio.training import offload
    from ot_gradio.training.trainer import Reporter, RunPaths, Trainer

    preset = Path(__file__).resolve().parents[1] / "config/data/onetrainer-training-presets/Z-Image/#z-image Finetune 16GB.json"
    imported = load_config(preset).config
    assert imported.optimizer.fused_back_pass and imported.transformer.offload_fraction == 0.1
    assert not [w for w in check(imported) if "offload" in w]

    def run(name: str, fraction: float):
        config = config_to_dict(imported)
        config.update(base_model_name="tiny:z-image", concepts=[{"name": "shapes", "path": str(shapes)}], train_dtype="FLOAT_32",
                      output_model_destination=str(tmp_path / name / "model.safetensors"), workspace_dir=str(tmp_path / name / "ws"),
                      cache_dir=str(tmp_path / name / "cache"), train_device="cpu", resolution="64", epochs=1, batch_size=2,
                      samples=[], sample_after_unit="NEVER", backup_after_unit="NEVER", seed=3, compile=False)  # (compile with offloading: tested below)
        config["transformer"].update(offload_fraction=fraction, weight_dtype="FLOAT_32")
        config["text_encoder"].update(weight_dtype="FLOAT_32")
        loaded = load_config(config).config
        assert errors(loaded) == [], errors(loaded)
        trainer = Trainer(loaded, RunPaths(tmp_path / name / "s", tmp_path / name / "b", tmp_path / name / "o", None, []), Reporter())
        trainer.setup()
        assert trainer.train() == "done"
        return trainer

    real = offload.install_offloading
    monkeypatch.setattr(offload, "install_offloading",
                        lambda model, cfg, device, **kw: real(model, cfg, device, mover=lambda t, d: t.clone(), force=True))
    moved = run("offloaded", 0.1)
    (part,) = moved.layer_offload
    assert len(part.blocks) == 1 and all(b.trained for b in part.blocks)
    assert part.blocks[0].loads >= 2 and not part.blocks[0].dirty  # each weight went back to RAM after its step
    monkeypatch.setattr(offload, "install_offloading", real)
    plain = run("plain", 0.0)
    weights, reference = moved.model.transformer.state_dict(), plain.model.transformer.state_dict()
    block = dict(moved.model.transformer.named_modules())
    prefix = next(name for name, m in block.items() if m is part.blocks[0].block) + "."
    assert any(k.startswith(prefix) for k in reference)
    for key, value in reference.items():
        assert torch.allclose(weights[key], value, atol=1e-6), key  # the offloaded block's weights trained as the rest
    assert all(e[2].data_ptr() == e[3].data_ptr() for e in part.blocks[0].trained.values())  # and wait in RAM


def test_doctor_refuses_offloading_that_cannot_work_and_warns_where_it_does_nothing():
    """Offloading a part that has no blocks to move is refused. A fine-tune's offload fraction
    (OneTrainer's fine-tune presets) and compile with offloading (its 8 GB presets) train: the
    first with one warning, the second compiled block by block (test below)."""
    from ot_gradio.config.doctor import check, errors, offload_problems
    from ot_gradio.config.schema import TrainConfig

    def config(**changes):
        method = changes.pop("method", "LORA")
        return TrainConfig(model_type="FLUX_DEV_1", training_method=method,  # KOHYA_LORA: the layout that holds a T5 LoRA
                           output_model_format="KOHYA_LORA" if method == "LORA" else "SAFETENSORS", **changes)

    assert offload_problems(config(transformer={"offload_fraction": 0.1})) == []
    for compiled in (config(compile=True, transformer={"activation_offloading": True}),
                     config(compile=True, transformer={"offload_fraction": 0.7}, text_encoder_2={"offload_fraction": 0.7})):
        assert errors(compiled) == [] and not [w for w in check(compiled) if "offload" in w]
    fine_tune = config(method="FINE_TUNE", transformer={"offload_fraction": 0.1})
    assert errors(fine_tune) == []
    (warning,) = [w for w in check(fine_tune) if "offload" in w]
    assert warning.startswith("transformer.offload_fraction 0.1 is not applied: FINE_TUNE") and "fused_back_pass" in warning
    fused = config(method="FINE_TUNE", transformer={"offload_fraction": 0.1}, learning_rate_scheduler="ADAFACTOR",
                   optimizer={"optimizer": "ADAFACTOR", "fused_back_pass": True})
    assert errors(fused) == [] and not [w for w in check(fused) if "offload" in w]  # OneTrainer's fine-tune presets
    (vae,) = offload_problems(config(vae={"offload_fraction": 0.5}))
    assert vae.startswith("vae.offload_fraction:")


def test_a_fine_tuned_part_offloads_nothing_and_says_so():
    denoiser = Denoiser(depth=4)  # every weight trains
    done, message = install_offloading(Model(denoiser), Config(0.5), torch.device("cpu"), mover=Recorder(), force=True)
    assert done[0].blocks == [] and done[0].asked == 2
    assert "0 of 4 blocks" in message and "2 of the 2 blocks the fraction names stay on the device" in message
    assert all("forward" not in vars(b) for b in denoiser.transformer_blocks)  # nothing wrapped, nothing checkpointed


def _fused(denoiser: nn.Module):
    from ot_gradio.training.optimizers.fused_back_pass import FusedBackPass

    groups = [{"params": list(denoiser.parameters()), "lr": 1e-2, "name": "transformer"}]
    return FusedBackPass(groups, lambda g: torch.optim.AdamW(g, lr=1e-2))


@pytest.mark.parametrize("hooks", [True, False])
def test_a_fine_tune_with_the_fused_back_pass_offloads_its_trained_weights_and_trains_the_same(hooks):
    """OneTrainer's fine-tune presets (Qwen, Flux.2, Chroma, Z-Image...: Adafactor with the fused
    back pass and an offload fraction): every weight of the offloaded blocks lives in RAM, comes in
    for the forward and the recomputation, is stepped there inside the backward pass and goes back
    to RAM with its new values. The mover clones, as a copy to another device would, so a stepped
    weight not copied back would train from stale values. Without the return hooks (hooks=False)
    the weights wait on the device and are copied back at the next forward: still the same run."""
    torch.manual_seed(0)
    reference = Denoiser(depth=4)  # every weight trains
    offloaded = copy.deepcopy(reference)
    ref_opt = _fused(reference)
    done, message = install_offloading(Model(offloaded), Config(0.5, fused_back_pass=True), torch.device("cpu"),
                                       mover=lambda t, device: t.clone(), force=True)
    blocks = done[0].blocks
    assert [b.block for b in blocks] == list(offloaded.transformer_blocks[-2:])
    assert all(len(b.trained) == 3 for b in blocks)  # linear weight and bias, lora weight
    assert "trained ones too" in message
    opt = _fused(offloaded)
    if hooks:
        assert done[0].return_trained_after_steps() == 6
    # the memory planner's probe runs the step on meta stand-ins first: nothing of it may stick
    from ot_gradio.training.memory_probe import on_meta

    with on_meta([offloaded]) as stand_ins:
        probe = offloaded(torch.empty(4, 8, device="meta")).pow(2).mean()
        torch.autograd.grad(probe, list(stand_ins.values()))
    assert all(not b.dirty for b in blocks) and all(p.device.type == "cpu" for p in offloaded.parameters())
    for step in range(3):
        x = torch.randn(4, 8)
        loss_ref = reference(x).pow(2).mean()
        loss_ref.backward()
        ref_opt.step()
        loss = offloaded(x).pow(2).mean()
        loss.backward()
        opt.step()
        assert torch.allclose(loss, loss_ref, atol=1e-6), step
        if hooks:  # every stepped weight went back to RAM inside the backward pass
            assert all(not b.dirty for b in blocks)
            assert all(entry[2].data_ptr() == entry[3].data_ptr() for b in blocks for entry in b.trained.values())
        else:
            assert all(len(b.dirty) == 3 for b in blocks)
    with torch.no_grad():
        out, out_ref = offloaded(x), reference(x)
    assert torch.allclose(out, out_ref, atol=1e-6)
    for (name, p), p_ref in zip(offloaded.named_parameters(), reference.parameters(), strict=True):
        assert torch.allclose(p, p_ref, atol=1e-6), name


@pytest.mark.parametrize("activations", [False, True])
def test_compile_with_offloading_compiles_the_blocks_that_stay_and_trains_the_same(activations, monkeypatch):
    """compile + offload_fraction (OneTrainer's 8 GB presets), as OneTrainer does it: each block
    compiled on its own, the offloaded blocks left uncompiled (their weights change device inside
    the forward). dynamo with AOTAutograd ("aot_eager", the graphs inductor would get, without its
    C++ build) must give the loss and gradients of the plain model."""
    import functools

    from torch._dynamo.utils import counters

    from ot_gradio.training.offload import compile_blocks

    torch.manual_seed(0)
    reference = _frozen(Denoiser(depth=4))
    denoiser = copy.deepcopy(reference)
    x = torch.randn(4, 8)
    loss_ref, grads_ref = _loss_and_grads(reference, x)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    done, _ = install_offloading(Model(denoiser), Config(0.5, activations), torch.device("cpu"), mover=Recorder(), force=True)
    counters.clear()
    message = compile_blocks(denoiser, done[0])
    assert message.startswith("compile: 2 of 4 transformer blocks compiled one by one; the 2 offloaded blocks run uncompiled")
    blocks = list(denoiser.transformer_blocks)
    assert [b._compiled_call_impl is not None for b in blocks] == [True, True, False, False]
    try:
        with torch._dynamo.config.patch(suppress_errors=False):  # a failed trace must fail the test
            for _ in range(2):  # the second step runs the compiled graphs again
                denoiser.zero_grad(set_to_none=True)
                loss, grads = _loss_and_grads(denoiser, x)
                assert torch.allclose(loss, loss_ref, atol=1e-6)
                assert grads.keys() == grads_ref.keys()
                assert all(torch.allclose(grads[n], grads_ref[n], atol=1e-6) for n in grads)
        assert counters["frames"]["ok"] > 0  # dynamo compiled the blocks' forward
        assert [b.loads for b in done[0].blocks] == [4, 4]  # still moved in for each forward and recomputation
    finally:
        torch._dynamo.reset()


def test_memory_plan_counts_offloaded_weights_in_ram_not_on_the_device():
    from ot_gradio.training.memory_plan import MemoryPlan
    from ot_gradio.training.offload import offloaded_bytes

    denoiser = _frozen(Denoiser(depth=4))
    model = Model(denoiser)
    done, _ = install_offloading(model, Config(0.5), torch.device("cpu"), mover=Recorder(), force=True)
    per_block = 8 * 8 * 4 + 8 * 4 + 8 * 4  # linear weight and bias, scale buffer (float32)
    assert offloaded_bytes(model) == done[0].nbytes == 2 * per_block
    plan = MemoryPlan("cuda:0", {"transformer": ("float32", 10_000)}, 0, 0, "", 0, offloaded=offloaded_bytes(model))
    assert plan.weight_bytes == 10_000 - 2 * per_block
    assert "offloaded to RAM" in plan.breakdown(True)


def test_a_resumed_optimizer_state_follows_its_offloaded_weight_to_the_device():
    """Resuming loads an offloaded weight's optimizer state next to the weight, in RAM; the fused
    back pass steps the weight on the GPU, so its state moves there first (step counts stay)."""
    from ot_gradio.training.optimizers.fused_back_pass import state_follows_weight

    weight = nn.Parameter(torch.zeros(4, 4, device="meta"))  # stands for the device
    state = {"step": torch.tensor(3.0), "exp_avg_sq_row": torch.ones(4), "exp_avg": torch.zeros(4, 4)}
    state_follows_weight(state, weight)
    assert state["exp_avg_sq_row"].device.type == state["exp_avg"].device.type == "meta"
    assert state["step"].device.type == "cpu"


def test_a_parked_part_moves_without_its_offloaded_blocks():
    """A frozen part with layer offloading waits in RAM while the steps run (placement.py) and
    comes to the device for samples without its offloaded blocks: `placement.move` leaves their
    tensors in RAM (here a dtype change stands for the device move: the tensors it reaches change
    type), keeps every module's parameter order, and the blocks still bring their weights in for
    their forward."""
    from ot_gradio.training import placement

    denoiser = Denoiser()
    for p in denoiser.parameters():
        p.requires_grad_(False)
    x = torch.randn(3, 8)
    expected = denoiser(x)
    done, _ = install_offloading(Model(denoiser), Config(0.5), torch.device("cpu"), mover=Recorder(), force=True)
    offloaded = {id(b.block) for b in done[0].blocks}
    order = [name for name, _ in denoiser.named_parameters()] + [name for name, _ in denoiser.named_buffers()]
    with placement.offloaded_tensors_stay(denoiser):
        denoiser.to(torch.float64)
    assert [name for name, _ in denoiser.named_parameters()] + [name for name, _ in denoiser.named_buffers()] == order
    for block in denoiser.transformer_blocks:
        kinds = {t.dtype for t in [*block.parameters(), *block.buffers()]}
        assert kinds == ({torch.float32} if id(block) in offloaded else {torch.float64})
    with placement.offloaded_tensors_stay(denoiser):
        denoiser.to(torch.float32)
    torch.testing.assert_close(denoiser(x), expected)


def test_a_parked_offloaded_block_runs_from_ram_when_its_input_is_there():
    """A caption the text cache missed is encoded where its parked encoder is, in RAM: an offloaded
    block whose input is on the CPU runs with its RAM copies and moves nothing to the device."""
    from ot_gradio.training.offload import OffloadedBlock

    block = Block(8)
    for p in block.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 8)
    expected = block(x)
    moves = []

    def mover(t, device):
        moves.append(device.type)
        return t.clone()

    OffloadedBlock(block, torch.device("cuda"), torch.device("cpu"), mover, pin=False)
    moves.clear()
    with torch.no_grad():
        torch.testing.assert_close(block(x), expected)
    assert moves == []
