"""ONNX converters of ``Resize`` (opsets 10-19) and ``Upsample`` (opsets 7-9).

Scales, sizes and the crop box must be known at import time (shapes are static). Each
resized axis gets its (index, weight) tables computed here
(:func:`ptxforge.ops.nn.resize.axis_tables`) as constants of an ``image.resize``;
axes that keep their size and coordinates are left out.
"""

from __future__ import annotations

import math

import numpy as np

from ...ops.nn import resize as R
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Constant
from ..opdefs.resize import resize


def _text(a: dict, key: str, default: str) -> str:
    value = a.get(key, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(im, node, index: int, what: str):
    if len(node.input) <= index or not node.input[index]:
        return None
    value = np.asarray(im.value(node.input[index], what))
    return value if value.size else None


def _resize(im, x, node, *, mode, coord, nearest_mode, cubic_a, exclude, antialias,
            extrapolation, scales, sizes, roi, axes, policy):
    r = x.ndim
    axes = list(range(r)) if axes is None else [int(a) % r for a in axes]
    where = f"{node.op_type} {node.name!r}"
    if mode not in R.MODES:
        raise OnnxImportError(f"{where}: mode {mode!r} is not supported; one of "
                              f"{list(R.MODES)}")
    if coord not in R.COORDINATE_MODES:
        raise OnnxImportError(f"{where}: coordinate_transformation_mode {coord!r} is not "
                              f"supported; one of {list(R.COORDINATE_MODES)}")
    if antialias and mode == "nearest":
        raise OnnxImportError(f"{where}: antialias is defined for linear and cubic modes only")
    if (scales is None) == (sizes is None):
        raise OnnxImportError(f"{where}: give exactly one of scales and sizes")
    in_shape = [x.shape[a] for a in axes]
    if scales is not None:
        scales = [float(s) for s in scales]
        if len(scales) != len(axes) or any(s <= 0 for s in scales):
            raise OnnxImportError(f"{where}: scales {scales} must be {len(axes)} positive "
                                  "numbers")
        out = [int(math.floor(s * n)) for s, n in zip(scales, in_shape)]
    else:
        sizes = [int(s) for s in sizes]
        if len(sizes) != len(axes) or any(s <= 0 for s in sizes):
            raise OnnxImportError(f"{where}: sizes {sizes} must be {len(axes)} positive ints")
        scales = [s / n for s, n in zip(sizes, in_shape)]
        out = sizes
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise OnnxImportError(f"{where}: unknown keep_aspect_ratio_policy {policy!r}")
            s = min(scales) if policy == "not_larger" else max(scales)
            scales = [s] * len(axes)
            out = [int(s * n + 0.5) for n in in_shape]
    if roi is not None:
        roi = [float(v) for v in roi]
        if len(roi) == 2 * r and len(axes) != r:
            roi = [roi[a] for a in axes] + [roi[r + a] for a in axes]
        if len(roi) != 2 * len(axes):
            raise OnnxImportError(f"{where}: roi {roi} must have two entries per resized axis")
    tables, used = [], []
    for j, a in enumerate(axes):
        box = (0.0, 1.0) if roi is None or coord != "tf_crop_and_resize" else (
            roi[j], roi[len(axes) + j])
        if (math.isclose(scales[j], 1.0) and out[j] == in_shape[j]
                and coord != "tf_crop_and_resize"):
            continue
        if coord == "tf_crop_and_resize" and math.isclose(scales[j], 1.0) and \
                out[j] == in_shape[j] and box == (0.0, 1.0):
            continue
        idx, w = R.axis_tables(in_shape[j], out[j], scales[j], mode, coord, nearest_mode,
                               cubic_a, exclude, antialias, box)
        base = f"{node.output[0]}_axis{a}"
        tables.append((Constant(idx, f"{base}_index"), Constant(w, f"{base}_weight")))
        used.append(a)
    if not used:
        return x
    extrap = extrapolation if coord == "tf_crop_and_resize" else None
    return resize(x, used, tables, mode == "nearest", extrap)


@register_converter("Resize")
def _resize_converter(im, node, a):
    x = im.tensor(node.input[0])
    if im.opset < 11:
        scales = _optional(im, node, 1, "the Resize scales")
        sizes = roi = None
        coord, nearest_mode = "asymmetric", "floor"
    else:
        roi = _optional(im, node, 1, "the Resize roi")
        scales = _optional(im, node, 2, "the Resize scales")
        sizes = _optional(im, node, 3, "the Resize sizes")
        coord = _text(a, "coordinate_transformation_mode", "half_pixel")
        nearest_mode = _text(a, "nearest_mode", "round_prefer_floor")
    return _resize(
        im, x, node, mode=_text(a, "mode", "nearest"), coord=coord, nearest_mode=nearest_mode,
        cubic_a=float(a.get("cubic_coeff_a", -0.75)), exclude=bool(a.get("exclude_outside", 0)),
        antialias=bool(a.get("antialias", 0)),
        extrapolation=float(a.get("extrapolation_value", 0.0)), scales=scales, sizes=sizes,
        roi=roi, axes=[int(v) for v in a["axes"]] if "axes" in a else None,
        policy=_text(a, "keep_aspect_ratio_policy", "stretch"))


@register_converter("Upsample")
def _upsample(im, node, a):
    x = im.tensor(node.input[0])
    if "scales" in a:
        scales = [float(v) for v in a["scales"]]
    else:
        scales = _optional(im, node, 1, "the Upsample scales")
    mode = _text(a, "mode", "nearest")
    mode = "linear" if mode == "bilinear" else mode
    return _resize(im, x, node, mode=mode, coord="asymmetric", nearest_mode="floor",
                   cubic_a=-0.75, exclude=False, antialias=False, extrapolation=0.0,
                   scales=scales, sizes=None, roi=None, axes=None, policy="stretch")
