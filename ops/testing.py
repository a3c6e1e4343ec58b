"""Numpy references for the operators, to check compiled kernels against.

Every function takes numpy arrays and the operator's own arguments (strides, padding,
layouts as the operator reads them) and returns a numpy array. They are vectorized: the
only Python loops run over kernel taps, never over elements, so the seed layer
(1x512x7x7 by 512x512x3x3) takes milliseconds.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from .nn.utils import get_pad_tuple


def widen(x, dtype: str | None = None) -> np.ndarray:
    """``x`` as float64 (exact for every float dtype). A bfloat16 host array converts
    exactly too; give ``dtype="bfloat16"`` when it holds uint16 bit patterns (no
    ``ml_dtypes``). Low-precision results are compared with references computed on these."""
    x = np.asarray(x)
    if dtype == "bfloat16" or x.dtype == dt.BFLOAT16_HOST and not dt.BFLOAT16_IS_BITS:
        return dt.from_bfloat16(x).astype(np.float64)
    return x.astype(np.float64)


def tf32_inputs(*arrays) -> list[np.ndarray]:
    """The inputs of a product at precision ``"tf32"``: float32 values rounded to TF32
    (round to nearest, ties away), returned as float64 so the reference's products and
    sums add no rounding of their own."""
    return [dt.round_to(np.asarray(a, np.float32), "tf32").astype(np.float64) for a in arrays]


def _at(precision: str, *arrays) -> list:
    if precision == "float32":
        return list(arrays)
    if precision == "tf32":
        return tf32_inputs(*arrays)
    raise ValueError(f"precision must be 'float32' or 'tf32', got {precision!r}")


def _accumulator(*arrays) -> tuple[np.dtype, np.dtype]:
    """``(accumulator, result)`` dtypes of a sum of products of ``arrays``: float16 and
    bfloat16 sum in float32 and round once at the end, as the kernels do (a running sum
    rounded to 16 bits after every tap drifts by several units in the last place)."""
    res = np.result_type(*arrays)
    return (np.dtype(np.float32) if dt.is_half(dt.from_numpy(res)) else res), res


def _pair(value) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    a, b = value
    return int(a), int(b)


def _window_geometry(in_hw, kernel, stride, padding, dilation, ceil_mode=False):
    """Pads (top, left, bottom, right), ceil-mode extra padding, and output size."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    pads = get_pad_tuple(padding, ((kh - 1) * dh + 1, (kw - 1) * dw + 1))
    extra = (sh - 1, sw - 1) if ceil_mode else (0, 0)
    top, left, bottom, right = pads
    out_h = (in_hw[0] + top + bottom + extra[0] - (kh - 1) * dh - 1) // sh + 1
    out_w = (in_hw[1] + left + right + extra[1] - (kw - 1) * dw - 1) // sw + 1
    if out_h < 1 or out_w < 1:
        raise ValueError(f"the window does not fit: output size {out_h}x{out_w}")
    return pads, extra, (out_h, out_w)


def _taps(kernel, stride, dilation, out_hw):
    """For each kernel tap (y, x): the strided slices of the padded input it reads."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = out_hw
    for y in range(kh):
        for x in range(kw):
            rows = slice(y * dh, y * dh + (oh - 1) * sh + 1, sh)
            cols = slice(x * dw, x * dw + (ow - 1) * sw + 1, sw)
            yield y, x, rows, cols


def _pad_nchw(a_np: np.ndarray, pads, extra=(0, 0), value=0) -> np.ndarray:
    top, left, bottom, right = pads
    return np.pad(
        a_np,
        ((0, 0), (0, 0), (top, bottom + extra[0]), (left, right + extra[1])),
        constant_values=value,
    )


def conv2d_nchw_python(a_np, w_np, stride, padding, dilation=1,
                       precision: str = "float32") -> np.ndarray:
    """Convolution of ``a_np`` [N, C, H, W] with ``w_np`` [K, C, KH, KW]: [N, K, OH, OW].
    ``precision="tf32"`` rounds both inputs to TF32 first (and computes in float64)."""
    a_np, w_np = _at(precision, a_np, w_np)
    n, c, h, w = a_np.shape
    k, c2, kh, kw = w_np.shape
    if c != c2:
        raise ValueError(f"data has {c} channels but the kernel expects {c2}")
    stride, dilation = _pair(stride), _pair(dilation)
    pads, _, out_hw = _window_geometry((h, w), (kh, kw), stride, padding, dilation)
    padded = _pad_nchw(a_np, pads)
    acc, res = _accumulator(a_np, w_np)
    out = np.zeros((k, n) + out_hw, dtype=acc)
    for y, x, rows, cols in _taps((kh, kw), stride, dilation, out_hw):
        # (K, C) x (N, C, OH, OW) over C: one BLAS call per tap
        out += np.tensordot(w_np[:, :, y, x].astype(acc), padded[:, :, rows, cols].astype(acc),
                            axes=([1], [1]))
    return out.transpose(1, 0, 2, 3).astype(res, copy=False)


def conv2d_nhwc_python(a_np, w_np, stride, padding, dilation=1,
                       precision: str = "float32") -> np.ndarray:
    """Convolution of ``a_np`` [N, H, W, C] with ``w_np`` [KH, KW, C, K]: [N, OH, OW, K]."""
    out = conv2d_nchw_python(
        a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride, padding, dilation,
        precision,
    )
    return out.transpose(0, 2, 3, 1)


def depthwise_conv2d_nchw_python(input_np, filter_np, stride, padding, dilation=1) -> np.ndarray:
    """Depthwise convolution of ``input_np`` [N, C, H, W] with ``filter_np`` [C, M, KH, KW]:
    [N, C*M, OH, OW], output channel ``c*M + m`` using filter ``(c, m)``."""
    n, c, h, w = input_np.shape
    c2, m, kh, kw = filter_np.shape
    if c != c2:
        raise ValueError(f"data has {c} channels but the filter expects {c2}")
    stride, dilation = _pair(stride), _pair(dilation)
    pads, _, out_hw = _window_geometry((h, w), (kh, kw), stride, padding, dilation)
    padded = _pad_nchw(input_np, pads)
    acc, res = _accumulator(input_np, filter_np)
    out = np.zeros((n, c, m) + out_hw, dtype=acc)
    for y, x, rows, cols in _taps((kh, kw), stride, dilation, out_hw):
        window = padded[:, :, rows, cols].astype(acc)
        out += window[:, :, None] * filter_np[None, :, :, y, x, None, None].astype(acc)
    return out.reshape((n, c * m) + out_hw).astype(res, copy=False)


def depthwise_conv2d_nhwc_python(input_np, filter_np, stride, padding, dilation=1) -> np.ndarray:
    """Depthwise convolution of ``input_np`` [N, H, W, C] with ``filter_np`` [KH, KW, C, M]:
    [N, OH, OW, C*M]."""
    out = depthwise_conv2d_nchw_python(
        input_np.transpose(0, 3, 1, 2), filter_np.transpose(2, 3, 0, 1), stride, padding, dilation
    )
    return out.transpose(0, 2, 3, 1)


def matmul_python(a_np, b_np, bias_np=None, transpose_a=False, transpose_b=False,
                  precision: str = "float32") -> np.ndarray:
    """``op(a) @ op(b) (+ bias)``, ``op`` transposing where asked; ``precision="tf32"``
    rounds both inputs to TF32 first (and computes in float64)."""
    a_np, b_np = _at(precision, a_np, b_np)
    out = np.matmul(a_np.T if transpose_a else a_np, b_np.T if transpose_b else b_np)
    return out if bias_np is None else out + bias_np


def dense_python(data_np, weight_np, bias_np=None, precision: str = "float32") -> np.ndarray:
    """``data @ weight.T (+ bias)``: ``data`` [B, K], ``weight`` [N, K], ``bias`` [N]."""
    return matmul_python(data_np, weight_np, bias_np, transpose_b=True, precision=precision)


def batch_matmul_python(x_np, y_np, transpose_a=False, transpose_b=True,
                        precision: str = "float32") -> np.ndarray:
    """``x[b] @ y[b]`` per batch (a batch of 1 broadcasts); ``y`` is [B, N, K] by default."""
    x_np, y_np = _at(precision, x_np, y_np)
    x = x_np.transpose(0, 2, 1) if transpose_a else x_np
    y = y_np.transpose(0, 2, 1) if transpose_b else y_np
    return np.matmul(x, y)


def _lowest(dtype) -> float | int:
    dtype = np.dtype(dtype)
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def pool2d_python(
    data_np,
    kernel,
    stride,
    dilation,
    padding,
    pool_type: str,
    ceil_mode: bool = False,
    layout: str = "NCHW",
    count_include_pad: bool = True,
) -> np.ndarray:
    """Max or average pooling with the semantics of ``ops.nn.pool2d``.

    Max pooling pads with the dtype's lowest value. Average pooling divides by the number
    of window elements inside the input (plus the explicit padding when
    ``count_include_pad``), never counting the ceil-mode extension, and at least 1.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"unknown layout {layout!r}")
    x = data_np if layout == "NCHW" else data_np.transpose(0, 3, 1, 2)
    kernel, stride, dilation = _pair(kernel), _pair(stride), _pair(dilation)
    h, w = x.shape[2:]
    pads, extra, out_hw = _window_geometry((h, w), kernel, stride, padding, dilation, ceil_mode)
    top, left, bottom, right = pads
    if pool_type == "max":
        padded = _pad_nchw(x, pads, extra, _lowest(x.dtype))
        out = np.full(x.shape[:2] + out_hw, _lowest(x.dtype), dtype=x.dtype)
        for _, _, rows, cols in _taps(kernel, stride, dilation, out_hw):
            np.maximum(out, padded[:, :, rows, cols], out=out)
    elif pool_type == "avg":
        padded = _pad_nchw(x, pads, extra, 0)
        counted = np.zeros(padded.shape[2:], dtype=np.int64)
        if count_include_pad:
            counted[: top + h + bottom, : left + w + right] = 1
        else:
            counted[top : top + h, left : left + w] = 1
        total = np.zeros(x.shape[:2] + out_hw, dtype=x.dtype)
        count = np.zeros(out_hw, dtype=np.int64)
        for _, _, rows, cols in _taps(kernel, stride, dilation, out_hw):
            total += padded[:, :, rows, cols]
            count += counted[rows, cols]
        out = (total / np.maximum(count, 1)).astype(x.dtype)
    else:
        raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    return out if layout == "NCHW" else out.transpose(0, 2, 3, 1)


def global_pool2d_python(data_np, pool_type: str, layout: str = "NCHW") -> np.ndarray:
    """Max or mean over the height and width, kept as dimensions of size 1."""
    axes = (2, 3) if layout == "NCHW" else (1, 2)
    if pool_type == "max":
        return data_np.max(axis=axes, keepdims=True)
    if pool_type == "avg":
        return data_np.mean(axis=axes, keepdims=True, dtype=data_np.dtype)
    raise ValueError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")


def softmax_python(a_np, axis: int = -1) -> np.ndarray:
    """``exp(a - max) / sum(exp(a - max))`` along ``axis``."""
    shifted = a_np - a_np.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def batch_norm_python(
    data_np, gamma_np, beta_np, mean_np, var_np, axis: int = 1, epsilon: float = 1e-5,
    center: bool = True, scale: bool = True,
) -> np.ndarray:
    """Inference batch normalization with 1-D statistics along ``axis``."""
    shape = [1] * data_np.ndim
    shape[axis] = data_np.shape[axis]

    def along(v):
        return v.reshape(shape)

    out = (data_np - along(mean_np)) / np.sqrt(along(var_np) + np.asarray(epsilon, data_np.dtype))
    if scale:
        out = out * along(gamma_np)
    if center:
        out = out + along(beta_np)
    return out.astype(data_np.dtype)


def bias_add_python(data_np, bias_np, axis: int = 1) -> np.ndarray:
    """``data + bias`` with ``bias`` [C] along ``axis``."""
    shape = [1] * data_np.ndim
    shape[axis] = -1
    return data_np + bias_np.reshape(shape)


def relu_python(a_np) -> np.ndarray:
    """``max(a, 0)``."""
    return np.maximum(a_np, np.zeros((), a_np.dtype))


def pad_python(a_np, pad_before, pad_after=None, pad_value=0) -> np.ndarray:
    """Constant padding, ``pad_after`` defaulting to ``pad_before``."""
    pad_after = pad_before if pad_after is None else pad_after
    return np.pad(a_np, list(zip(pad_before, pad_after)), constant_values=pad_value)
