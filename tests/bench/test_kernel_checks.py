"""bench/attention_kernel_check.py and bench/nf4_kernel_check.py (run on a GPU box to tell which
kernel computes wrong gradients) kept from rotting: on the CPU, at small sizes, they run every
case they list and pass; a kernel that computes wrong gradients is reported by name."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def test_attention_check_passes_the_kernels_that_run_here_and_names_a_wrong_one(capsys, monkeypatch):
    import torch
    import torch.nn.functional as F

    import bench.attention_kernel_check as check

    assert check.main(["--device", "cpu", "--tokens", "64", "--heads", "2", "--dim", "32"]) == 0
    out = capsys.readouterr().out
    assert out.count("FLASH_ATTENTION") == 4 and "FLASH_ATTENTION all permuted (Flux's dispatch): ok" in out
    assert "CUDNN_ATTENTION all contiguous: refused" in out  # no such kernel on a CPU: listed, not counted

    sdpa = F.scaled_dot_product_attention

    def wrong_backward(q, k, v, **kwargs):  # the kernel under test (bfloat16): the forward right, q's gradient doubled
        if q.dtype == torch.bfloat16:
            q = q + (q - q.detach())
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", wrong_backward)
    assert check.main(["--device", "cpu", "--tokens", "64", "--heads", "2", "--dim", "32"]) == 1
    assert "FLASH_ATTENTION all contiguous: dq" in capsys.readouterr().out


def test_nf4_check_runs_flux_products_through_our_quantization(capsys):
    import bench.nf4_kernel_check as check

    products = check.flux_products(64)  # 16 image tokens, 512 text tokens
    shapes = {(k, n) for _, k, n, _ in products}
    assert {(3072, 18432), (15360, 3072), (64, 3072), (4096, 3072)} <= shapes
    assert {m for m, *_ in products} == {1, 16, 512, 528}  # the embeddings, the image, the text and the joint tokens
    assert check.main(["--device", "cpu", "--resolution", "64", "--limit", "2"]) == 0
    assert "4 of 4 cases ok" in capsys.readouterr().out
