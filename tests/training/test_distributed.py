"""Multi-GPU pieces on their own: the process plan, the data shards, the global-batch draws, and
the gradient averaging in a real two-process gloo group."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ot_gradio.config.devices import parse_device_indexes
from ot_gradio.config.doctor import errors
from ot_gradio.config.io import load_config
from ot_gradio.runner.launch import distributed_command, launch_plan
from ot_gradio.training.distributed import Distributed


# --- which processes a config asks for ----------------------------------------------------------
def test_multi_gpu_off_is_one_process():
    assert launch_plan({"multi_gpu": False, "device_indexes": "0,1"}, cuda_count=4).processes == 1


def test_every_gpu_when_no_index_is_listed():
    plan = launch_plan({"multi_gpu": True, "train_device": "cuda"}, cuda_count=3)
    assert plan.processes == 3 and plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2" and plan.warning is None


def test_listed_gpus_only_and_in_their_order():
    plan = launch_plan({"multi_gpu": True, "train_device": "cuda", "device_indexes": "3, 1"}, cuda_count=4)
    assert plan.processes == 2 and plan.env["CUDA_VISIBLE_DEVICES"] == "3,1"


def test_a_gpu_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match=r"device_indexes: GPU 2 does not exist; this machine has 2 GPU\(s\)"):
        launch_plan({"multi_gpu": True, "train_device": "cuda", "device_indexes": "0,2"}, cuda_count=2)


def test_one_gpu_or_none_trains_in_one_process_with_a_warning():
    one = launch_plan({"multi_gpu": True, "train_device": "cuda", "device_indexes": "1"}, cuda_count=2)
    assert one.processes == 1 and one.env == {} and "only GPU 1" in one.warning
    none = launch_plan({"multi_gpu": True, "train_device": "cuda"}, cuda_count=0)
    assert none.processes == 1 and "no CUDA GPU" in none.warning


def test_cpu_processes_are_counted_by_index():
    plan = launch_plan({"multi_gpu": True, "train_device": "cpu", "device_indexes": "0,1"}, cuda_count=0)
    assert plan.processes == 2 and "CUDA_VISIBLE_DEVICES" not in plan.env
    assert "one process" in launch_plan({"multi_gpu": True, "train_device": "cpu"}, cuda_count=0).warning


def test_the_command_is_torch_distributed_run_of_the_worker(tmp_path):
    cmd = distributed_command(tmp_path, 2)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in cmd and "--max-restarts=0" in cmd
    assert cmd[-2:] == ["ot_gradio.runner.worker", str(tmp_path)]


@pytest.mark.parametrize(("text", "message"), [("0,a", "'a' in '0,a' is not a GPU index"), ("1,1", "GPU 1 is listed twice"), ("-1", "'-1'")])
def test_bad_device_indexes_are_refused_before_the_run(text, message):
    with pytest.raises(ValueError, match="device_indexes: "):
        parse_device_indexes(text)
    config = load_config({"device_indexes": text}).config
    assert any(e.startswith("device_indexes: ") and message in e for e in errors(config)), errors(config)


def test_fused_back_pass_is_refused_with_multi_gpu():
    config = load_config({"multi_gpu": True, "optimizer": {"optimizer": "ADAFACTOR", "fused_back_pass": True},
                          "learning_rate_scheduler": "ADAFACTOR"}).config
    assert any(e.startswith("optimizer.fused_back_pass:") and "multi_gpu" in e for e in errors(config))


# --- data and random draws ------------------------------------------------------------------------
def test_shards_split_every_global_batch_without_duplicates(shapes_dataset):
    world = 2
    for epoch in range(3):
        plan = shapes_dataset.plan(epoch)
        for samples in plan.batches:
            parts = [Distributed(rank, world).shard(samples) for rank in range(world)]
            assert all(len(p) == len(samples) // world for p in parts)
            assert [s for p in parts for s in p] == samples  # together exactly the global batch, each once
        loaded = [shapes_dataset.epoch_batches(epoch, shard=Distributed(rank, world).shard) for rank in range(world)]
        paths = [[path for batch in batches for path in batch.image_paths] for batches in loaded]
        assert not set(paths[0]) & set(paths[1])
        everything = [path for batch in shapes_dataset.epoch_batches(epoch) for path in batch.image_paths]
        assert sorted(paths[0] + paths[1]) == sorted(everything)


def test_an_uneven_global_batch_is_refused():
    with pytest.raises(ValueError, match="cannot be split evenly"):
        Distributed(0, 2).shard([1, 2, 3])


def test_global_draws_give_each_process_its_rows():
    torch.manual_seed(5)
    single = torch.randn(4, 3)
    parts = []
    for rank in range(2):
        torch.manual_seed(5)
        parts.append(Distributed(rank, 2).mine(torch.randn(4, 3)))
    assert torch.equal(torch.cat(parts), single)
    assert Distributed().mine(single) is single


@pytest.fixture
def shapes_dataset(tmp_path):
    from ot_gradio.config.concept import ConceptConfig
    from ot_gradio.data import build_dataset, ensure_demo_dataset

    folder = ensure_demo_dataset(tmp_path / "shapes")
    return build_dataset([ConceptConfig(path=str(folder))], "64", 4, seed=7)


# --- gradient averaging in a real process group ---------------------------------------------------
def test_gradients_are_averaged_across_two_gloo_processes(tmp_path):
    """Two processes started by torch.distributed.run join through Distributed.from_env (accelerate's
    PartialState, gloo on cpu) and average gradients; the script is tests/training/_dist_reduce.py."""
    script = Path(__file__).with_name("_dist_reduce.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OT_GRADIO_DISTRIBUTED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["world"] == 2 and got["rank"] == rank
        for fused in ("fused", "per-weight"):
            r = got[fused]
            assert r["a"] == [1.5, 1.5, 1.5]
            assert r["b"] == [[0.0, 1.5], [3.0, 4.5]]
            assert r["only"] == [2.0, 3.0]  # a gradient on one process only is averaged with zeros
            assert r["frozen"] is None  # weights that do not train are left alone
            assert r["half_dtype"] == "torch.bfloat16"
        calls = got["calls"]  # [elements, dtype] per all-reduce of gradients
        assert calls["bucket1"] == [[300_000, "torch.float32"]] * 2  # 1 MB buckets: one per 1.2 MB weight
        assert calls["bucket3"] == [[600_000, "torch.float32"]]  # 3 MB: both weights in one
        assert calls["unfused"] == [[300_000, "torch.float32"]] * 2  # fused_gradient_reduce off: one per weight
        assert calls["bf16_weight_dtype"] == [[600_000, "torch.bfloat16"]]  # WEIGHT_DTYPE adds up in bf16
        assert calls["bf16_float32"] == [[600_000, "torch.float32"]]  # FLOAT_32 widens first
        late = got["async"].pop("late_error")
        assert late.startswith("async_gradient_reduce: a trained weight received more gradient after it was sent") and "General tab" in late
        for case, r in got["async"].items():  # reduced during the backward pass = reduced after it
            assert r["none"] == r["expected_none"] == [0, 1], (case, r)  # the layer no process used keeps no gradient
            # per weight, each process starts the buckets its backward pass completed (in order) before finish;
            # process 1 starts 6, more than IN_FLIGHT (4): its first buckets are written back during the pass
            assert r["started_in_backward"] == (0 if case == "fused" else 4 if rank == 0 else 6), (case, r)
            assert all(d == 0.0 for d in r["diffs"] if d is not None), (case, r)
        assert got["mean"] == 1.5
        assert got["broadcast"] == ["stop"]  # the main process's requests reach every process
        assert got["weights"] == [0.0, 0.0]  # everyone starts from the main process's weights


def test_spread_puts_a_process_rows_where_mine_takes_them_back():
    from ot_gradio.training.distributed import Distributed

    rows = torch.arange(6.0).view(3, 2)
    for rank in range(4):
        dist = Distributed(rank=rank, world=4)
        spread = dist.spread(rows)
        assert spread.shape == (12, 2) and torch.equal(dist.mine(spread), rows)
        assert spread.abs().sum() == rows.abs().sum()  # the other processes' rows are zero
    assert Distributed().spread(rows) is rows
