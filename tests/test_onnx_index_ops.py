"""ONNX indexing and data-movement operators: small models made with onnx.helper import, and
every output matches a numpy reference through the reference executor and through a
simulator build; what cannot be translated is refused with a message saying why."""

from __future__ import annotations

import numpy as np
import ptxforge
import pytest
from ptxforge import graph
from ptxforge.graph import GraphError, OnnxImportError
from ptxforge.graph.opdefs import index as GI
from ptxforge.graph.opdefs import transform as GT

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(11)
_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL,
          np.dtype(np.float16): TensorProto.FLOAT16}


def value_info(name, array_or_shape, dtype=np.float32):
    if isinstance(array_or_shape, np.ndarray):
        return helper.make_tensor_value_info(name, _TYPES[array_or_shape.dtype],
                                             array_or_shape.shape)
    return helper.make_tensor_value_info(name, _TYPES[np.dtype(dtype)], array_or_shape)


def model_of(nodes, feeds: dict, outputs: dict, inits: dict | None = None, opset: int = 18):
    """A checked model: ``feeds`` are the inputs (arrays), ``outputs`` the expected output
    arrays by name, ``inits`` initializers by name."""
    g = helper.make_graph(
        nodes, "t", [value_info(k, v) for k, v in feeds.items()],
        [value_info(k, v) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8 if opset < 21 else 10)
    onnx.checker.check_model(model)
    return model


def check(nodes, feeds: dict, expected: dict, inits=None, opset: int = 18, compiled=True):
    """Import, run the reference executor and a simulator build, compare every output with
    ``expected`` (numpy values, also in dtype); returns the imported graph."""
    model = model_of(nodes, feeds, expected, inits, opset)
    net, params = graph.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    got = graph.evaluate(net, feeds, params)
    got = got if isinstance(got, (list, tuple)) else [got]
    want = list(expected.values())
    for g, e in zip(got, want, strict=True):
        assert np.asarray(g).dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    if compiled:
        lib = graph.build(net, "sim", params)
        m = graph.GraphModule(lib, ptxforge.sim())
        m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
        m.run()
        for k, e in enumerate(want):
            out = m.get_output(k).numpy()
            assert out.dtype == e.dtype and out.shape == e.shape
            np.testing.assert_allclose(out, e, rtol=1e-5, atol=1e-6)
    return net


def ops_of(net) -> list[str]:
    return [c.op for c in net.calls()]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


# -- gathers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_on_run_time_indices_is_an_embedding_lookup(axis):
    table = rand(6, 5)
    extent = table.shape[axis]
    ids = np.array([[0, -1, 2], [extent - 1, 1, -extent]], np.int64)
    net = check([node("Gather", ["table", "ids"], ["y"], axis=axis)], {"ids": ids},
                {"y": np.take(table, ids, axis=axis)}, {"table": table})
    assert "take" in ops_of(net)


def test_gather_int32_indices_of_int64_data_and_a_scalar_index():
    data = np.arange(24, dtype=np.int64).reshape(4, 6)
    check([node("Gather", ["x", "i"], ["y"], axis=1),
           node("Gather", ["x", "s"], ["z"], axis=0)],
          {"x": data, "i": np.array([5, 0, -2], np.int32)},
          {"y": data[:, [5, 0, 4]], "z": data[3]}, {"s": np.array(-1, np.int64)})


def test_gather_of_a_run_time_scalar_index_drops_the_axis():
    x = rand(4, 3, 2)
    check([node("Gather", ["x", "i"], ["y"], axis=1)], {"x": x, "i": np.array(-2, np.int64)},
          {"y": np.ascontiguousarray(x[:, 1])})


def test_gather_fuses_with_its_element_wise_reader():
    table = rand(10, 4)
    ids = np.array([3, 7, 0], np.int64)
    net = check([node("Gather", ["table", "ids"], ["e"]), node("Relu", ["e"], ["y"])],
                {"ids": ids}, {"y": np.maximum(table[ids], 0)}, {"table": table})
    fused = graph.optimize(net, {})
    assert len(list(fused.calls())) == 1


def test_out_of_range_indices_raise_in_the_reference_and_clamp_in_kernels():
    table = rand(4, 3)
    ids = np.array([1, 9, -7], np.int64)
    model = model_of([node("Gather", ["table", "ids"], ["y"])], {"ids": ids},
                     {"y": np.zeros((3, 3), np.float32)}, {"table": table})
    net, params = graph.from_onnx(model, {"ids": ids.shape})
    with pytest.raises(IndexError, match=r"holds 9, outside \[-4, 4\)"):
        graph.evaluate(net, {"ids": ids}, params)
    lib = graph.build(net, "sim", params)
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(ids=ids)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), table[[1, 3, 0]])


def test_gather_elements_with_negative_indices():
    x = rand(3, 4)
    idx = np.array([[0, -1], [3, 1], [-4, 2]], np.int64)
    check([node("GatherElements", ["x", "i"], ["y"], axis=1)], {"x": x, "i": idx},
          {"y": np.take_along_axis(x, idx % 4, axis=1)})


def test_gather_nd_with_batch_dims():
    x = rand(2, 3, 4)
    idx = np.array([[[1, 2], [0, -1]], [[-2, 0], [1, 1]]], np.int64)
    want = np.stack([x[b][tuple((idx[b] % [3, 4]).T)] for b in range(2)])
    check([node("GatherND", ["x", "i"], ["y"], batch_dims=1)], {"x": x, "i": idx}, {"y": want})
    want0 = x[tuple((idx.reshape(-1, 2) % [2, 3]).T)].reshape(2, 2, 4)
    check([node("GatherND", ["x", "i"], ["y"])], {"x": x, "i": idx}, {"y": want0})


# -- scatters --------------------------------------------------------------------------------

_COMBINE = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum,
            "min": np.minimum}


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions(reduction):
    data = rand(3, 5)
    idx = np.array([[1, -1, 1], [0, 2, 0]], np.int64)  # repeats within a row
    if reduction == "none":
        idx = np.array([[1, -1, 3], [0, 2, 4]], np.int64)
    upd = rand(2, 3)
    want = data.copy()
    for i in np.ndindex(*idx.shape):
        p = (i[0], idx[i] % 5)
        want[p] = _COMBINE[reduction](want[p], upd[i])
    attrs = {} if reduction == "none" else {"reduction": reduction}
    check([node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, **attrs)],
          {"x": data, "i": idx, "u": upd}, {"y": want})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(reduction):
    data = rand(4, 3, 2)
    idx = np.array([[1, 2], [-1, 0], [1, 2]], np.int64)
    if reduction == "none":
        idx = np.array([[1, 2], [-1, 0], [0, 1]], np.int64)
    upd = rand(3, 2)
    want = data.copy()
    for k in range(3):
        p = (idx[k, 0] % 4, idx[k, 1] % 3)
        want[p] = _COMBINE[reduction](want[p], upd[k])
    attrs = {} if reduction == "none" else {"reduction": reduction}
    check([node("ScatterND", ["x", "i", "u"], ["y"], **attrs)],
          {"x": data, "i": idx, "u": upd}, {"y": want})


def test_scatter_nd_of_whole_rows_int64():
    data = np.arange(12, dtype=np.int64).reshape(4, 3)
    upd = -np.arange(6, dtype=np.int64).reshape(2, 3)
    want = data.copy()
    want[[2, 0]] = upd
    check([node("ScatterND", ["x", "i", "u"], ["y"])],
          {"x": data, "i": np.array([[2], [-4]], np.int64), "u": upd}, {"y": want})


# -- shapes, stretching, ordering ------------------------------------------------------------


def test_expand_broadcasts_both_ways_and_constant_of_shape_range_are_static():
    x = rand(3, 1)
    ar = np.arange(4, dtype=np.float32)
    nodes = [
        node("Expand", ["x", "shape"], ["e"]),
        node("Shape", ["e"], ["s"]),
        node("ConstantOfShape", ["s"], ["c"],
             value=numpy_helper.from_array(np.array([2.0], np.float32))),
        node("Gather", ["s", "last"], ["n"]),
        node("Range", ["zero", "n", "one"], ["r"]),
        node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        node("Add", ["e", "c"], ["ec"]),
        node("Add", ["ec", "rf"], ["y"]),
    ]
    want = np.broadcast_to(x, (2, 3, 4)) + 2.0 + ar
    net = check(nodes, {"x": x}, {"y": want.astype(np.float32)},
                {"shape": np.array([2, 1, 4], np.int64), "last": np.array(2, np.int64),
                 "zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    assert "broadcast_to" in ops_of(net)
    assert not {"Range", "ConstantOfShape"} & set(ops_of(net))


def test_tile_and_trilu_with_static_and_run_time_k():
    x = rand(3, 4)
    check([node("Tile", ["x", "reps"], ["t"]), node("Trilu", ["t", "k"], ["u"]),
           node("Trilu", ["x", "kr"], ["l"], upper=0)],
          {"x": x, "kr": np.array(-1, np.int64)},
          {"u": np.triu(np.tile(x, (2, 3)), 1), "l": np.tril(x, -1)},
          {"reps": np.array([2, 3], np.int64), "k": np.array(1, np.int64)})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    x = rand(3, 5)
    flip = (lambda a: a[:, ::-1]) if reverse else (lambda a: a)
    want = flip(np.cumsum(flip(x), axis=1))
    if exclusive:
        want = want - x
    check([node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
          {"x": x}, {"y": np.ascontiguousarray(want)}, {"axis": np.array(-1, np.int32)})


def test_cumsum_of_integers():
    x = RNG.integers(-5, 5, (4, 3)).astype(np.int32)
    check([node("CumSum", ["x", "axis"], ["y"])], {"x": x},
          {"y": np.cumsum(x, axis=0, dtype=np.int32)}, {"axis": np.array(0, np.int64)})


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_values_and_indices_with_ties(largest):
    x = np.array([[3, 1, 3, 2, 1], [0, 5, 5, 5, -1]], np.float32)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
    check([node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)], {"x": x},
          {"v": np.take_along_axis(x, order, 1), "i": order.astype(np.int64)},
          {"k": np.array([3], np.int64)})


def test_one_hot_with_axis_negative_and_out_of_range_indices():
    idx = np.array([[0, -1], [7, 2]], np.int64)
    values = np.array([-1.0, 4.0], np.float32)
    hot = np.stack([(idx % 5 == d) & (idx < 5) for d in range(5)], axis=1)
    check([node("OneHot", ["i", "depth", "vals"], ["y"], axis=1)], {"i": idx},
          {"y": np.where(hot, 4.0, -1.0).astype(np.float32)},
          {"depth": np.array(5, np.int64), "vals": values})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode):
    x = rand(1, 8, 2, 3)
    b = 2
    if mode == "DCR":
        d2s = x.reshape(1, b, b, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6)
    else:
        d2s = x.reshape(1, 2, b, b, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 4, 6)
    d2s = np.ascontiguousarray(d2s)
    check([node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)], {"x": x}, {"y": d2s})
    # SpaceToDepth inverts DepthToSpace of the same mode (ONNX spells mode only from
    # opset 25 on, so the CRD form is checked on the graph operator)
    y = graph.var("y", d2s.shape)
    net = graph.function(GT.space_to_depth(y, 2, mode))
    np.testing.assert_array_equal(graph.evaluate(net, {"y": d2s}), x)
    lib = graph.build(net, "sim", {})
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(y=d2s)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), x)
    if mode == "DCR":
        check([node("SpaceToDepth", ["y"], ["z"], blocksize=2)], {"y": d2s}, {"z": x})


# -- split, slice, pad -----------------------------------------------------------------------


def test_split_forms():
    x = rand(7, 4)
    check([node("Split", ["x", "sizes"], ["a", "b"], axis=0)], {"x": x},
          {"a": x[:3], "b": x[3:]}, {"sizes": np.array([3, 4], np.int64)}, opset=13)
    check([node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)], {"x": x},
          {"a": x[:3], "b": x[3:6], "c": x[6:]}, opset=18)
    check([node("Split", ["x"], ["a", "b"], axis=1)], {"x": x},
          {"a": x[:, :2], "b": x[:, 2:]}, opset=13)
    check([node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])], {"x": x},
          {"a": x[:, :1], "b": x[:, 1:]}, opset=11)


def test_an_empty_split_piece_is_left_out_of_a_concatenation():
    x = rand(2, 4)
    net = check([node("Split", ["x", "sizes"], ["a", "b"], axis=1),
                 node("Concat", ["a", "b"], ["c"], axis=1), node("Neg", ["c"], ["y"])],
                {"x": x}, {"y": -x}, {"sizes": np.array([4, 0], np.int64)})
    assert "concatenate" not in ops_of(net)


def test_slice_with_negative_steps_and_clamped_bounds():
    x = rand(5, 6, 4)
    starts, ends = np.array([-1, 10, 0], np.int64), np.array([-100, 1, 99], np.int64)
    axes, steps = np.array([0, 1, 2], np.int64), np.array([-2, -1, 3], np.int64)
    net = check([node("Slice", ["x", "s", "e", "a", "st"], ["y"])], {"x": x},
                {"y": np.ascontiguousarray(x[-1:-100:-2, 10:1:-1, 0:99:3])},
                {"s": starts, "e": ends, "a": axes, "st": steps})
    assert "reverse" in ops_of(net)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_with_axes_and_negative_pads(mode):
    x = rand(2, 5, 4)
    pads = np.array([2, -1, 3, 1], np.int64)  # axes 1 and 2: before, then after
    cropped = x[:, :, 1:]
    width = [(0, 0), (2, 3), (0, 1)]
    kw = {"constant_values": 1.5} if mode == "constant" else {"mode": mode}
    want = np.pad(cropped, width, **kw)
    ins = ["x", "pads", "v", "axes"] if mode == "constant" else ["x", "pads", "", "axes"]
    check([node("Pad", ins, ["y"], mode=mode)], {"x": x}, {"y": want},
          {"pads": pads, "v": np.array(1.5, np.float32), "axes": np.array([1, -1], np.int64)},
          opset=19)


def test_pad_of_int64_data_and_static_pad():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    check([node("Pad", ["x", "pads", "v"], ["y"]), node("Pad", ["c", "pads"], ["z"],
                                                        mode="reflect")],
          {"x": x}, {"y": np.pad(x, [(1, 0), (0, 2)], constant_values=-3),
                     "z": np.pad(x * 2, [(1, 0), (0, 2)], mode="reflect")},
          {"pads": np.array([1, 0, 0, 2], np.int64), "v": np.array(-3, np.int64), "c": x * 2},
          opset=13)


def test_dropout_in_inference_returns_the_data_and_an_all_true_mask():
    x = rand(3, 4)
    check([node("Dropout", ["x", "ratio"], ["y", "mask"])], {"x": x},
          {"y": x, "mask": np.ones((3, 4), bool)}, {"ratio": np.array(0.3, np.float32)})


def test_dropout_in_training_is_refused():
    model = model_of([node("Dropout", ["x", "ratio", "train"], ["y"])], {"x": rand(2, 2)},
                     {"y": rand(2, 2)}, {"ratio": np.array(0.3, np.float32),
                                         "train": np.array(True)})
    with pytest.raises(OnnxImportError, match="training_mode is true"):
        graph.from_onnx(model)


# -- products --------------------------------------------------------------------------------


@pytest.mark.parametrize("sa,sb", [((4,), (4, 3)), ((2, 5, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5))])
def test_matmul_broadcasts_batches_and_takes_vectors(sa, sb):
    a, b = rand(*sa), rand(*sb)
    net = check([node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {"y": a @ b})
    assert {"nn.dense", "nn.matmul", "nn.batch_matmul"} & set(ops_of(net))


def test_matmul_with_a_weight_keeps_the_dense_path():
    a, w = rand(2, 3, 4), rand(4, 5)
    net = check([node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"y": a @ w}, {"w": w})
    assert "nn.dense" in ops_of(net) and "transpose" not in ops_of(net)


@pytest.mark.parametrize("eq,shapes,op", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "nn.batch_matmul"),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)], "nn.batch_matmul"),
    ("ij,jk", [(3, 4), (4, 5)], "nn.dense"),
    ("i,j->ij", [(3,), (4,)], "nn.dense"),
    ("ij->ji", [(3, 4)], "transpose"),
    ("ijk->ik", [(3, 4, 2)], "nn.dense"),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], "nn.batch_matmul"),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)], "nn.dense"),
])
def test_einsum_products_transposes_and_sums(eq, shapes, op):
    arrays = [rand(*s) for s in shapes]
    names = [f"x{k}" for k in range(len(arrays))]
    net = check([node("Einsum", names, ["y"], equation=eq)], dict(zip(names, arrays)),
                {"y": np.einsum(eq, *arrays).astype(np.float32)})
    assert op in ops_of(net)


@pytest.mark.parametrize("eq,shape", [("ii->i", (3, 3)), ("bii->bi", (2, 4, 4)),
                                      ("...ii->...i", (2, 3, 3)), ("iji->ij", (3, 2, 3)),
                                      ("ii", (4, 4))])
def test_einsum_diagonals_and_traces(eq, shape):
    x = rand(*shape)
    want = np.asarray(np.einsum(eq, x), np.float32)
    check([node("Einsum", ["x"], ["y"], equation=eq)], {"x": x}, {"y": want})


def test_einsum_diagonal_of_unequal_extents_is_refused():
    model = model_of([node("Einsum", ["x"], ["y"], equation="ii->i")], {"x": rand(3, 3)},
                     {"y": rand(3)})
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 4
    with pytest.raises(OnnxImportError, match="a diagonal needs them equal"):
        graph.from_onnx(model, {"x": (3, 4)})


# -- class-index losses ----------------------------------------------------------------------


def nll_reference(logp, target, weight, ignore, reduction):
    """ONNX's NegativeLogLikelihoodLoss in numpy (per-sample weights, ignored targets)."""
    safe = np.where(target == ignore, 0, target) if ignore is not None else target
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), 1).squeeze(1)
    w = weight[safe] if weight is not None else None
    if ignore is not None:
        keep = (target != ignore).astype(logp.dtype)
        w = keep if w is None else w * keep
    loss = -picked if w is None else -picked * w
    if reduction == "none":
        return loss.astype(np.float32)
    if reduction == "sum" or w is None:
        return np.asarray(loss.sum() if reduction == "sum" else loss.mean(), np.float32)
    return np.asarray(loss.sum() / w.sum(), np.float32)


@pytest.mark.parametrize("reduction,weighted,ignore", [
    ("mean", True, 1), ("none", False, -100), ("sum", True, None), ("mean", False, None)])
def test_negative_log_likelihood_loss(reduction, weighted, ignore):
    x = rand(3, 4, 2)
    target = np.array([[0, 1], [3, 2], [1, 1]], np.int64)
    if ignore == -100:
        target[1, 0] = -100  # an ignored target outside the classes
    weight = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    ins = ["x", "t", "w"] if weighted else ["x", "t"]
    want = nll_reference(x, target, weight if weighted else None, ignore, reduction)
    check([node("NegativeLogLikelihoodLoss", ins, ["y"], **attrs)], {"x": x, "t": target},
          {"y": want}, {"w": weight} if weighted else None, opset=13)


def test_softmax_cross_entropy_loss_with_log_prob():
    x = rand(4, 5)
    target = np.array([4, 0, 2, 2], np.int64)
    shifted = x - x.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    check([node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "lp"], reduction="sum",
                ignore_index=2)], {"x": x, "t": target},
          {"y": nll_reference(logp, target, None, 2, "sum"), "lp": logp.astype(np.float32)},
          opset=13)


# -- rotary embeddings -----------------------------------------------------------------------


def rotary_reference(x, cos, sin, positions, interleaved, rotary_dim, num_heads=0):
    """ONNX's RotaryEmbedding in numpy (the algorithm of the operator's documentation)."""
    shape = x.shape
    x = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(
        shape[0], shape[1], num_heads, -1)
    rd = rotary_dim or x.shape[3]
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot, keep = x[..., :rd], x[..., rd:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else np.split(rot, 2, axis=-1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = np.stack([real, imag], -1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], -1)
    out = np.concatenate([rot, keep], -1)
    return out.reshape(shape) if len(shape) == 3 else out.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("interleaved,rotary_dim", [(0, 0), (1, 4), (0, 4)])
def test_rotary_embedding_with_positions(interleaved, rotary_dim):
    x = rand(2, 3, 4, 8)  # [B, H, S, D]
    half = (rotary_dim or 8) // 2
    cos, sin = rand(10, half), rand(10, half)
    positions = np.array([[0, 1, 2, 3], [9, 2, 5, 0]], np.int64)
    want = rotary_reference(x, cos, sin, positions, interleaved, rotary_dim)
    check([node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], interleaved=interleaved,
                rotary_embedding_dim=rotary_dim)], {"x": x, "pos": positions},
          {"y": want.astype(np.float32)}, {"cos": cos, "sin": sin}, opset=23)


def test_rotary_embedding_of_a_3d_input_without_positions():
    x = rand(2, 4, 12)  # [B, S, H * D], 3 heads of 4
    cos, sin = rand(2, 4, 2), rand(2, 4, 2)
    want = rotary_reference(x, cos, sin, None, 0, 0, num_heads=3)
    check([node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], num_heads=3)],
          {"x": x, "cos": cos, "sin": sin}, {"y": want.astype(np.float32)}, opset=23)


# -- import-time evaluation and refusals -----------------------------------------------------


def test_nonzero_compress_unique_and_size_evaluate_at_import_time():
    c = np.array([[0, 3, 0], [2, 0, 2]], np.int64)
    nodes = [
        node("NonZero", ["c"], ["nz"]), node("Shape", ["nz"], ["nzs"]),  # [2, 3]
        node("Unique", ["c"], ["u"]), node("Size", ["u"], ["us"]),  # 3 values: 0, 2, 3
        node("Unsqueeze", ["us", "zero"], ["us1"]),
        node("Compress", ["c", "cond"], ["cc"], axis=1), node("Shape", ["cc"], ["ccs"]),
        node("Size", ["x"], ["xs"]), node("Unsqueeze", ["xs", "zero"], ["xs1"]),  # 4
        node("Concat", ["nzs", "us1", "xs1"], ["dims"], axis=0),
        node("Cast", ["dims"], ["df"], to=TensorProto.FLOAT),
        node("Reshape", ["x", "ccs"], ["x2"]),  # [2, 2] from the compressed shape
        node("Reshape", ["x2", "four"], ["x4"]),
        node("Add", ["x4", "df"], ["y"]),
    ]
    x = rand(2, 2)
    check(nodes, {"x": x}, {"y": x.reshape(4) + np.array([2, 3, 3, 4], np.float32)}, {
        "c": c, "cond": np.array([False, True, True]), "zero": np.array([0], np.int64),
        "four": np.array([4], np.int64)}, opset=13)


@pytest.mark.parametrize("op,ins,what", [
    ("NonZero", ["x"], "number of non-zero"), ("Range", ["x", "x", "x"], "output length"),
    ("Unique", ["x"], "distinct values"),
])
def test_data_dependent_shapes_on_run_time_values_are_refused(op, ins, what):
    outs = ["y", "i", "inv", "n"] if op == "Unique" else ["y"]
    g = helper.make_graph([node(op, ins, outs)], "t",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(OnnxImportError, match=f"{what} .*depends on the values"):
        graph.from_onnx(model, {"x": ()})


def test_graph_ops_check_their_arguments():
    x = graph.var("x", (3, 4))
    with pytest.raises(GraphError, match="indices must be int32 or int64, got float32"):
        GI.take(x, graph.var("i", (2,)))
    idx = graph.var("i", (2, 4), "int64")
    with pytest.raises(GraphError, match="larger than data"):
        GI.gather_elements(x, graph.var("j", (4, 4), "int64"), axis=1)
    with pytest.raises(GraphError, match="updates has shape"):
        GI.scatter_elements(x, idx, graph.var("u", (2, 3)))
    with pytest.raises(GraphError, match="reduction must be one of"):
        GI.scatter_nd(x, graph.var("k", (2, 1), "int64"),
                                      graph.var("u", (2, 4)), reduction="avg")
    with pytest.raises(GraphError, match=r"k must be an int in \[1, 4\]"):
        GI.topk_indices(x, 5)
    with pytest.raises(GraphError, match="do not split into blocks"):
        GT.depth_to_space(graph.var("y", (1, 6, 2, 2)), 2)
    with pytest.raises(GraphError, match="do not broadcast"):
        GT.broadcast_to(x, (2, 3, 5))
    with pytest.raises(GraphError, match="mode must be one of"):
        GT.border_pad(x, [(1, 1), (0, 0)], "symmetric")


def test_indexing_kernels_compile_to_ptx():
    x = graph.var("x", (4, 6))
    i = graph.var("i", (4, 3), "int64")
    rows = GT.reshape(GI.topk_indices(x, 1, 0), (6, 1))  # int64 indices made on the device
    outs = [GI.take(x, i, 1), GI.scatter_nd(x, rows, graph.var("u", (6, 6)), "add"),
            GI.cumsum(x, 0)]
    lib = graph.build(graph.function(outs), "cuda", {})
    assert lib.functions and all(f.ptx is not None for f in lib.functions.values())
