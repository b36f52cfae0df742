"""The memory planner's shortcuts for normalisation ops on meta tensors (training/meta_shapes.py)
return what torch's own meta implementations return: the same shapes, dtypes and strides."""

from __future__ import annotations

import pytest
import torch

from ot_gradio.training import meta_shapes

aten = torch.ops.aten


def meta(*shape, dtype=torch.float32, channels_last=False):
    t = torch.empty(shape, dtype=dtype, device="meta")
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def same(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        if b is None:
            assert a is None
            continue
        assert a is not None and a.device.type == "meta"
        assert (a.shape, a.dtype, a.stride()) == (b.shape, b.dtype, b.stride()), (a.shape, a.dtype, a.stride(), b.shape, b.dtype, b.stride())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, channels_last", [((2, 32, 8, 8), False), ((2, 32, 8, 8), True), ((3, 64, 10), False)])
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, True)])
def test_group_norm(dtype, shape, channels_last, mask):
    x = meta(*shape, dtype=dtype, channels_last=channels_last)
    n, c, hw, groups = shape[0], shape[1], x[0, 0].numel(), 8
    w, b = meta(c, dtype=dtype), meta(c, dtype=dtype)
    args = (x, w, b, n, c, hw, groups, 1e-5)
    same(meta_shapes.group_norm(*args), aten.native_group_norm.default(*args))
    out, mean, rstd = aten.native_group_norm.default(*args)
    back = (out, x, mean, rstd, w, n, c, hw, groups, list(mask))
    same(meta_shapes.group_norm_backward(*back), aten.native_group_norm_backward.default(*back))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, normalized", [((2, 77, 32), [32]), ((2, 16, 4, 8), [4, 8])])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False)])
def test_layer_norm(dtype, shape, normalized, affine, mask):
    x = meta(*shape, dtype=dtype)
    w = meta(*normalized, dtype=dtype) if affine else None
    b = meta(*normalized, dtype=dtype) if affine else None
    args = (x, normalized, w, b, 1e-5)
    same(meta_shapes.layer_norm(*args), aten.native_layer_norm.default(*args))
    out, mean, rstd = aten.native_layer_norm.default(*args)
    back = (out, x, normalized, mean, rstd, w, b, list(mask))
    same(meta_shapes.layer_norm_backward(*back), aten.native_layer_norm_backward.default(*back))


@pytest.mark.parametrize("op", [aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor, aten.div.Tensor])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_of_one_shape(op, dtype):
    a, b = meta(2, 4, 8, 8, dtype=dtype), meta(2, 4, 8, 8, dtype=dtype)
    same([meta_shapes.elementwise(a, b)], [op(a, b)])
    for scalar in (2.0, 3, torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64, device="meta")):
        same([meta_shapes.elementwise(a, scalar)], [op(a, scalar)])
    # anything else is left to torch
    assert meta_shapes.elementwise(a, meta(1, 4, 1, 1, dtype=dtype)) is None  # broadcast
    assert meta_shapes.elementwise(a, meta(2, 4, 8, 8, dtype=torch.float16)) is None  # promotion
    assert meta_shapes.elementwise(a, meta(2, 4, 8, 8, dtype=dtype, channels_last=True)) is None
    assert meta_shapes.elementwise(a, True) is None and meta_shapes.elementwise(a, 1j) is None
    assert meta_shapes.elementwise(a, torch.tensor(2)) is None  # an integer scalar tensor
    assert meta_shapes.elementwise(meta(2, 3, dtype=torch.int64), meta(2, 3, dtype=torch.int64)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matrix_products(dtype):
    a, b = meta(6, 4, dtype=dtype), meta(4, 5, dtype=dtype)
    same([meta_shapes.mm(a, b)], [aten.mm.default(a, b)])
    same([meta_shapes.mm(a, meta(5, 4, dtype=dtype).t())], [aten.mm.default(a, meta(5, 4, dtype=dtype).t())])
    same([meta_shapes.mm(meta(4, 6, dtype=dtype).t(), b)], [aten.mm.default(meta(4, 6, dtype=dtype).t(), b)])
    bias = meta(5, dtype=dtype)
    same([meta_shapes.addmm(bias, a, b)], [aten.addmm.default(bias, a, b)])
    assert meta_shapes.mm(a, meta(4, 5, dtype=torch.float16)) is None
    assert meta_shapes.mm(meta(2, 6, 4, dtype=dtype), b) is None
