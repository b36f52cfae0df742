import torch

from ot_gradio.training.backup import MARKER, Counters, complete_backups, latest_backup, read_backup, write_backup


def test_backup_round_trip_and_marker(tmp_path):
    root = tmp_path / "run" / "backup"
    weights = {"unet.a": torch.randn(3, 4)}
    path = write_backup(root, weights, {"optimizer": {"x": 1}}, {"seed": 1}, Counters(epoch=2, epoch_step=3, global_step=7))
    assert (path / MARKER).exists()
    loaded = read_backup(path)
    assert torch.equal(loaded.trainable["unet.a"], weights["unet.a"])
    assert loaded.counters == Counters(2, 3, 7)
    assert loaded.state["optimizer"] == {"x": 1}
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp")]


def test_incomplete_backup_is_never_picked(tmp_path):
    root = tmp_path / "run" / "backup"
    good = write_backup(root, {"w": torch.ones(1)}, {}, {}, Counters(global_step=1))
    broken = root / "zzzz-step99"
    broken.mkdir()
    (broken / "trainable.safetensors").write_bytes(b"half")
    assert complete_backups(root) == [good]
    assert latest_backup([tmp_path / "run"]) == good


def test_rolling_backups_keep_newest(tmp_path):
    root = tmp_path / "backup"
    made = [write_backup(root, {"w": torch.ones(1) * i}, {}, {}, Counters(global_step=i), keep=2) for i in range(4)]
    assert complete_backups(root) == made[-2:]
