"""ONNX ``MaxUnpool``, ``Col2Im``, ``RoiAlign``, ``DeformConv``, ``TensorScatter`` and
``NonMaxSuppression``; all but the last written with the graph's gathers, scatters,
reductions, products and element-wise operators (``TensorScatter``, a KV cache update: each
cache row gathers the update row written to it, if any; ``DeformConv``: bilinear samples at
the offset tap positions, then a batched product per group).

- ``MaxUnpool``: each value of ``X`` written at its flat index in the unpooled tensor
  (``scatter_elements`` over the flattened output; on duplicates the last one wins, as in
  ONNX's reference), then placed in the corner of ``output_shape`` when one is given.
  The scatter compares every index with every output element: work of ``X``'s size times
  the output's, meant for the small unpools of model graphs.
- ``Col2Im``: each image element sums, over the block's positions, the column element
  whose sliding block covers it there. Which column that is depends only on the static
  shapes, so the importer computes it (an index and a mask per block position and image
  element) and the graph gathers, masks and sums over the block.
- ``RoiAlign``: the sample points of every region and bin (ONNX's rules: samples outside
  ``[-1, size]`` count as zero, coordinates clamped at 0 and at the last pixel) computed
  from the regions at run time, four bilinear taps gathered per sample, then averaged or
  (``mode="max"``) the largest weighted tap over the bin's samples. An adaptive
  ``sampling_ratio`` (0) makes the number of samples depend on the regions' sizes: the
  regions must then be known at import (``from_onnx(constants=)``).
- ``NonMaxSuppression``: its output has one row per selected box, a number that depends on
  the boxes' and scores' values. Shapes here are static, so the selection is made at
  import, from boxes, scores and thresholds known then (constants, or values given with
  ``from_onnx(constants=)``); otherwise an ``OnnxDataDependentError`` names the graph
  inputs they come from. A run-time NMS would carry a fixed upper bound of rows
  (``batches * classes * max_output_boxes_per_class``) and a count, which no kernel here
  computes yet (greedy suppression is serial per class).
"""

from __future__ import annotations

import numpy as np

from .. import onnx_static
from .. import opdefs as G
from ..frontend_onnx import register_converter
from ..ir import Call, Constant, Node
from ..opdefs import index as GI
from ..opdefs import logic as GL
from ..opdefs import transform as GT
from ..opdefs.arith import binary, unary
from ..opdefs.mapping import FLOATS
from ..opdefs.reduce import reduce as reduction
from .common import has_input as _has
from .common import refuse as _refuse
from .common import text_attr as _text
from .sampling_ops import FloatArith


def _const(value, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype), "", dtype)


# -- MaxUnpool ---------------------------------------------------------------------------------


@register_converter("MaxUnpool")
def _max_unpool(im, node, a):
    x, idx = im.tensor(node.input[0]), im.tensor(node.input[1])
    k = x.ndim - 2
    kernel = [int(v) for v in a.get("kernel_shape", ())]
    if k < 1 or len(kernel) != k:
        _refuse(node, f"X must be [N, C, *spatial] with one kernel size per spatial axis, "
                      f"got X {list(x.shape)} and kernel_shape {kernel}")
    if tuple(idx.shape) != tuple(x.shape) or idx.dtype != "int64":
        _refuse(node, f"I must be int64 of X's shape {list(x.shape)}, got {idx.dtype} "
                      f"{list(idx.shape)}")
    strides = [int(v) for v in a.get("strides", [1] * k)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * k)]
    inferred = list(x.shape[:2]) + [
        (x.shape[2 + d] - 1) * strides[d] - (pads[d] + pads[k + d]) + kernel[d]
        for d in range(k)]
    shape = inferred
    if _has(node, 2):
        shape = [int(v) for v in im.value(node.input[2], "MaxUnpool's output_shape")]
        if len(shape) != x.ndim or any(s < i for s, i in zip(shape, inferred)):
            _refuse(node, f"output_shape {shape} must have X's rank and hold the unpooled "
                          f"shape {inferred}")
    if any(s <= 0 for s in inferred):
        _refuse(node, f"the unpooled shape {inferred} is empty; empty tensors are not "
                      "supported")
    total = int(np.prod(inferred, dtype=np.int64))
    count = int(np.prod(x.shape, dtype=np.int64))
    zeros = _const(np.zeros(total), x.dtype)
    flat = GI.scatter_elements(zeros, G.reshape(idx, (count,)), G.reshape(x, (count,)), 0)
    y = G.reshape(flat, inferred)
    if shape != inferred:
        y = G.pad(y, [(0, s - i) for s, i in zip(shape, inferred)], 0.0)
    return y


# -- Col2Im ------------------------------------------------------------------------------------


def col2im_gather(image, block, dilations, pads, strides) -> tuple[np.ndarray, np.ndarray]:
    """``(index, valid)``, both ``[prod(block), prod(image)]``: for block position ``b`` and
    image element ``p``, the sliding block ``l`` whose position ``b`` lands on ``p`` (0
    where none does) and whether one does."""
    k = len(image)
    counts = []
    for d in range(k):
        span = dilations[d] * (block[d] - 1) + 1
        n = (image[d] + pads[d] + pads[k + d] - span) // strides[d] + 1
        if n < 1:
            raise ValueError(f"the block {block} with dilations {dilations} does not fit the "
                             f"padded image along axis {d}")
        counts.append(n)
    bpos = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"),
                    -1).reshape(-1, k)
    ppos = np.stack(np.meshgrid(*[np.arange(s) for s in image], indexing="ij"),
                    -1).reshape(-1, k)
    index = np.zeros((len(bpos), len(ppos)), dtype=np.int64)
    valid = np.ones((len(bpos), len(ppos)), dtype=bool)
    for d in range(k):
        # the padded coordinate minus the block offset must be a stride multiple in range
        start = ppos[None, :, d] + pads[d] - bpos[:, None, d] * dilations[d]
        step, rest = np.divmod(start, strides[d])
        valid &= (rest == 0) & (step >= 0) & (step < counts[d])
        index = index * counts[d] + np.clip(step, 0, counts[d] - 1)
    return np.where(valid, index, 0), valid


@register_converter("Col2Im")
def _col2im(im, node, a):
    x = im.tensor(node.input[0])
    image = [int(v) for v in im.value(node.input[1], "Col2Im's image_shape")]
    block = [int(v) for v in im.value(node.input[2], "Col2Im's block_shape")]
    k = len(image)
    if len(block) != k or k < 1 or x.ndim != 3:
        _refuse(node, f"input must be [N, C * prod(block_shape), L] with image_shape and "
                      f"block_shape of one length, got {list(x.shape)}, {image}, {block}")
    if min(image + block) < 1:
        _refuse(node, f"image_shape {image} and block_shape {block} must be positive")
    dilations = [int(v) for v in a.get("dilations", [1] * k)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * k)]
    strides = [int(v) for v in a.get("strides", [1] * k)]
    nb = int(np.prod(block))
    n, cb, length = x.shape
    if cb % nb:
        _refuse(node, f"input's dimension 1 ({cb}) is not a multiple of the block's "
                      f"{nb} elements")
    try:
        index, valid = col2im_gather(image, block, dilations, pads, strides)
    except ValueError as e:
        _refuse(node, str(e))
    blocks = int(index.max(initial=0)) + 1
    if length != int(np.prod([
            (image[d] + pads[d] + pads[k + d] - dilations[d] * (block[d] - 1) - 1)
            // strides[d] + 1 for d in range(k)])) or blocks > length:
        _refuse(node, f"input has {length} blocks, but the padded image {image} holds a "
                      "different number of sliding blocks")
    c = cb // nb
    points = index.shape[1]
    cols = G.reshape(x, (n, c, nb, length))
    where = GT.broadcast_to(Constant(index.reshape(1, 1, nb, points), "", "int64"),
                            (n, c, nb, points))
    taps = GI.gather_elements(cols, where, 3)
    taps = GL.where(Constant(valid.reshape(1, 1, nb, points), "", "bool"), taps,
                    _const(0.0, x.dtype))
    return G.reshape(reduction("sum", taps, (2,), False), [n, c] + image)


# -- RoiAlign ----------------------------------------------------------------------------------


def _axis_taps(f: FloatArith, coord: Node, size: int):
    """ONNX's bilinear rule along one axis of ``size`` pixels: ``(low, high, w_low,
    w_high, inside)`` for sample coordinates ``coord``."""
    inside = Call("logical_and", [f.cmp("greater_equal", coord, f.k(-1.0)),
                                  f.cmp("less_equal", coord, f.k(float(size)))])
    v = binary("maximum", coord, f.k(0.0))
    low = unary("floor", v)
    at_end = f.cmp("greater_equal", low, f.k(float(size - 1)))
    last = f.k(float(size - 1))
    low = GL.where(at_end, last, low)
    high = GL.where(at_end, last, f.add(low, f.k(1.0)))
    frac = GL.where(at_end, f.k(0.0), f.sub(v, low))
    return low, high, f.sub(f.k(1.0), frac), frac, inside


def _grid(im, node, sampling: int, out: int, start: int, scale: float, offset: float,
          half_pixel: bool) -> np.ndarray | None:
    """Samples per bin along one axis for each region: None when ``sampling`` fixes them,
    else (adaptive) computed from the regions, which must be known at import."""
    if sampling > 0:
        return None
    r = np.asarray(im.value(node.input[1], "the regions of a RoiAlign with sampling_ratio=0 "
                                           "(its samples per bin follow their sizes; or give "
                                           "sampling_ratio > 0)"), dtype=np.float32)
    lo = r[:, start] * np.float32(scale) - np.float32(offset)
    hi = r[:, start + 2] * np.float32(scale) - np.float32(offset)
    size = hi - lo
    if not half_pixel:
        size = np.maximum(size, np.float32(1.0))
    return np.ceil(size / np.float32(out)).astype(np.int64)


@register_converter("RoiAlign")
def _roi_align(im, node, a):
    x, rois, batch = (im.tensor(i) for i in node.input[:3])
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch.ndim != 1 \
            or batch.shape[0] != rois.shape[0]:
        _refuse(node, f"X must be [N, C, H, W], rois [R, 4] and batch_indices [R], got "
                      f"{list(x.shape)}, {list(rois.shape)}, {list(batch.shape)}")
    if x.dtype not in FLOATS or rois.dtype not in FLOATS:
        _refuse(node, f"X and rois must be floats, got {x.dtype} and {rois.dtype}")
    mode = _text(a.get("mode"), "avg")
    default_ctm = "half_pixel" if im.opset >= 16 else "output_half_pixel"
    ctm = _text(a.get("coordinate_transformation_mode"), default_ctm)
    if mode not in ("avg", "max") or ctm not in ("half_pixel", "output_half_pixel"):
        _refuse(node, f"mode {mode!r} / coordinate_transformation_mode {ctm!r}: supported "
                      "avg, max / half_pixel, output_half_pixel")
    oh, ow = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    sampling = int(a.get("sampling_ratio", 0))
    scale = float(a.get("spatial_scale", 1.0))
    half_pixel = ctm == "half_pixel"
    offset = 0.5 if half_pixel else 0.0
    n, c, h, w = x.shape
    r = rois.shape[0]
    f = FloatArith("float32")
    grid_y = _grid(im, node, sampling, oh, 1, scale, offset, half_pixel)
    grid_x = _grid(im, node, sampling, ow, 0, scale, offset, half_pixel)
    gh = sampling if grid_y is None else max(int(grid_y.max(initial=0)), 1)
    gw = sampling if grid_x is None else max(int(grid_x.max(initial=0)), 1)

    boxes = rois if rois.dtype == "float32" else G.cast(rois, "float32")

    def column(j):
        col = Call("strided_slice", [boxes], {"begin": [j], "end": [j + 1], "axes": [1]})
        return f.sub(f.mul(col, f.k(scale)), f.k(offset))  # [R, 1]

    def samples(lo, hi, out, g, grid):
        """Sample coordinates [R, out, g] along one axis, and a mask of real samples (None:
        all are) and the per-region sample count (a [R, 1, 1] node or an int)."""
        size = f.sub(hi, lo)
        if not half_pixel:
            size = binary("maximum", size, f.k(1.0))
        bin_size = f.div(size, f.k(float(out)))
        per = f.k(float(g)) if grid is None else Constant(
            np.maximum(grid, 1).astype(np.float32).reshape(r, 1, 1), "", "float32")
        pos = np.arange(out, dtype=np.float32).reshape(1, out, 1)
        step = np.arange(g, dtype=np.float32).reshape(1, 1, g) + np.float32(0.5)
        b3 = G.reshape(bin_size, (r, 1, 1))
        coord = f.add(f.add(G.reshape(lo, (r, 1, 1)), f.mul(Constant(pos, "", "float32"), b3)),
                      f.div(f.mul(Constant(step, "", "float32"), b3), per))
        mask = None
        if grid is not None and (grid < g).any():
            mask = Constant(np.arange(g)[None, :] < grid[:, None], "", "bool")  # [R, g]
            mask = G.reshape(mask, (r, 1, g))
        return coord, mask

    ys, ymask = samples(column(1), column(3), oh, gh, grid_y)
    xs, xmask = samples(column(0), column(2), ow, gw, grid_x)
    ylo, yhi, wy_lo, wy_hi, yin = _axis_taps(f, ys, h)
    xlo, xhi, wx_lo, wx_hi, xin = _axis_taps(f, xs, w)

    # samples laid out [R, oh, ow, gh, gw]
    def as_y(t):
        return G.reshape(t, (r, oh, 1, gh, 1))

    def as_x(t):
        return G.reshape(t, (r, 1, ow, 1, gw))

    inside = Call("logical_and", [as_y(yin), as_x(xin)])
    points = oh * ow * gh * gw
    data = G.reshape(x if x.dtype == "float32" else G.cast(x, "float32"), (n, c, h * w))
    data = GI.take(data, batch, 0)  # [R, C, H * W]
    zero = f.k(0.0)
    terms = []
    for yy, wy in ((ylo, wy_lo), (yhi, wy_hi)):
        for xx, wx in ((xlo, wx_lo), (xhi, wx_hi)):
            pos = f.add(f.mul(as_y(yy), f.k(float(w))), as_x(xx))
            pos = GL.where(inside, pos, zero)
            weight = GL.where(inside, f.mul(as_y(wy), as_x(wx)), zero)
            index = GT.broadcast_to(G.reshape(G.cast(pos, "int64"), (r, 1, points)),
                                    (r, c, points))
            value = GI.gather_elements(data, index, 2)
            terms.append(f.mul(value, G.reshape(weight, (r, 1, points))))
    if mode == "avg":
        sample = f.add(f.add(f.add(terms[0], terms[1]), terms[2]), terms[3])
    else:
        sample = binary("maximum", binary("maximum", binary("maximum", terms[0], terms[1]),
                                          terms[2]), terms[3])
    sample = G.reshape(sample, (r, c, oh, ow, gh, gw))
    real = None
    for m, shape in ((ymask, (r, 1, 1, 1, gh, 1)), (xmask, (r, 1, 1, 1, 1, gw))):
        if m is not None:
            m = G.reshape(m, shape)
            real = m if real is None else Call("logical_and", [real, m])
    if mode == "avg":
        if real is not None:
            sample = GL.where(real, sample, zero)
        total = reduction("sum", G.reshape(sample, (r, c, oh, ow, gh * gw)), (4,), False)
        if grid_y is None and grid_x is None:
            y = f.div(total, f.k(float(gh * gw)))
        else:
            # each region's own sample count; one of zero size has none, and ONNX divides
            # by at least 1
            cy = grid_y if grid_y is not None else np.full(r, gh)
            cx = grid_x if grid_x is not None else np.full(r, gw)
            counts = np.maximum(cy * cx, 1).astype(np.float32).reshape(r, 1, 1, 1)
            y = f.div(total, Constant(counts, "", "float32"))
    else:
        if real is not None:
            sample = GL.where(real, sample, f.k(-np.inf))
        y = reduction("max", G.reshape(sample, (r, c, oh, ow, gh * gw)), (4,), False)
        if grid_y is not None and grid_x is not None and ((grid_y * grid_x) == 0).any():
            empty = Constant(((grid_y * grid_x) == 0).reshape(r, 1, 1, 1), "", "bool")
            y = GL.where(empty, zero, y)
    return y if x.dtype == "float32" else G.cast(y, x.dtype)


# -- NonMaxSuppression -------------------------------------------------------------------------


@register_converter("NonMaxSuppression")
def _non_max_suppression(im, node, a):
    """Shapes are static: the number of selected boxes (the output's length) must be known
    at import, so the boxes, scores and thresholds must be; the selection is then computed
    at import (ONNX's reference), and the error names the graph inputs to give values for
    when one of them is computed at run time."""
    from ..frontend_onnx import OnnxDataDependentError

    values, missing, reasons = [], [], []
    for k, what in ((0, "the boxes"), (1, "the scores"),
                    (2, "max_output_boxes_per_class"), (3, "iou_threshold"),
                    (4, "score_threshold")):
        try:
            values.append(np.asarray(im.value(node.input[k], f"NonMaxSuppression's {what}"))
                          if _has(node, k) else None)
        except OnnxDataDependentError as e:
            missing += [i for i in e.inputs if i not in missing]
            reasons.append(str(e).split(";")[0])
    if reasons:
        raise OnnxDataDependentError(
            "NonMaxSuppression's output has one row per selected box, a number that depends "
            "on the boxes' and scores' values, and shapes here are static: "
            + "; ".join(reasons) + " (give their values: from_onnx(..., constants=))",
            missing)
    # all known (the importer leaves large results to converters): the selection now
    (out,) = onnx_static.evaluate(node, values, a, im.opset)
    return Constant(np.asarray(out, dtype=np.int64), node.output[0], "int64")


# -- TensorScatter -----------------------------------------------------------------------------


@register_converter("TensorScatter")
def _tensor_scatter(im, node, a):
    """A KV cache update (opset 24): ``update``'s rows written into ``past_cache`` along
    ``axis`` from each batch element's ``write_indices`` on (``circular``: wrapping around).
    Written as a gather: a cache row takes the update row it receives, if any, else keeps
    its value; a row written past the end (``linear``) is dropped."""
    past, update = im.tensor(node.input[0]), im.tensor(node.input[1])
    mode = _text(a.get("mode"), "linear")
    if mode not in ("linear", "circular"):
        _refuse(node, f"mode {mode!r}; supported: linear, circular")
    r = past.ndim
    axis = int(a.get("axis", -2))
    if not -r <= axis < r or r < 2:
        _refuse(node, f"axis {axis} is out of range for a {r}-D cache")
    axis %= r
    if axis == 0 or update.ndim != r or update.dtype != past.dtype or any(
            update.shape[d] != past.shape[d] for d in range(r) if d != axis) \
            or update.shape[axis] > past.shape[axis]:
        _refuse(node, f"update {list(update.shape)} does not fit past_cache "
                      f"{list(past.shape)} along axis {axis} (axis 0 is the batch)")
    batch, size, rows = past.shape[0], past.shape[axis], update.shape[axis]
    if _has(node, 2):
        w = im.tensor(node.input[2])
        w = w if w.dtype == "int64" else G.cast(w, "int64")
    else:
        w = _const(np.zeros(batch), "int64")
    w = G.reshape(w, [batch] + [1] * (r - 1))
    here = np.arange(size, dtype=np.int64).reshape([1] * axis + [size] + [1] * (r - axis - 1))
    offset = binary("subtract", Constant(here, "", "int64"), w)
    if mode == "circular":
        offset = GL.where(Call("less", [offset, _const(0, "int64")]),
                          binary("add", offset, _const(size, "int64")), offset)
    inside = Call("logical_and", [Call("greater_equal", [offset, _const(0, "int64")]),
                                  Call("less", [offset, _const(rows, "int64")])])
    index = GL.where(inside, offset, _const(0, "int64"))
    full = list(update.shape)
    full[axis] = size
    taken = GI.gather_elements(update, GT.broadcast_to(index, full), axis)
    return GL.where(GT.broadcast_to(inside, full), taken, past)


# -- DeformConv --------------------------------------------------------------------------------


@register_converter("DeformConv")
def _deform_conv(im, node, a):
    """2-D deformable convolution: each kernel tap samples the input at its position plus the
    learned offset (bilinear, zero outside the image, as ONNX's reference samples with
    GridSample), times the optional mask, and the sampled columns multiply the weights per
    group (a batched product)."""
    x, w, off = (im.tensor(i) for i in node.input[:3])
    bias = im.tensor(node.input[3]) if _has(node, 3) else None
    mask = im.tensor(node.input[4]) if _has(node, 4) else None
    if x.ndim != 4 or w.ndim != 4 or off.ndim != 4:
        _refuse(node, f"only 2-D deformable convolutions are supported (X [N, C, H, W]), got "
                      f"X {list(x.shape)}")
    if x.dtype != "float32":
        _refuse(node, f"X has dtype {x.dtype}; float32 is supported")
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = (int(v) for v in a.get("kernel_shape", w.shape[2:]))
    sh, sw = (int(v) for v in a.get("strides", [1, 1]))
    dh, dw = (int(v) for v in a.get("dilations", [1, 1]))
    pt, pl = (int(v) for v in a.get("pads", [0, 0, 0, 0])[:2])
    group, og = int(a.get("group", 1)), int(a.get("offset_group", 1))
    oh, ow = off.shape[2:]
    k, p = kh * kw, oh * ow
    if c != w.shape[1] * group or m % group or c % og or off.shape[1] != 2 * og * k \
            or off.shape[0] != n or (mask is not None and tuple(mask.shape) != (n, og * k, oh, ow)):
        _refuse(node, f"inconsistent shapes: X {list(x.shape)}, W {list(w.shape)}, offset "
                      f"{list(off.shape)}, group {group}, offset_group {og}")
    f = FloatArith("float32")
    # each tap's base position [1, 1, K, P]
    ii, jj = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    aa, bb = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    base_y = (-pt + sh * ii.reshape(1, -1) + dh * aa.reshape(-1, 1)).astype(np.float32)
    base_x = (-pl + sw * jj.reshape(1, -1) + dw * bb.reshape(-1, 1)).astype(np.float32)
    o = G.reshape(off, (n, og, k, 2, p))
    ys = f.add(G.reshape(Call("strided_slice", [o], {"begin": [0], "end": [1], "axes": [3]}),
                         (n, og, k, p)), Constant(base_y.reshape(1, 1, k, p), "", "float32"))
    xs = f.add(G.reshape(Call("strided_slice", [o], {"begin": [1], "end": [2], "axes": [3]}),
                         (n, og, k, p)), Constant(base_x.reshape(1, 1, k, p), "", "float32"))
    y0, x0 = unary("floor", ys), unary("floor", xs)
    fy, fx = f.sub(ys, y0), f.sub(xs, x0)
    cg = c // og
    data = G.reshape(x, (n, og, cg, h * wd))
    zero = f.k(0.0)
    total = None
    for yy, wy in ((y0, f.sub(f.k(1.0), fy)), (f.add(y0, f.k(1.0)), fy)):
        for xx, wx in ((x0, f.sub(f.k(1.0), fx)), (f.add(x0, f.k(1.0)), fx)):
            inside = Call("logical_and", [
                Call("logical_and", [f.cmp("greater_equal", yy, zero),
                                     f.cmp("less_equal", yy, f.k(float(h - 1)))]),
                Call("logical_and", [f.cmp("greater_equal", xx, zero),
                                     f.cmp("less_equal", xx, f.k(float(wd - 1)))])])
            pos = GL.where(inside, f.add(f.mul(yy, f.k(float(wd))), xx), zero)
            index = GT.broadcast_to(G.reshape(G.cast(pos, "int64"), (n, og, 1, k * p)),
                                    (n, og, cg, k * p))
            weight = G.reshape(GL.where(inside, f.mul(wy, wx), zero), (n, og, 1, k * p))
            term = f.mul(GI.gather_elements(data, index, 3), weight)
            total = term if total is None else f.add(total, term)
    cols = G.reshape(total, (n, og, cg, k, p))
    if mask is not None:
        cols = f.mul(cols, G.reshape(mask, (n, og, 1, k, p)))
    cols = G.reshape(cols, (n, group, (c // group) * k, p))
    outs = []
    for g in range(group):
        wg = G.reshape(Call("strided_slice", [w], {"begin": [g * (m // group)],
                                                   "end": [(g + 1) * (m // group)],
                                                   "axes": [0]}), (1, m // group, -1))
        cg_cols = G.reshape(Call("strided_slice", [cols], {"begin": [g], "end": [g + 1],
                                                           "axes": [1]}),
                            (n, (c // group) * k, p))
        wb = GT.broadcast_to(wg, (n, m // group, (c // group) * k))
        outs.append(G.batch_matmul(wb, cg_cols, transpose_b=False))
    y = outs[0] if group == 1 else G.concatenate(outs, 1)
    y = G.reshape(y, (n, m, oh, ow))
    if bias is not None:
        y = f.add(y, G.reshape(bias, (1, m, 1, 1)))
    return y
