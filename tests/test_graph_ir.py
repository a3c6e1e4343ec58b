"""The graph IR: construction, type inference errors, printing, binding, the reference
executor, and every operator's te computation against its numpy reference (simulator)."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import nn
from ptxforge.graph.opdefs.winograd import transform_matrices, winograd_reference

RNG = np.random.default_rng(7)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype("float32")


# -- construction and types ----------------------------------------------------------------


def test_types_are_inferred_on_construction():
    x = graph.var("data", (1, 3, 16, 16))
    w = graph.var("w", (8, 3, 3, 3))
    y = nn.conv2d(x, w, strides=2, padding=1)
    assert y.shape == (1, 8, 8, 8)
    z = nn.max_pool2d(y, 3, 2, 1, layout="NCHW", ceil_mode=True)
    assert z.shape == (1, 8, 5, 5)  # ceil mode: (8 + 2 - 3 + 1) // 2 + 1
    assert nn.batch_flatten(z).shape == (1, 200)
    xh = graph.var("xh", (2, 16, 16, 3))
    wh = graph.var("wh", (3, 3, 1, 3))
    dw = nn.conv2d(xh, wh, padding=1, groups=3, data_layout="NHWC")
    assert dw.shape == (2, 16, 16, 3)
    assert graph.add(graph.var("a", (4, 1, 5)), graph.var("b", (3, 1))).shape == (4, 3, 5)


@pytest.mark.parametrize("make, message", [
    (lambda: nn.conv2d(graph.var("x", (1, 3, 8, 8)), graph.var("w", (8, 4, 3, 3))),
     "data has 3 channels but weight"),
    (lambda: nn.conv2d(graph.var("x", (1, 3, 8, 8)), graph.var("w", (8, 3, 9, 9))),
     "larger than the padded input"),
    (lambda: nn.conv2d(graph.var("x", (1, 8, 8, 3)), graph.var("w", (8, 3, 3, 3)),
                       data_layout="NHWC", kernel_layout="OIHW"),
     "needs kernel_layout HWIO"),
    (lambda: nn.dense(graph.var("x", (2, 5)), graph.var("w", (3, 4))),
     "data has 5 features but weight"),
    (lambda: graph.add(graph.var("a", (2, 3)), graph.var("b", (4, 3))),
     "do not broadcast"),
    (lambda: graph.reshape(graph.var("a", (2, 3)), (4, 2)), "cannot reshape"),
    (lambda: graph.concatenate([graph.var("a", (2, 3)), graph.var("b", (3, 4))], 0),
     "may differ only along axis 0"),
    (lambda: graph.Call("nn.conv3d", []), "unknown operator 'nn.conv3d'; did you mean"),
    (lambda: graph.Call("nn.relu", [graph.var("a", (2,))], {"alpha": 1}),
     "unknown attribute"),
])
def test_type_errors_say_what_is_wrong(make, message):
    with pytest.raises(graph.GraphError, match=message):
        make()


def test_printer_reads_like_relay():
    x = graph.var("data", (1, 3, 8, 8))
    w = graph.var("w", (4, 3, 3, 3))
    bias = graph.const(np.ones((4, 1, 1), "float32"), "bias")
    net = graph.function(nn.relu(graph.add(nn.conv2d(x, w, padding=1), bias)))
    text = str(net)
    assert text.startswith("def @main(%data: Tensor[(1, 3, 8, 8), float32], "
                           "%w: Tensor[(4, 3, 3, 3), float32]) -> Tensor[(1, 4, 8, 8), float32] {")
    assert "%0 = nn.conv2d(%data, %w, padding=[1, 1, 1, 1]" in text
    assert "add(%0, meta[bias]) /* ty=Tensor[(1, 4, 8, 8), float32] */;" in text
    assert "// meta[bias]: Tensor[(4, 1, 1), float32]" in text
    # attributes equal to the defaults are not printed
    assert "dilation" not in text and "groups" not in text


def test_bind_params_checks_names_and_shapes():
    x = graph.var("data", (2, 4))
    w = graph.var("w", (3, 4))
    net = graph.function(nn.dense(x, w))
    bound = graph.bind_params(net, {"w": rand(3, 4)})
    assert [p.name for p in bound.params] == ["data"]
    with pytest.raises(graph.GraphError, match="expects Tensor"):
        graph.bind_params(net, {"w": rand(4, 3)})
    with pytest.raises(graph.GraphError, match=r"\['wx'\] are not parameters"):
        graph.bind_params(net, {"wx": rand(3, 4)})


def test_check_finds_a_var_that_is_not_a_parameter():
    x = graph.var("data", (2, 4))
    stray = graph.var("stray", (2, 4))
    net = graph.Graph([x], [graph.add(x, stray)])
    with pytest.raises(graph.GraphError, match="uses var %stray"):
        net.check()


def test_evaluate_matches_numpy():
    x = graph.var("x", (2, 3))
    y = graph.var("y", (3,))
    net = graph.function([graph.multiply(graph.add(x, y), 2.0), graph.exp(x)])
    a, b = rand(2, 3), rand(3)
    out = graph.evaluate(net, {"x": a, "y": b})
    np.testing.assert_allclose(out[0], (a + b) * 2, rtol=1e-6)
    np.testing.assert_allclose(out[1], np.exp(a), rtol=1e-6)
    with pytest.raises(graph.GraphError, match="no value for parameter %y"):
        graph.evaluate(net, {"x": a})


# -- every operator: te computation == numpy reference ----------------------------------------


def _op_cases():
    v = graph.var
    cases = {
        "conv2d_nchw": lambda: nn.conv2d(v("x", (1, 4, 9, 9)), v("w", (6, 4, 3, 3)), 2, 1),
        "conv2d_nhwc": lambda: nn.conv2d(v("x", (1, 9, 9, 4)), v("w", (3, 3, 4, 6)), 1, (1, 0),
                                         data_layout="NHWC"),
        "conv2d_dilated": lambda: nn.conv2d(v("x", (1, 2, 9, 9)), v("w", (3, 2, 3, 3)), 1, 2, 2),
        "depthwise_nchw": lambda: nn.conv2d(v("x", (1, 4, 8, 8)), v("w", (8, 1, 3, 3)), 1, 1,
                                            groups=4),
        "depthwise_nhwc": lambda: nn.conv2d(v("x", (1, 8, 8, 4)), v("w", (3, 3, 1, 4)), 2, 1,
                                            groups=4, data_layout="NHWC"),
        "grouped_nchw": lambda: nn.conv2d(v("x", (1, 4, 6, 6)), v("w", (6, 2, 3, 3)), 1, 1,
                                          groups=2),
        "grouped_nhwc": lambda: nn.conv2d(v("x", (1, 6, 6, 4)), v("w", (3, 3, 2, 6)), 1, 1,
                                          groups=2, data_layout="NHWC"),
        "dense": lambda: nn.dense(v("x", (3, 10)), v("w", (7, 10))),
        "matmul": lambda: nn.matmul(v("x", (10, 3)), v("w", (7, 10)), True, True),
        "batch_matmul": lambda: nn.batch_matmul(v("x", (2, 3, 5)), v("y", (2, 4, 5))),
        "batch_matmul_nn": lambda: nn.batch_matmul(v("x", (2, 3, 5)), v("y", (1, 5, 4)),
                                                   transpose_b=False),
        "bias_add": lambda: nn.bias_add(v("x", (2, 3, 4)), v("b", (3,)), 1),
        "broadcast_ops": lambda: graph.maximum(graph.divide(graph.subtract(
            graph.multiply(v("a", (2, 1, 4)), v("b", (3, 1))), v("c", (4,))),
            graph.add(v("d", (2, 3, 4)), 3.0)), v("e", (1, 3, 1))),
        "unary_ops": lambda: graph.tanh(graph.sigmoid(graph.erf(graph.negative(
            nn.leaky_relu(graph.clip(v("x", (3, 5)), -0.5, 0.7), 0.1))))),
        "exp_log_sqrt": lambda: graph.log(graph.sqrt(graph.exp(v("x", (4, 4))))),
        "rsqrt_power": lambda: graph.power(graph.rsqrt(graph.add(graph.exp(v("x", (4,))), 1.0)),
                                           2.0),
        "max_pool": lambda: nn.max_pool2d(v("x", (1, 3, 9, 9)), 3, 2, 1, ceil_mode=True),
        "avg_pool": lambda: nn.avg_pool2d(v("x", (1, 9, 9, 3)), 3, 2, 1, layout="NHWC"),
        "avg_pool_include": lambda: nn.avg_pool2d(v("x", (1, 3, 7, 7)), 3, 1, 1,
                                                  count_include_pad=True),
        "global_avg": lambda: nn.global_avg_pool2d(v("x", (2, 3, 5, 5))),
        "global_max": lambda: nn.global_max_pool2d(v("x", (1, 5, 5, 3)), "NHWC"),
        "batch_norm": lambda: nn.batch_norm(v("x", (1, 4, 3, 3)), v("g", (4,)), v("b", (4,)),
                                            v("m", (4,)), graph.exp(v("s", (4,)))),
        "layer_norm": lambda: nn.layer_norm(v("x", (6, 16)), v("g", (16,)), v("b", (16,))),
        "softmax": lambda: nn.softmax(v("x", (3, 7)), axis=0),
        "reshape": lambda: graph.reshape(graph.exp(v("x", (2, 3, 4))), (0, -1)),
        "flatten": lambda: nn.batch_flatten(graph.exp(v("x", (2, 3, 2, 2)))),
        "transpose": lambda: graph.transpose(v("x", (2, 3, 4)), (1, 2, 0)),
        "concatenate": lambda: graph.concatenate([v("a", (2, 3)), v("b", (2, 1)),
                                                  v("c", (2, 2))], 1),
        "pad": lambda: nn.pad(v("x", (2, 3)), ((1, 0), (2, 1)), 0.5),
        "squeeze_expand": lambda: graph.expand_dims(graph.squeeze(graph.exp(v("x", (2, 1, 3))),
                                                                  [1]), 0, 2),
        "mean": lambda: graph.mean(v("x", (2, 3, 4)), [0, 2], keepdims=True),
        "winograd_nhwc": lambda: nn.conv2d_winograd(
            v("x", (1, 7, 7, 4)), v("u", (4, 4, 5, 4)), 2, 1, "NHWC"),
        "winograd_nchw_4": lambda: nn.conv2d_winograd(
            v("x", (1, 3, 8, 8)), v("u", (6, 6, 2, 3)), 4, (1, 1), "NCHW"),
        "winograd_transform": lambda: nn.winograd_weight_transform(v("w", (3, 3, 2, 3)), 2),
    }
    return cases


@pytest.mark.parametrize("case", sorted(_op_cases()))
def test_operator_te_matches_reference_on_the_simulator(case):
    out = _op_cases()[case]()
    net = graph.function(out)
    positive = {"s"}
    inputs = {p.name: rand(*p.shape, low=0.1 if p.name in positive else -1.0)
              for p in net.params}
    ref = graph.evaluate(net, inputs)
    lib = graph.build(net, "sim")
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**inputs)
    m.run()
    got = m.get_output(0).numpy()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tile, size, pad", [(2, 7, 1), (4, 8, 1), (2, 6, 0), (4, 13, 1)])
def test_winograd_reference_equals_direct_convolution(tile, size, pad):
    x = rand(2, size, size, 3).astype(np.float64)
    w = rand(3, 3, 3, 5).astype(np.float64)
    _, _, g = transform_matrices(tile)
    u = np.einsum("ek,fl,klio->efoi", g, g, w)
    attrs = {"tile_size": tile, "padding": (pad,) * 4, "data_layout": "NHWC", "out_dtype": ""}
    got = winograd_reference(x, u, attrs)
    from ptxforge.ops.testing import conv2d_nhwc_python

    np.testing.assert_allclose(got, conv2d_nhwc_python(x, w, 1, pad), rtol=1e-9, atol=1e-9)
