"""ONNX converters of indexing and data-movement operators (gathers, scatters, slices,
tiling, padding, splitting, ordering); the products (MatMul, Gemm, Einsum) are in
:mod:`.linear_ops`.

Every operator that exporters use to compute shapes (Gather, Expand, ConstantOfShape,
Range, Slice, Tile, Split, ...) also evaluates at import time when its inputs are known
then; Range, ConstantOfShape, NonZero and Unique need the values that decide their output
shapes known then (shapes here are static; the error names the graph inputs to fix), and
Compress its condition.
"""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant, Node
from ..op import get_op
from ..opdefs import index as GI
from ..opdefs import scan as GS
from ..opdefs import transform as GT
from .common import has_input as _has
from .common import text_attr as _text


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _s(im, node, k: int = 0) -> np.ndarray:
    return im.static[node.input[k]]


def _const_input(im, node, k: int, what: str) -> np.ndarray:
    return np.asarray(im.value(node.input[k], f"the {node.op_type} {what}"))


def _ref(op: str, attrs_of=lambda a: {}):
    """An import-time evaluation through the numpy reference of graph operator ``op`` on all
    the node's inputs; ``attrs_of`` maps the ONNX attributes to the operator's."""

    def static(im, node, a):
        opdef = get_op(op)
        values = [np.asarray(_s(im, node, k)) for k in range(len(node.input))]
        return [opdef.ref(values, opdef.normalize_attrs(attrs_of(a)))]

    return static


def _shape_value(im, node, k: int, operand: str, what: str) -> np.ndarray:
    """Input ``k`` (``operand``), which decides ``what`` (an output shape or length), as
    known at import time; otherwise an ``OnnxDataDependentError`` naming the graph inputs
    it is computed from (``from_onnx(..., constants=)`` imports the model for given
    values of them)."""
    from ..frontend_onnx import OnnxDataDependentError

    try:
        return _const_input(im, node, k, operand)
    except OnnxDataDependentError as e:
        raise OnnxDataDependentError(
            f"{what} depends on the values of its inputs, which are computed at run time, "
            f"and shapes here are static: {e}", e.inputs) from None


def _data_dependent(what: str):
    raise OnnxImportError(f"{what} depends on the values of its inputs, which are computed "
                          "at run time; shapes here are static, so it is supported only on "
                          "values known at import time (constants and shapes)")


# -- gathers ---------------------------------------------------------------------------------


def _static_gather(im, node, a):
    data, indices = _s(im, node), _s(im, node, 1)
    axis = int(a.get("axis", 0)) % max(data.ndim, 1)
    extent = data.shape[axis]
    if np.any((indices < -extent) | (indices >= extent)):
        raise OnnxImportError(f"an index is outside [{-extent}, "
                              f"{extent})")
    return [np.take(data, indices, axis=axis)]


@register_converter("Gather", static=_static_gather)
def _gather(im, node, a):
    data = im.tensor(node.input[0])
    axis = int(a.get("axis", 0))
    if im.is_static(node.input[1]) and _s(im, node, 1).ndim == 0:
        # one index known now: a slice of the data (graph constants have at least one
        # dimension, so a 0-D index would not drop the axis)
        extent = data.shape[axis]
        k = int(_s(im, node, 1))
        if not -extent <= k < extent:
            raise OnnxImportError(f"index {k} is outside "
                                  f"[{-extent}, {extent})")
        axis %= data.ndim
        part = GT.strided_slice(data, [k % extent], [k % extent + 1], [1], [axis])
        return GT.squeeze(part, [axis])
    return GI.take(data, im.tensor(node.input[1]), axis)


@register_converter("GatherElements",
                    static=_ref("gather_elements", lambda a: {"axis": int(a.get("axis", 0))}))
def _gather_elements(im, node, a):
    return GI.gather_elements(im.tensor(node.input[0]), im.tensor(node.input[1]),
                              int(a.get("axis", 0)))


@register_converter("GatherND", static=_ref(
    "gather_nd", lambda a: {"batch_dims": int(a.get("batch_dims", 0))}))
def _gather_nd(im, node, a):
    return GI.gather_nd(im.tensor(node.input[0]), im.tensor(node.input[1]),
                        int(a.get("batch_dims", 0)))


# -- scatters --------------------------------------------------------------------------------


def _scatter_elements_attrs(a):
    return {"axis": int(a.get("axis", 0)), "reduction": _text(a.get("reduction"), "none")}


_scatter_elements_static = _ref("scatter_elements", _scatter_elements_attrs)


def _scatter_elements(im, node, a):
    attrs = _scatter_elements_attrs(a)
    return GI.scatter_elements(im.tensor(node.input[0]), im.tensor(node.input[1]),
                               im.tensor(node.input[2]), attrs["axis"], attrs["reduction"])


register_converter("ScatterElements", static=_scatter_elements_static)(_scatter_elements)
register_converter("Scatter", static=_scatter_elements_static)(_scatter_elements)


@register_converter("ScatterND", static=_ref(
    "scatter_nd", lambda a: {"reduction": _text(a.get("reduction"), "none")}))
def _scatter_nd(im, node, a):
    return GI.scatter_nd(im.tensor(node.input[0]), im.tensor(node.input[1]),
                         im.tensor(node.input[2]), _text(a.get("reduction"), "none"))


# -- values that only shapes define ----------------------------------------------------------


def _constant_of_shape(im, node, a):
    from onnx import numpy_helper

    if not im.is_static(node.input[0]):
        _data_dependent("the output shape")
    shape = _ints(_s(im, node))
    if any(s < 0 for s in shape):
        raise OnnxImportError(f"negative extent in {shape}")
    value = (numpy_helper.to_array(a["value"]).reshape(-1) if "value" in a
             else np.zeros(1, np.float32))
    if value.size != 1:
        raise OnnxImportError(f"value must hold one element, "
                              f"got {value.size}")
    return [np.full(shape, value[0], dtype=value.dtype)]


@register_converter("ConstantOfShape", static=_constant_of_shape)
def _constant_of_shape_node(im, node, a):
    # the shape must be known now (a data-dependent one names the inputs to fix); a known
    # shape reaches here only when the result is too large to fold: a broadcast scalar
    _shape_value(im, node, 0, "shape", "the output shape")
    full = _constant_of_shape(im, node, a)[0]
    return GT.broadcast_to(Constant(full.reshape(-1)[:1].reshape(()), node.output[0],
                                    dt.from_numpy(full.dtype)), full.shape)


def _range(im, node, a):
    start, limit, delta = (_s(im, node, k).reshape(()) for k in range(3))
    if delta == 0:
        raise OnnxImportError("delta is 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(count) * delta).astype(start.dtype)]


@register_converter("Range", static=_range)
def _range_node(im, node, a):
    # start, limit and delta set the length: each must be known now (else the error names
    # the graph inputs to fix); known ones reach here only for a result too large to fold
    for k, what in enumerate(("start", "limit", "delta")):
        _shape_value(im, node, k, what, "the output length")
    value = _range(im, node, a)[0]
    return Constant(value, node.output[0], dt.from_numpy(value.dtype))


def _eye_like_value(im, node, a):
    from ..onnx_model import ONNX_DTYPES

    shape = tuple(im.shape(node.input[0]))
    if len(shape) != 2:
        raise OnnxImportError(f"the input must be 2-D, got shape {list(shape)}")
    if "dtype" in a:
        dtype = ONNX_DTYPES.get(int(a["dtype"]))
        if dtype is None:
            raise OnnxImportError(f"dtype {int(a['dtype'])} is not supported; supported: "
                                  f"{', '.join(sorted(set(ONNX_DTYPES.values())))}")
    else:
        dtype = im.tensor(node.input[0]).dtype if node.input[0] in im.nodes else \
            dt.from_numpy(_s(im, node).dtype)
    return np.eye(*shape, k=int(a.get("k", 0)), dtype=dt.to_numpy(dtype)), dtype


@register_converter("EyeLike", static=lambda im, node, a: [_eye_like_value(im, node, a)[0]])
def _eye_like(im, node, a):
    # only the input's shape matters, and shapes are static: a constant
    value, dtype = _eye_like_value(im, node, a)
    return Constant(value, node.output[0], dtype)


def _size_static(im, node, a):
    return [np.array(int(np.prod(im.shape(node.input[0]), dtype=np.int64)), np.int64)]


@register_converter("Size", static=_size_static)
def _size(im, node, a):
    # the importer core evaluates Size from the static shape before any converter runs;
    # this registration lists it among the supported operators
    return [Constant(_size_static(im, node, a)[0], node.output[0], dtype="int64")]


def _nonzero(im, node, a):
    return [np.array(np.nonzero(_s(im, node)), dtype=np.int64)]


def _compress(im, node, a):
    cond = _s(im, node, 1).astype(bool)
    axis = a.get("axis")
    return [np.compress(cond, _s(im, node), axis=None if axis is None else int(axis))]


def _unique(im, node, a):
    x = _s(im, node)
    axis = a.get("axis")
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True,
        axis=None if axis is None else int(axis))
    if not int(a.get("sorted", 1)):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else int(axis))
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    return [values, first.astype(np.int64), inverse.reshape(-1).astype(np.int64),
            counts.astype(np.int64)]


@register_converter("Compress", static=_compress)
def _compress_node(im, node, a):
    # the condition sets the output length: known now, the data may be a tensor of the
    # graph, and the compress is a take of the selected indices
    cond = _shape_value(im, node, 1, "condition", "the output length")
    cond = cond.astype(bool).reshape(-1)
    data = im.tensor(node.input[0])
    axis = a.get("axis")
    if axis is None:
        data = GT.reshape(data, (-1,))
        axis = 0
    axis = int(axis) % data.ndim
    if cond.size > data.shape[axis]:
        raise OnnxImportError(f"the condition has {cond.size} elements, more than the "
                              f"{data.shape[axis]} of axis {axis}")
    picked = np.flatnonzero(cond).astype(np.int64)
    if picked.size == 0:
        raise OnnxImportError("the condition selects nothing; empty tensors are not supported")
    return GI.take(data, Constant(picked, node.output[0] + "_indices", "int64"), axis)


for _op, _fn, _what in (("NonZero", _nonzero, "the number of non-zero elements"),
                        ("Unique", _unique, "the number of distinct values")):
    def _by_value(im, node, a, _fn=_fn, _what=_what):
        # the output's shape is a function of the input's values: known now (the error
        # names the graph inputs to fix otherwise), it is computed here
        _shape_value(im, node, 0, "input", _what)
        return [Constant(v, f"{node.output[0]}_{k}", dt.from_numpy(np.asarray(v).dtype))
                for k, v in enumerate(_fn(im, node, a))]

    register_converter(_op, static=_fn)(_by_value)


# -- shape-preserving and stretching ---------------------------------------------------------


def _expand_shape(node, in_shape, target) -> tuple:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(tuple(in_shape), tuple(target)))
    except ValueError:
        raise OnnxImportError(f"input {list(in_shape)} does not "
                              f"broadcast with shape {list(target)}") from None


@register_converter("Expand", static=lambda im, node, a: [np.broadcast_to(
    _s(im, node), _expand_shape(node, _s(im, node).shape, _ints(_s(im, node, 1)))).copy()])
def _expand(im, node, a):
    x = im.tensor(node.input[0])
    shape = _expand_shape(node, x.shape, _ints(_const_input(im, node, 1, "shape")))
    return x if shape == x.shape else GT.broadcast_to(x, shape)


def _tile_static(im, node, a):
    return [np.tile(_s(im, node), _ints(_s(im, node, 1)))]


@register_converter("Tile", static=_tile_static)
def _tile(im, node, a):
    x = im.tensor(node.input[0])
    reps = _ints(_const_input(im, node, 1, "repeats"))
    return x if all(r == 1 for r in reps) and len(reps) == x.ndim else GT.tile(x, reps)


def _trilu_static(im, node, a):
    k = int(_s(im, node, 1).reshape(())) if _has(node, 1) else 0
    return [(np.triu if a.get("upper", 1) else np.tril)(_s(im, node), k)]


@register_converter("Trilu", static=_trilu_static)
def _trilu(im, node, a):
    upper = bool(a.get("upper", 1))
    x = im.tensor(node.input[0])
    if not _has(node, 1):
        return GI.trilu(x, 0, upper)
    if im.is_static(node.input[1]):
        return GI.trilu(x, int(_s(im, node, 1).reshape(())), upper)
    return GI.trilu(x, im.tensor(node.input[1]), upper)


def _cumsum_attrs(im, node, a):
    return {"axis": int(_const_input(im, node, 1, "axis").reshape(())),
            "exclusive": bool(a.get("exclusive", 0)), "reverse": bool(a.get("reverse", 0))}


@register_converter("CumSum", static=lambda im, node, a: [get_op("cumsum").ref(
    [_s(im, node)], get_op("cumsum").normalize_attrs(_cumsum_attrs(im, node, a)))])
def _cumsum(im, node, a):
    return GI.cumsum(im.tensor(node.input[0]), **_cumsum_attrs(im, node, a))


@register_converter("CumProd", static=lambda im, node, a: [get_op("cumprod").ref(
    [_s(im, node)], get_op("cumprod").normalize_attrs(_cumsum_attrs(im, node, a)))])
def _cumprod(im, node, a):
    return GS.cumprod(im.tensor(node.input[0]), **_cumsum_attrs(im, node, a))


def _one_hot_args(im, node, a):
    depth = _const_input(im, node, 1, "depth").reshape(-1)
    if depth.size != 1:
        raise OnnxImportError("depth must hold one value")
    return int(depth[0]), int(a.get("axis", -1))


def _one_hot_static(im, node, a):
    depth, axis = _one_hot_args(im, node, a)
    attrs = get_op("one_hot").normalize_attrs({"depth": depth, "axis": axis})
    return [get_op("one_hot").ref([_s(im, node), _s(im, node, 2)], attrs)]


@register_converter("OneHot", static=_one_hot_static)
def _one_hot(im, node, a):
    depth, axis = _one_hot_args(im, node, a)
    return GI.one_hot(im.tensor(node.input[0]), im.tensor(node.input[2]), depth, axis)


# -- ordering --------------------------------------------------------------------------------


def _topk_args(im, node, a):
    if im.opset < 10:
        k = int(a["k"])
    else:
        k = int(_const_input(im, node, 1, "K").reshape(()))
    return {"k": k, "axis": int(a.get("axis", -1)), "largest": bool(a.get("largest", 1))}


def _topk_static(im, node, a):
    x = _s(im, node)
    attrs = get_op("topk_indices").normalize_attrs(_topk_args(im, node, a))
    idx = get_op("topk_indices").ref([x], attrs)
    return [np.take_along_axis(x, idx, axis=attrs["axis"] % x.ndim), idx]


@register_converter("TopK", static=_topk_static)
def _topk(im, node, a):
    # ``sorted=0`` lets any order through; the sorted order is one of them
    x = im.tensor(node.input[0])
    args = _topk_args(im, node, a)
    idx = GI.topk_indices(x, **args)
    return [GI.gather_elements(x, idx, args["axis"]), idx]


# -- blocks ----------------------------------------------------------------------------------


def _block(a):
    return int(a["blocksize"])


@register_converter("DepthToSpace", static=lambda im, node, a: [get_op(
    "nn.depth_to_space").ref([_s(im, node)], {"block_size": _block(a),
                                              "mode": _text(a.get("mode"), "DCR")})])
def _depth_to_space(im, node, a):
    return GT.depth_to_space(im.tensor(node.input[0]), _block(a), _text(a.get("mode"), "DCR"))


@register_converter("SpaceToDepth", static=lambda im, node, a: [get_op(
    "nn.space_to_depth").ref([_s(im, node)], {"block_size": _block(a),
                                              "mode": _text(a.get("mode"), "DCR")})])
def _space_to_depth(im, node, a):
    return GT.space_to_depth(im.tensor(node.input[0]), _block(a), _text(a.get("mode"), "DCR"))


# -- split -----------------------------------------------------------------------------------


def _split_sizes(im, node, a, extent: int) -> list[int]:
    """The extents of the pieces (split input or attribute, num_outputs, else equal)."""
    count = len(node.output)
    if "split" in a:
        sizes = _ints(a["split"])
    elif _has(node, 1) and im.opset >= 13:
        sizes = _ints(_const_input(im, node, 1, "split"))
    elif "num_outputs" in a:
        count = int(a["num_outputs"])
        if count != len(node.output):
            raise OnnxImportError(f"num_outputs={count} but the node "
                                  f"has {len(node.output)} outputs")
        step = -(-extent // count)
        sizes = [min(step, extent - k * step) for k in range(count)]
    else:
        if extent % count:
            raise OnnxImportError(f"extent {extent} does not split into "
                                  f"{count} equal pieces; give the split sizes")
        sizes = [extent // count] * count
    if len(sizes) != len(node.output) or sum(sizes) != extent or min(sizes) < 0:
        raise OnnxImportError(f"sizes {sizes} do not split extent "
                              f"{extent} into {len(node.output)} outputs")
    return sizes


def _split_static(im, node, a):
    x = _s(im, node)
    axis = int(a.get("axis", 0)) % x.ndim
    bounds = np.cumsum(_split_sizes(im, node, a, x.shape[axis]))[:-1]
    return np.split(x, bounds, axis=axis)


@register_converter("Split", static=_split_static)
def _split(im, node, a):
    x = im.tensor(node.input[0])
    axis = int(a.get("axis", 0)) % x.ndim
    outs, start = [], 0
    for k, size in enumerate(_split_sizes(im, node, a, x.shape[axis])):
        if size == 0:
            # an empty piece (function bodies split off an empty remainder): a constant of
            # no elements, which a concatenation leaves out; anything else refuses it
            shape = x.shape[:axis] + (0,) + x.shape[axis + 1:]
            outs.append(Constant(np.zeros(shape), node.output[k], dtype=x.dtype))
        else:
            outs.append(GT.strided_slice(x, [start], [start + size], [1], [axis]))
        start += size
    return outs


# -- slices and pads -------------------------------------------------------------------------


def _slice_args(im, node, a):
    """``(starts, ends, axes, steps)`` of a Slice node (attributes before opset 10, inputs
    known at import time after)."""
    if im.opset < 10:
        starts, ends = _ints(a["starts"]), _ints(a["ends"])
        axes = _ints(a.get("axes", range(len(starts))))
        return starts, ends, axes, [1] * len(starts)
    starts = _ints(_const_input(im, node, 1, "starts"))
    ends = _ints(_const_input(im, node, 2, "ends"))
    axes = (_ints(_const_input(im, node, 3, "axes")) if _has(node, 3)
            else list(range(len(starts))))
    steps = _ints(_const_input(im, node, 4, "steps")) if _has(node, 4) else [1] * len(starts)
    return starts, ends, axes, steps


def _slice_static(im, node, a):
    x = _s(im, node)
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(*_slice_args(im, node, a)):
        index[ax % x.ndim] = slice(s, e, st)
    return [x[tuple(index)]]


@register_converter("Slice", static=_slice_static)
def _slice(im, node, a):
    """A slice clamps its bounds as numpy does; a negative step becomes the positive slice of
    the same elements read backwards."""
    x = im.tensor(node.input[0])
    begin, end, strides, axes, flip = [], [], [], [], []
    for s, e, ax, st in zip(*_slice_args(im, node, a)):
        if st == 0:
            raise OnnxImportError("a step is 0")
        if not -x.ndim <= ax < x.ndim:
            raise OnnxImportError(f"axis {ax} is out of range for "
                                  f"{list(x.shape)}")
        ax %= x.ndim
        start, stop, step = slice(s, e, st).indices(x.shape[ax])
        count = len(range(start, stop, step))
        if count == 0:
            # nothing selected: an empty tensor, which needs no computing
            shape = list(x.shape)
            shape[ax] = 0
            return Constant(np.zeros(shape, dt.to_numpy(x.dtype)), node.output[0], x.dtype)
        if step < 0:
            start, step = start + step * (count - 1), -step
            flip.append(ax)
        begin.append(start)
        end.append(start + step * (count - 1) + 1)
        strides.append(step)
        axes.append(ax)
    whole = all(b == 0 and st == 1 and e == x.shape[ax]
                for b, e, st, ax in zip(begin, end, strides, axes))
    y = x if whole else GT.strided_slice(x, begin, end, strides, axes)
    return GT.reverse(y, flip) if flip else y


def _pad_args(im, node, a, ndim: int):
    """``(mode, [(before, after)] per dimension, value)``; widths may be negative."""
    mode = _text(a.get("mode"), "constant")
    if im.opset < 11:
        pads, value = _ints(a["pads"]), float(a.get("value", 0.0))
    else:
        pads = _ints(_const_input(im, node, 1, "pads"))
        value = (_const_input(im, node, 2, "constant value").reshape(-1)[0].item()
                 if _has(node, 2) else 0)
        if _has(node, 3):
            axes = [int(v) % ndim for v in _const_input(im, node, 3, "axes").reshape(-1)]
            full = [0] * (2 * ndim)
            for k, ax in enumerate(axes):
                full[ax], full[ax + ndim] = pads[k], pads[k + len(axes)]
            pads = full
    if len(pads) != 2 * ndim:
        raise OnnxImportError(f"{len(pads)} pads for a {ndim}-D input "
                              f"(two per dimension)")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise OnnxImportError(f"mode {mode!r} is unknown; modes: constant, "
                              "reflect, edge, wrap")
    return mode, [(pads[d], pads[d + ndim]) for d in range(ndim)], value


def _pad_static(im, node, a):
    x = _s(im, node)
    mode, width, value = _pad_args(im, node, a, x.ndim)
    crop = tuple(slice(max(-b, 0), x.shape[d] - max(-e, 0)) for d, (b, e) in enumerate(width))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in width]
    if mode == "constant":
        return [np.pad(x, width, constant_values=np.asarray(value).astype(x.dtype))]
    return [np.pad(x, width, mode=mode)]


@register_converter("Pad", static=_pad_static)
def _pad(im, node, a):
    x = im.tensor(node.input[0])
    mode, width, value = _pad_args(im, node, a, x.ndim)
    if any(b < 0 or e < 0 for b, e in width):
        # negative widths crop first
        begin = [max(-b, 0) for b, _ in width]
        end = [s - max(-e, 0) for s, (_, e) in zip(x.shape, width)]
        if any(e <= b for b, e in zip(begin, end)):
            raise OnnxImportError(f"pads {width} crop {list(x.shape)} to "
                                  "nothing; empty tensors are not supported")
        x = GT.strided_slice(x, begin, end)
        width = [(max(b, 0), max(e, 0)) for b, e in width]
    if not any(b or e for b, e in width):
        return x
    if mode == "constant":
        return GT.pad(x, width, value)
    return GT.border_pad(x, width, mode)


# -- dropout ---------------------------------------------------------------------------------


@register_converter("Dropout", static=lambda im, node, a: [_s(im, node), np.ones(
    _s(im, node).shape, bool)][:len(node.output)])
def _dropout(im, node, a):
    """Dropout in inference: the data unchanged and, when asked for, a mask of all true.
    A model that asks for training (``training_mode`` true with a ratio above 0) is
    refused: its output is random."""
    if _has(node, 2) and bool(_const_input(im, node, 2, "training_mode").reshape(())):
        ratio = float(_const_input(im, node, 1, "ratio").reshape(())) if _has(node, 1) else 0.5
        if ratio > 0:
            raise OnnxImportError(f"training_mode is true with ratio "
                                  f"{ratio}; only inference (no dropout) is supported")
    x = im.tensor(node.input[0])
    outs: list[Node] = [x]
    if len(node.output) > 1 and node.output[1]:
        outs.append(Constant(np.ones(x.shape, bool), f"{node.output[1]}"))
    return outs


from . import linear_ops as _linear_ops  # noqa: E402,F401  (MatMul, Gemm, Einsum)
from . import loss_ops as _loss_ops  # noqa: E402,F401  (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss)
from . import rotary_ops as _rotary_ops  # noqa: E402,F401  (RotaryEmbedding)
