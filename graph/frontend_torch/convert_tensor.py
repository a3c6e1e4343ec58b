"""Converters of views, copies, data movement and tensors made while importing."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ..ir import Constant
from .helpers import broadcast_to, operand, reshape
from .registry import converter

# -- shapes, views and copies -------------------------------------------------------------


@converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
           needs="reshape")
def _view(cx, a):
    return reshape(cx, a.self, cx.out_shape())


@converter("aten.alias.default", "aten.clone.default", "aten.lift_fresh_copy.default",
           "aten.detach.default", maps_to="its input (no op)")
def _identity(cx, a):
    return a.self


@converter("aten.copy.default", needs=("cast", "multiply"),
           maps_to="src cast and broadcast to self's shape")
def _copy(cx, a):
    return broadcast_to(cx, operand(cx, a.src, a.self.dtype), a.self.shape)


@converter("aten._to_copy.default", needs="cast", maps_to="cast (the device is ignored)")
def _to_copy(cx, a):
    return operand(cx, a.self, cx.out_dtype())


@converter("aten.permute.default", needs="transpose")
def _permute(cx, a):
    axes = [d % max(a.self.ndim, 1) for d in a.dims]
    if axes == list(range(a.self.ndim)):
        return a.self
    return cx.call("transpose", [a.self], {"axes": axes})


@converter("aten.t.default", needs="transpose")
def _t(cx, a):
    return a.self if a.self.ndim < 2 else cx.call("transpose", [a.self], {"axes": [1, 0]})


@converter("aten.unsqueeze.default", needs="reshape", maps_to="reshape")
def _unsqueeze(cx, a):
    return reshape(cx, a.self, cx.out_shape())


@converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", needs="reshape",
           maps_to="reshape")
def _squeeze(cx, a):
    return reshape(cx, a.self, cx.out_shape())


@converter("aten.expand.default", needs=("multiply", "cast", "reshape"),
           maps_to="multiply by ones of the broadcast extents")
def _expand(cx, a):
    return broadcast_to(cx, a.self, cx.out_shape())


@converter("aten.slice.Tensor", needs="strided_slice")
def _slice(cx, a):
    x = a.self
    dim = a.dim % x.ndim
    size = x.shape[dim]
    start = 0 if a.start is None else a.start
    end = size if a.end is None else a.end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    if a.step < 1:
        cx.fail(f"step must be positive, got {a.step}")
    if (start, end, a.step) == (0, size, 1):
        return x
    return cx.call("strided_slice", [x], {"begin": [start], "end": [end], "strides": [a.step],
                                          "axes": [dim]})


@converter("aten.select.int", needs=("strided_slice", "reshape"))
def _select(cx, a):
    x = a.self
    dim = a.dim % x.ndim
    index = a.index + x.shape[dim] if a.index < 0 else a.index
    if not 0 <= index < x.shape[dim]:
        cx.fail(f"index {a.index} is out of range for dimension {dim} of size {x.shape[dim]}")
    part = cx.call("strided_slice", [x], {"begin": [index], "end": [index + 1], "axes": [dim]})
    return reshape(cx, part, cx.out_shape())


@converter("aten.cat.default", needs=("concatenate", "cast"))
def _cat(cx, a):
    dtype = cx.out_dtype()
    parts = [operand(cx, t, dtype) for t in a.tensors if t.ndim != 1 or t.shape[0] != 0]
    if len(parts) == 1:
        return parts[0]
    return cx.call("concatenate", parts, {"axis": a.dim % parts[0].ndim})


@converter("aten.split_with_sizes.default", "aten.split.Tensor", needs="strided_slice")
def _split(cx, a):
    x = a.self
    dim = a.dim % x.ndim
    sizes = getattr(a, "split_sizes", None)
    if sizes is None:
        step = a.split_size
        sizes = [min(step, x.shape[dim] - k) for k in range(0, x.shape[dim], step)]
    outs, start = [], 0
    for s in sizes:
        outs.append(cx.call("strided_slice", [x], {"begin": [start], "end": [start + s],
                                                   "axes": [dim]}))
        start += s
    return tuple(outs)


@converter("aten.repeat.default", needs=("concatenate", "reshape"),
           maps_to="concatenate of copies along each repeated axis")
def _repeat(cx, a):
    x = a.self
    reps = list(a.repeats)
    if len(reps) > x.ndim:
        x = reshape(cx, x, (1,) * (len(reps) - x.ndim) + tuple(x.shape))
    for d, r in enumerate(reps):
        if r > 1:
            x = cx.call("concatenate", [x] * r, {"axis": d})
        elif r == 0:
            cx.fail("repeats of 0 make an empty tensor, which is not supported")
    return x


@converter("aten.flip.default", needs="reverse")
def _flip(cx, a):
    x = a.self
    axes = tuple(sorted({d % x.ndim for d in a.dims}))
    return cx.call("reverse", [x], {"axis": axes}) if axes else x


@converter("aten.constant_pad_nd.default", needs=("nn.pad", "strided_slice"),
           maps_to="nn.pad (negative widths: strided_slice)")
def _constant_pad(cx, a):
    x = a.self
    pad = list(a.pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        cx.fail(f"pad {pad} must hold (before, after) pairs for at most {x.ndim} dimensions")
    width = [[0, 0] for _ in range(x.ndim)]
    for k in range(len(pad) // 2):
        width[x.ndim - 1 - k] = [pad[2 * k], pad[2 * k + 1]]
    crop = any(b < 0 or e < 0 for b, e in width)
    if crop:
        x = cx.call("strided_slice", [x], {
            "begin": [max(0, -b) for b, _ in width],
            "end": [s - max(0, -e) for s, (_, e) in zip(x.shape, width)],
            "axes": list(range(x.ndim))})
        width = [[max(0, b), max(0, e)] for b, e in width]
    if not any(b or e for b, e in width):
        return x
    return cx.call("nn.pad", [x], {"pad_width": width, "pad_value": float(a.value)})


def _reflect_pad(kind: str, ndim: int):
    def fn(cx, a):
        x = a.self
        pad = list(a.padding)
        width = [[0, 0] for _ in range(x.ndim)]
        for k in range(ndim):
            width[x.ndim - 1 - k] = [pad[2 * k], pad[2 * k + 1]]
        return cx.call("nn.border_pad", [x], {"pad_width": width, "mode": kind})
    return fn


for _n in (1, 2, 3):
    converter(f"aten.reflection_pad{_n}d.default", needs="nn.border_pad",
              maps_to="nn.border_pad, mode reflect")(
        _reflect_pad("reflect", _n))
for _n in (2, 3):
    converter(f"aten.replication_pad{_n}d.default", needs="nn.border_pad",
              maps_to="nn.border_pad, mode edge")(
        _reflect_pad("edge", _n))


# -- indexing -----------------------------------------------------------------------------

@converter("aten.embedding.default", needs="take", maps_to="take along axis 0")
def _embedding(cx, a):
    return cx.call("take", [a.weight, a.indices], {"axis": 0})


@converter("aten.index_select.default", needs="take")
def _index_select(cx, a):
    return cx.call("take", [a.self, a.index], {"axis": a.dim % a.self.ndim})


@converter("aten.gather.default", needs="gather_elements")
def _gather(cx, a):
    return cx.call("gather_elements", [a.self, a.index], {"axis": a.dim % a.self.ndim})


@converter("aten.index.Tensor", needs=("take", "gather_nd", "transpose", "reshape", "cast",
                                      "broadcast_to", "concatenate"),
           maps_to="take (one index tensor) or gather_nd over the indexed axes (index "
                   "tensors broadcast together, None for whole axes)",
           note="integer index tensors; bool masks known while importing")
def _index(cx, a):
    x = a.self
    picked = []
    dim = 0
    for t in a.indices:
        if t is None:
            dim += 1
        elif t.dtype == "bool":
            # a k-dimensional mask indexes k axes by the positions of its true entries: known
            # only for a constant mask (else the result's size depends on the data)
            if not isinstance(t, Constant):
                cx.fail("indexing by a boolean mask computed at run time has a data-dependent "
                        "shape, which is not supported (index with integer positions, or use "
                        "torch.where to keep the shape)")
            if tuple(t.shape) != tuple(x.shape[dim:dim + t.ndim]):
                cx.fail(f"the boolean mask of shape {list(t.shape)} does not match the indexed "
                        f"dimensions {list(x.shape[dim:dim + t.ndim])}")
            for positions in np.nonzero(t.value):
                picked.append((dim, cx.const(positions.astype(np.int64), "int64")))
                dim += 1
        else:
            picked.append((dim, t))
            dim += 1
    if len(picked) == 1:
        d, idx = picked[0]
        return cx.call("take", [x, idx], {"axis": d})
    dims = [d for d, _ in picked]
    rest = [d for d in range(x.ndim) if d not in dims]
    moved = x if dims == list(range(len(dims))) else \
        cx.call("transpose", [x], {"axes": dims + rest})
    shape = tuple(np.broadcast_shapes(*[tuple(t.shape) for _, t in picked]))
    parts = [reshape(cx, broadcast_to(cx, operand(cx, t, "int64"), shape), shape + (1,))
             for _, t in picked]
    index = cx.call("concatenate", parts, {"axis": len(shape)})
    out = cx.call("gather_nd", [moved, index])
    # adjacent indexed axes keep their place in the result; separated ones go first (numpy)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        nb, lead = len(shape), dims[0]
        order = list(range(nb, nb + lead)) + list(range(nb)) + list(range(nb + lead, out.ndim))
        out = cx.call("transpose", [out], {"axes": order})
    return out


@converter("aten.cumsum.default", needs=("cumsum", "cast"))
def _cumsum(cx, a):
    return cx.call("cumsum", [operand(cx, a.self, cx.out_dtype())], {"axis": a.dim % a.self.ndim})


@converter("aten.topk.default", needs=("topk_indices", "gather_elements"),
           maps_to="topk_indices, values by gather_elements")
def _topk(cx, a):
    axis = a.dim % a.self.ndim
    idx = cx.call("topk_indices", [a.self], {"k": a.k, "axis": axis, "largest": a.largest})
    return cx.call("gather_elements", [a.self, idx], {"axis": axis}), idx


@converter("aten.sort.default", needs=("topk_indices", "gather_elements"),
           maps_to="topk_indices of every element, values by gather_elements")
def _sort(cx, a):
    axis = a.dim % a.self.ndim
    idx = cx.call("topk_indices", [a.self], {"k": a.self.shape[axis], "axis": axis,
                                             "largest": bool(a.descending)})
    return cx.call("gather_elements", [a.self, idx], {"axis": axis}), idx


def _slice_scatter_into(cx, base, src, dim, start, step):
    index = np.arange(src.shape[dim], dtype=np.int64) * step + start
    shape = [1] * src.ndim
    shape[dim] = src.shape[dim]
    index = np.broadcast_to(index.reshape(shape), src.shape)
    return cx.call("scatter_elements", [base, cx.const(index, "int64"), src], {"axis": dim})


@converter("aten.slice_scatter.default", needs="scatter_elements",
           maps_to="scatter_elements with constant indices")
def _slice_scatter(cx, a):
    x = a.self
    dim = a.dim % x.ndim
    size = x.shape[dim]
    start = 0 if a.start is None else (a.start + size if a.start < 0 else a.start)
    return _slice_scatter_into(cx, x, operand(cx, a.src, x.dtype), dim, start, a.step)


@converter("aten.select_scatter.default", needs=("scatter_elements", "reshape"),
           maps_to="scatter_elements with constant indices")
def _select_scatter(cx, a):
    x = a.self
    dim = a.dim % x.ndim
    index = a.index + x.shape[dim] if a.index < 0 else a.index
    src = reshape(cx, operand(cx, a.src, x.dtype),
                  tuple(x.shape[:dim]) + (1,) + tuple(x.shape[dim + 1:]))
    return _slice_scatter_into(cx, x, src, dim, index, 1)


@converter("aten.scatter_reduce.two", needs="scatter_elements",
           note="include_self=True; sum, prod, amax, amin")
def _scatter_reduce(cx, a):
    kinds = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}
    if a.reduce not in kinds:
        cx.fail(f"reduce={a.reduce!r} is not supported; supported: {sorted(kinds)}")
    if not a.include_self:
        cx.fail("include_self=False is not supported")
    return cx.call("scatter_elements", [a.self, a.index, a.src],
                   {"axis": a.dim % a.self.ndim, "reduction": kinds[a.reduce]})


@converter("aten.diagonal.default", needs=("transpose", "reshape", "take"),
           maps_to="take of the diagonal's flat positions")
def _diagonal(cx, a):
    x = a.self
    d1, d2 = a.dim1 % x.ndim, a.dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    moved = cx.call("transpose", [x], {"axes": rest + [d1, d2]})
    n1, n2 = x.shape[d1], x.shape[d2]
    flat = reshape(cx, moved, tuple(x.shape[d] for d in rest) + (n1 * n2,))
    rows = np.arange(max(0, -a.offset), min(n1, n2 - a.offset)) if n2 - a.offset > 0 else \
        np.arange(0)
    if rows.size == 0:
        cx.fail("the diagonal is empty, which is not supported")
    return cx.call("take", [flat, cx.const(rows * n2 + rows + a.offset, "int64")],
                   {"axis": len(rest)})


@converter("aten.scatter.src", "aten.scatter.value", needs="scatter_elements")
def _scatter(cx, a):
    src = a.src if hasattr(a, "src") and a.src is not None else operand(
        cx, a.value, a.self.dtype)
    return cx.call("scatter_elements", [a.self, a.index, src], {"axis": a.dim % a.self.ndim})


@converter("aten.scatter_add.default", needs="scatter_elements")
def _scatter_add(cx, a):
    return cx.call("scatter_elements", [a.self, a.index, a.src],
                   {"axis": a.dim % a.self.ndim, "reduction": "add"})


# -- tensors made while importing ---------------------------------------------------------

def _np_dtype(cx) -> str:
    return cx.out_dtype()


@converter("aten.arange.start_step", "aten.arange.default", "aten.arange.start",
           maps_to="a constant")
def _arange(cx, a):
    start = getattr(a, "start", 0)
    step = getattr(a, "step", 1)
    dtype = _np_dtype(cx)
    values = np.arange(start, a.end, step)
    return cx.const(values[:cx.out_shape()[0]], dtype)


def _filled(cx, value):
    shape = cx.out_shape()
    dtype = _np_dtype(cx)
    return cx.const(np.full(shape, value, dtype=np.float64 if dt.is_float(dtype) else
                            np.int64 if dtype != "bool" else np.bool_), dtype)


@converter("aten.full.default", "aten.full_like.default", maps_to="a constant")
def _full(cx, a):
    return _filled(cx, a.fill_value)


@converter("aten.scalar_tensor.default", maps_to="a constant")
def _scalar_tensor(cx, a):
    return _filled(cx, a.s)


@converter("aten.zeros.default", "aten.zeros_like.default", "aten.empty.memory_format",
           "aten.empty_strided.default", "aten.empty_like.default",
           maps_to="a constant of zeros (an empty tensor's contents are undefined)")
def _zeros(cx, a):
    return _filled(cx, 0)


@converter("aten.ones.default", "aten.ones_like.default", maps_to="a constant")
def _ones(cx, a):
    return _filled(cx, 1)


@converter("aten.fill.Scalar", maps_to="a constant")
def _fill(cx, a):
    return _filled(cx, a.value)


@converter("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default", maps_to="nothing (a check)")
def _check_only(cx, a):
    return None


@converter("aten.sym_size.int", maps_to="an import-time int")
def _sym_size(cx, a):
    return int(a.self.shape[a.dim])


@converter("aten.sym_numel.default", maps_to="an import-time int")
def _sym_numel(cx, a):
    return int(np.prod(a.self.shape, dtype=np.int64))


@converter("aten.sym_stride.int", maps_to="an import-time int (contiguous strides)")
def _sym_stride(cx, a):
    return int(np.prod(a.self.shape[a.dim % a.self.ndim + 1:], dtype=np.int64))


@converter("aten.sym_storage_offset.default", maps_to="an import-time int (0)")
def _sym_offset(cx, a):
    return 0


@converter("aten.native_dropout.default", maps_to="its input and a mask of ones (inference)",
           note="train=False only")
def _dropout(cx, a):
    if a.train:
        cx.fail("dropout in training mode is random; put the module in eval mode")
    return (a.input, cx.const(np.ones(a.input.shape, dtype=np.bool_), "bool"))


@converter("aten.dropout.default", maps_to="its input (inference)")
def _dropout_plain(cx, a):
    if a.train:
        cx.fail("dropout in training mode is random; put the module in eval mode")
    return a.input
