"""The torch.export importer: single operators and small models against PyTorch eager, on the
numpy reference executor and (for the models) compiled on the simulator; coverage of Core
ATen computed from torch; clear errors for what it cannot translate."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import graph

torch = pytest.importorskip("torch")
from ptxforge.graph.frontend_torch import (  # noqa: E402
    TorchImportError,
    core_aten_overloads,
    coverage,
    from_torch,
)

pytestmark = pytest.mark.torch_frontend


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _check(fn, *args, rtol=1e-5, atol=1e-5, sim=False):
    module = Fn(fn).eval()
    with torch.no_grad():
        want = module(*args)
    net, params = from_torch(module, args)
    inputs = {p.name: a.numpy() for p, a in zip(net.params, args)}
    got = graph.run_graph(net, inputs, params)
    wants = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, wants):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64),
                                   w.numpy().astype(np.float64), rtol=rtol, atol=atol)
    if sim:
        lib = graph.build(net, target="sim", params=params)
        gm = graph.GraphModule(lib)
        gm.run(**inputs)
        for k, w in enumerate(wants):
            np.testing.assert_allclose(gm.get_output(k).numpy().astype(np.float64),
                                       w.numpy().astype(np.float64), rtol=rtol, atol=atol)
    return net


def _x(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype("float32"))


UNARY = [
    torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.erf, torch.neg, torch.relu,
    torch.sin, torch.cos, torch.atan, torch.floor, torch.ceil, torch.round, torch.trunc,
    torch.sign, torch.sinh, torch.cosh, torch.asinh, torch.expm1, torch.log1p,
    lambda x: torch.log(x.abs() + 1), lambda x: torch.sqrt(x.abs()),
    lambda x: torch.rsqrt(x.abs() + 0.5), lambda x: torch.log2(x.abs() + 1),
    lambda x: torch.log10(x.abs() + 1), lambda x: torch.reciprocal(x + 10),
    lambda x: torch.nn.functional.gelu(x),
    lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    lambda x: torch.nn.functional.elu(x), lambda x: torch.nn.functional.leaky_relu(x, 0.2),
    lambda x: torch.nn.functional.hardtanh(x), lambda x: x.clamp(-0.5, 0.7),
    lambda x: x.clamp(min=0.1), torch.nn.functional.silu, torch.nn.functional.hardswish,
    lambda x: torch.atanh(x.clamp(-0.9, 0.9)), lambda x: torch.acosh(x.abs() + 1.5),
]


@pytest.mark.parametrize("k", range(len(UNARY)))
def test_unary(k):
    _check(UNARY[k], _x(3, 5))


BINARY = [
    torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum,
    lambda a, b: a + 2.5 * b, lambda a, b: torch.sub(a, b, alpha=3), lambda a, b: 2 - a,
    lambda a, b: a / (b.abs() + 1), lambda a, b: torch.div(a * 4, b.abs() + 1,
                                                              rounding_mode="floor"),
    lambda a, b: torch.div(a * 4, b.abs() + 1, rounding_mode="trunc"),
    lambda a, b: torch.pow(a.abs() + 1, b), lambda a, b: a ** 2, lambda a, b: 2 ** a,
    lambda a, b: torch.where(a > b, a, b), lambda a, b: (a < b).float(),
    lambda a, b: ((a >= 0) & (b <= 0)).float(), lambda a, b: ((a == a) ^ (b != 0.1)).float(),
    lambda a, b: torch.remainder(a, 0.7), lambda a, b: torch.fmod(a, 0.7),
    lambda a, b: torch.logical_or(a > 0, b > 0).float(), lambda a, b: (~(a > 0)).float(),
    lambda a, b: a.clamp(b - 1, b + 1), lambda a, b: torch.isnan(a / a.abs()).float(),
]


@pytest.mark.parametrize("k", range(len(BINARY)))
def test_binary(k):
    _check(BINARY[k], _x(3, 5), _x(5, seed=1) if k % 2 else _x(3, 5, seed=1))


SHAPES = [
    lambda x: x.view(6, 4), lambda x: x.permute(2, 0, 1), lambda x: x.transpose(0, 1),
    lambda x: x.unsqueeze(1).squeeze(1), lambda x: x[:, 1:3, ::2], lambda x: x[1],
    lambda x: x.expand(2, 2, 3, 4)[1], lambda x: torch.cat([x, x * 2], 1),
    lambda x: x.split([1, 2], 1)[1], lambda x: x.repeat(1, 2, 1), lambda x: x.flip(2),
    lambda x: torch.nn.functional.pad(x, (1, 2)), lambda x: torch.nn.functional.pad(x, (1, -1)),
    lambda x: torch.nn.functional.pad(x, (1, 2), mode="reflect"),
    lambda x: torch.nn.functional.pad(x, (1, 2), mode="replicate"),
    lambda x: x.mean(-1), lambda x: x.sum((0, 2), keepdim=True), lambda x: x.amax(1),
    lambda x: x.amin(0), lambda x: x.max(1)[0], lambda x: x.max(1)[1].float(),
    lambda x: x.argmin(2).float(), lambda x: x.var(1), lambda x: x.var(1, correction=0),
    lambda x: x.prod(2), lambda x: (x > 0).any(2).float(), lambda x: torch.softmax(x, 1),
    lambda x: torch.log_softmax(x, -1), lambda x: torch.cumsum(x, 1),
    lambda x: torch.topk(x, 2, dim=-1)[0], lambda x: torch.sort(x, 1)[0],
    lambda x: torch.diagonal(x, 0, 1, 2), lambda x: x + torch.arange(4.0),
    lambda x: x * torch.full((3, 4), 2.0), lambda x: x.flatten(1) @ torch.ones(12, 2),
    lambda x: torch.bmm(x.transpose(1, 2), x), lambda x: x.clone().contiguous().float(),
    lambda x: x.index_select(1, torch.tensor([2, 0])), lambda x: x.gather(
        2, torch.zeros(2, 3, 1, dtype=torch.long)),
    lambda x: x.new_zeros(2, 3, 4).slice_scatter(x[:, :2], dim=1, start=1),
    lambda x: torch.select_scatter(x, x[:, 0] * 2, 1, 2),
    lambda x: x.scatter_add(2, torch.zeros(2, 3, 4, dtype=torch.long), x),
]


@pytest.mark.parametrize("k", range(len(SHAPES)))
def test_shapes_and_reductions(k):
    _check(SHAPES[k], _x(2, 3, 4))


F = torch.nn.functional
COMPOSED = [
    (lambda x: F.interpolate(x, size=(7, 9), mode="bilinear"), (1, 2, 5, 6)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
     (1, 2, 5, 6)),
    (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), (1, 2, 5, 6)),
    (lambda x: F.max_pool3d(x, 3, 2, 1), (1, 2, 5, 6, 7)),
    (lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True)[1].float(), (1, 2, 5, 6, 7)),
    (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)[1].float(), (2, 2, 5, 6)),
    (lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True), (1, 2, 5, 6, 7)),
    (lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False), (1, 2, 5, 6, 7)),
    (lambda x: F.avg_pool3d(x, 3, 2, 1), (1, 2, 5, 6, 7)),
    (lambda x: torch.atan2(x[0], x[1]), (2, 3, 4)),
    (lambda x: torch.cdist(x[0], x[1]), (2, 3, 4)),
    (lambda x: torch.cdist(x[0], x[1], p=1.5), (2, 3, 4)),
    (lambda x: F.pdist(x), (4, 3)),
    (lambda x: torch.as_strided(x, (2, 2), (1, 2), 1), (6,)),
    (lambda x: F.instance_norm(x), (1, 2, 5, 6)),
    (lambda x: x.index_put((torch.tensor([2, 0]),), torch.ones(2, 4)), (3, 4)),
    (lambda x: x.index_put((torch.tensor([2, 2]),), torch.ones(4), accumulate=True), (3, 4)),
    (lambda x: x.masked_fill(x > 0.5, -1.0), (3, 4)),
    (lambda x: torch.ops.aten.index_put(x, [None, torch.tensor([1, 2]), torch.tensor([0, 3])],
                                        torch.tensor(7.0), True), (3, 4, 5)),
    (lambda x: torch.ops.aten.index_put(x, [torch.tensor([1, 2]), None, torch.tensor([0, 3])],
                                        torch.ones(2, 4)), (3, 4, 5)),
    (lambda x: F.fold(x, (5, 6), (2, 3), padding=1, stride=(1, 2)), (2, 24, 18)),
    (lambda x: F.fold(x, (4, 4), 2, stride=2), (12, 4)),
]


_I = torch.tensor([2, 0, -1])
_K = torch.tensor([0, -2, 3])
_MASK = torch.tensor([True, False, True])
_MASK2 = torch.from_numpy(np.random.default_rng(0).random((3, 4)) > 0.5)
INDEXING = [  # aten.index.Tensor: several index tensors, broadcast together, None entries
    lambda x: x[_I, _K],
    lambda x: x[torch.tensor([[1], [2]]), _K],  # (2, 1) with (3,): a (2, 3) grid
    lambda x: x[:, torch.tensor([[1], [2]]), _K],  # after a whole axis: stays in place
    lambda x: x[_I, :, _K],  # separated by a whole axis: the indexed axes go first
    lambda x: x[:, _I, :, torch.tensor([1, 5, 0])],
    lambda x: x[_I, _K, torch.tensor([1])],
    lambda x: x[torch.tensor(1), :, torch.tensor([2, 3])],
    lambda x: x[_I.int(), _K.int()],
    lambda x: x[..., torch.tensor([1, 2]), torch.tensor([0, 5])],
    lambda x: x[_MASK],  # a constant mask: its true positions, known while importing
    lambda x: x[:, torch.tensor([True, False, False, True])] * 2,
    lambda x: x[_MASK2, 1:3],
]


@pytest.mark.parametrize("k", range(len(INDEXING)))
def test_advanced_indexing(k):
    _check(INDEXING[k], _x(3, 4, 5, 6), sim=k in (1, 3, 9))


def test_indexing_by_a_mask_computed_at_run_time_is_refused():
    with pytest.raises(TorchImportError, match=r"aten\.index\.Tensor.*boolean mask computed "
                                               r"at run time.*torch\.where"):
        from_torch(Fn(lambda x: x[x[:, 0] > 0]), (_x(3, 4),))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_fixed_bags(mode):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode)
    _check(bag.eval(), torch.tensor([[1, 2, 4], [5, 4, 9]]))


@pytest.mark.parametrize("mode,last", [("sum", False), ("mean", True), ("max", False)])
def test_embedding_bag_with_offsets_given_at_run_time(mode, last):
    """Offsets as an input (one bag empty): rows scattered into their bags."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode, include_last_offset=last).eval()
    offsets = torch.tensor([0, 2, 2, 5] + ([7] if last else []))
    _check(bag, torch.tensor([1, 2, 4, 5, 4, 9, 3]), offsets, sim=mode == "max")


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_with_padding_idx(mode):
    """The padding id's rows count for nothing, also in a bag of padding only."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode, padding_idx=4).eval()
    _check(bag, torch.tensor([1, 2, 4, 5, 4, 4, 3]), torch.tensor([0, 2, 2, 4, 5]))
    _check(bag, torch.tensor([[1, 4, 4], [4, 4, 4], [2, 3, 9]]))


@pytest.mark.parametrize("k", range(len(COMPOSED)))
def test_composed_converters(k):
    fn, shape = COMPOSED[k]
    _check(fn, _x(*shape))


@pytest.mark.parametrize("mode,padding,align", [
    ("bilinear", "zeros", False), ("bilinear", "border", True), ("bilinear", "reflection", False),
    ("bilinear", "reflection", True), ("nearest", "zeros", True), ("nearest", "reflection", False),
])
def test_grid_sample(mode, padding, align):
    grid = _x(2, 4, 7, 2, seed=1) * 0.9  # some points outside [-1, 1]
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])  # exactly on the corners
    _check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align),
           _x(2, 3, 5, 6), grid, sim=(mode, padding) == ("bilinear", "reflection") and align)


@pytest.mark.parametrize("padding,align", [("zeros", False), ("border", True),
                                           ("reflection", False)])
def test_grid_sample_bicubic(padding, align):
    grid = _x(2, 4, 7, 2, seed=1) * 0.9
    _check(lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode=padding,
                                      align_corners=align), _x(2, 3, 5, 6), grid,
           rtol=1e-5, atol=1e-5)


def test_masked_scatter():
    mask = torch.tensor([[True, False, True, True], [False, False, True, False],
                         [True, True, False, False]])
    _check(lambda x, s: x.masked_scatter(mask, s), _x(3, 4), _x(9, seed=1), sim=True)
    _check(lambda x, m, s: x.masked_scatter(m, s), _x(3, 4), mask[0], _x(3, 4, seed=2))


A = torch.ops.aten
_POOLED = A.max_pool2d_with_indices(_x(2, 3, 7, 6), [3, 3], [2, 2], [1, 1])[1]
GRADIENTS = [  # (fn, args): gradient overloads, called directly (kept whole by the export)
    (lambda g, x, i: A.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1], [1, 1],
                                                        False, i),
     (_x(*_POOLED.shape, seed=1), _x(2, 3, 7, 6), _POOLED)),
    (lambda g, x: A.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False, True, None),
     (_x(2, 3, 4, 3, seed=1), _x(2, 3, 7, 6))),
    (lambda g, x: A.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], True, False, None),
     (_x(2, 3, 4, 4, seed=1), _x(2, 3, 7, 6))),
    (lambda g, x: A.avg_pool2d_backward(g, x, [2, 3], [2, 2], [0, 1], False, True, 5),
     (_x(2, 3, 3, 3, seed=1), _x(2, 3, 7, 6))),
    (lambda g, x: A._adaptive_avg_pool2d_backward(g, x), (_x(2, 3, 3, 4, seed=1),
                                                          _x(2, 3, 7, 6))),
    (lambda g, i: A.embedding_dense_backward(g, i, 6, -1, False),
     (_x(2, 3, 5), torch.tensor([[1, 2, 4], [4, 0, 1]]))),
    (lambda g, i: A.embedding_dense_backward(g, i, 6, 4, True),
     (_x(2, 3, 5), torch.tensor([[1, 2, 4], [4, 0, 1]]))),
    (lambda g, x, w, b: A.native_layer_norm_backward(
        g, x, [4, 5], *A.native_layer_norm(x, [4, 5], w, b, 1e-5)[1:], w, b, [True] * 3),
     (_x(2, 3, 4, 5, seed=1), _x(2, 3, 4, 5), _x(4, 5, seed=2), _x(4, 5, seed=3))),
    (lambda g, x, w: A.native_group_norm_backward(
        g, x, *A.native_group_norm(x, w, None, 2, 6, 12, 3, 1e-5)[1:], w, 2, 6, 12, 3,
        [True] * 3), (_x(2, 6, 3, 4, seed=1), _x(2, 6, 3, 4), _x(6, seed=2))),
]
for _xs, _ws, _st, _pd, _dl, _op, _g in [  # with output padding _op: transposed
        ((2, 4, 7, 8), (6, 4, 3, 3), [2, 2], [1, 1], [1, 1], None, 1),
        ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [1, 0], [2, 1], None, 2),
        ((2, 4, 9), (6, 4, 3), [2], [1], [1], None, 1),
        ((2, 4, 5, 6), (4, 2, 3, 2), [2, 1], [1, 0], [1, 2], [1, 0], 2),
        ((2, 4, 7), (4, 3, 4), [3], [1], [1], [2], 1),
        ((1, 4, 5, 6, 5), (6, 2, 3, 3, 2), [2, 1, 2], [1, 1, 0], [1, 1, 1], None, 2),
        ((1, 4, 4, 5, 4), (4, 3, 3, 2, 3), [2, 1, 1], [1, 0, 1], [1, 1, 1], [1, 0, 0], 1)]:
    _out = A.convolution(_x(*_xs), _x(*_ws), None, _st, _pd, _dl, _op is not None,
                         _op or [0] * len(_st), _g)
    GRADIENTS.append((
        (lambda ws, st, pd, dl, op, g: lambda go, x, w: A.convolution_backward(
            go, x, w, [ws[1] * g if op else ws[0]], st, pd, dl, op is not None,
            op or [0] * len(st), g, [True] * 3))(_ws, _st, _pd, _dl, _op, _g),
        (_x(*_out.shape, seed=1), _x(*_xs), _x(*_ws, seed=2))))


@pytest.mark.parametrize("k", range(len(GRADIENTS)))
def test_gradient_overloads(k):
    from ptxforge.graph.frontend_torch import from_exported_program

    fn, args = GRADIENTS[k]
    ep = torch.export.export(Fn(fn), args)
    assert "backward" in str([n.target for n in ep.graph.nodes if n.op == "call_function"])
    net, params = from_exported_program(ep, decompose=False)
    got = graph.run_graph(net, {p.name: a.numpy() for p, a in zip(net.params, args)}, params)
    want = fn(*args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_int_and_bool_inputs_are_carried():
    emb = torch.nn.Embedding(10, 4)

    def fn(ids, mask):
        return emb(ids) * mask.unsqueeze(-1).float()

    ids = torch.tensor([[1, 2, 9], [0, 3, 3]])
    mask = torch.tensor([[True, False, True], [True, True, False]])
    net = _check(fn, ids, mask)
    assert [p.dtype for p in net.params][:2] == ["int64", "bool"]


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.hardswish(self.gn(self.dw(y)))
        y = torch.nn.functional.avg_pool2d(self.pool(y), 1)
        y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


def test_small_cnn_on_the_simulator():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    x = _x(2, 3, 8, 8)
    net = _check(model, x, rtol=1e-4, atol=1e-4, sim=True)
    assert net.params[0].shape == (2, 3, 8, 8)
    assert any(c.op == "nn.conv2d" and c.attrs["groups"] == 8 for c in net.calls())


def test_params_keep_state_dict_names():
    model = SmallCNN().eval()
    net, params = from_torch(model, (_x(1, 3, 8, 8),))
    assert {"conv.weight", "bn.running_mean", "fc.weight"} <= set(params)
    for name, value in params.items():
        np.testing.assert_array_equal(value, model.state_dict()[name].numpy())


@pytest.mark.parametrize("layer,shape", [
    (lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
     (1, 4, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(4, 6, 3, padding=2, groups=2, dilation=2), (1, 4, 5, 6)),
    (lambda: torch.nn.ConvTranspose1d(4, 6, 4, stride=3, padding=1), (2, 4, 7)),
    (lambda: torch.nn.Conv3d(4, 6, 3, stride=2, padding=1), (1, 4, 5, 6, 7)),
    (lambda: torch.nn.GroupNorm(2, 4), (2, 4, 5, 6)),
])
def test_more_layers(layer, shape):
    torch.manual_seed(0)
    _check(layer().eval(), _x(*shape), rtol=1e-4, atol=1e-4)


def test_conv1d_and_layer_norm_over_two_axes():
    conv = torch.nn.Conv1d(4, 6, 3, padding=1)
    ln = torch.nn.LayerNorm([6, 5])
    _check(lambda x: ln(conv(x)), _x(2, 4, 5), rtol=1e-4, atol=1e-4, sim=True)


@pytest.mark.parametrize("causal,mask_kind,gqa", [(False, None, False), (True, None, False),
                                                  (False, "bool", True), (False, "float", False)])
def test_attention_is_kept_whole(causal, mask_kind, gqa):
    q, k, v = _x(1, 4, 5, 8), _x(1, 2 if gqa else 4, 6, 8, seed=1), _x(1, 2 if gqa else 4, 6, 8,
                                                                      seed=2)
    mask = None
    if mask_kind == "bool":
        mask = torch.from_numpy(np.random.default_rng(3).random((5, 6)) > 0.3)
        mask[0] = False  # a row with every key masked: zeros, as PyTorch
    elif mask_kind == "float":
        mask = _x(1, 1, 5, 6, seed=4)

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)

    net = _check(fn, q, k, v, rtol=1e-5, atol=1e-5, sim=True)
    assert any(c.op == "nn.attention" for c in net.calls())


def test_coverage_is_computed_from_torch():
    names = core_aten_overloads()
    assert len(names) == len(set(names)) > 150
    assert "aten.convolution.default" in names
    rows = coverage()
    assert [r.overload for r in rows] == names
    supported = [r for r in rows if r.supported]
    assert len(supported) >= 182
    assert all(r.maps_to for r in supported)


def test_unsupported_operator_names_op_and_line():
    def fn(x):
        return torch.nonzero(x > 0)

    with pytest.raises(TorchImportError, match=r"aten\.nonzero.*test_torch_frontend\.py"):
        from_torch(Fn(fn), (_x(3),))


def test_complex_and_float8_are_rejected():
    with pytest.raises(TorchImportError, match="complex"):
        from_torch(Fn(lambda x: x * 2), (torch.ones(3, dtype=torch.complex64),))
    with pytest.raises(TorchImportError, match="float8"):
        from_torch(Fn(lambda x: x.to(torch.float32)), (torch.ones(3).to(torch.float8_e4m3fn),))


def test_untraceable_model_is_a_clear_error():
    def fn(x):
        if x.sum() > 0:  # data-dependent control flow
            return x
        return -x

    with pytest.raises(TorchImportError, match="torch.export cannot trace"):
        from_torch(Fn(fn), (_x(3),))


def test_training_mode_batch_norm_is_refused():
    bn = torch.nn.BatchNorm2d(3).train()
    with pytest.raises(TorchImportError, match="eval"):
        from_torch(bn, (_x(2, 3, 4, 4),))
