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
]


@pytest.mark.parametrize("k", range(len(COMPOSED)))
def test_composed_converters(k):
    fn, shape = COMPOSED[k]
    _check(fn, _x(*shape))


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
    assert len(supported) >= 170
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
