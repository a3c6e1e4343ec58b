"""ONNX ``DFT`` and ``STFT`` as products with constant matrices.

A transform of length ``N`` along one axis is two products per output part: the real and
imaginary parts of the input (the last axis of ONNX's tensors: 1 real, 2 complex) times
the cosine and sine matrices of the transform, computed at import in float64 and rounded
once to the product's dtype. The forward transform uses ``e^{-2 pi i n k / N}``, the
inverse ``e^{+...} / N``; ``onesided`` keeps the first ``N / 2 + 1`` frequencies, and an
inverse one-sided transform (``irfft``) takes them to ``N`` real values (each frequency
between 0 and the Nyquist one counted twice, their imaginary parts ignored as numpy
does). ``dft_length`` truncates or zero-pads the input (zero padding drops matrix columns).
``STFT`` gathers the frames (``frame_step`` apart, ``frame_length`` long), multiplies
them by the window and transforms each.
"""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Call, Constant, Node
from ..opdefs import index as GI
from ..opdefs.arith import binary
from ..opdefs.linear import dense


def _slice(x: Node, begin: int, end: int, axis: int) -> Node:
    return Call("strided_slice", [x], {"begin": [begin], "end": [end], "axes": [axis]})


def dft_matrices(length: int, n: int, inverse: bool, onesided: bool):
    """``(out, [(real from real, real from imag), (imag from real, imag from imag)])``: the
    float64 matrices ``[out, length]`` (None: no contribution) of a transform of size ``n``
    taking ``length`` input values (``length <= n``; the rest are zeros)."""
    t = np.arange(length, dtype=np.float64)
    if inverse and onesided:  # irfft: N / 2 + 1 frequencies in, n real values out
        k = t[None, :]
        j = np.arange(n, dtype=np.float64)[:, None]
        theta = 2 * np.pi * j * k / n
        twice = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
        imag_used = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 0.0, 1.0)
        rr = twice * np.cos(theta) / n
        ri = -twice * imag_used * np.sin(theta) / n
        return n, [(rr, ri), (None, None)]
    out = n // 2 + 1 if onesided else n
    k = np.arange(out, dtype=np.float64)[:, None]
    theta = 2 * np.pi * k * t[None, :] / n
    cos, sin = np.cos(theta), np.sin(theta)
    if inverse:
        # (xr + i xi)(cos + i sin) / n
        return out, [(cos / n, -sin / n), (sin / n, cos / n)]
    # (xr + i xi)(cos - i sin)
    return out, [(cos, sin), (-sin, cos)]


def transform(x: Node, axis: int, n: int, inverse: bool, onesided: bool, what: str) -> Node:
    """ONNX's DFT of ``x`` ([..., 1 or 2]) along ``axis`` with size ``n``."""
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise OnnxImportError(f"{what}: the input's last axis must hold 1 (real) or 2 "
                              f"(complex) values, got {list(x.shape)}")
    if not 0 <= axis < x.ndim - 1:
        raise OnnxImportError(f"{what}: axis {axis} is not a signal axis of {list(x.shape)}")
    if n < 1:
        raise OnnxImportError(f"{what}: dft_length {n} must be positive")
    # float64 products: ONNX's reference is numpy's double-precision FFT, whose exact zeros
    # (the imaginary parts of a real signal's inverse) float32 sums of N terms miss by
    # about N * 1e-7
    dtype = "float64"
    parts = [G.reshape(_slice(x, c, c + 1, x.ndim - 1), x.shape[:-1])
             for c in range(x.shape[-1])]
    rank = x.ndim - 1
    perm = [d for d in range(rank) if d != axis] + [axis]
    length = x.shape[axis]
    used = min(length, n // 2 + 1 if inverse and onesided else n)
    lead = [x.shape[d] for d in perm[:-1]]
    rows = int(np.prod(lead, dtype=np.int64))
    flat = []
    for p in parts:
        p = p if p.dtype == dtype else G.cast(p, dtype)
        p = G.transpose(p, perm) if perm != list(range(rank)) else p
        if used < length:
            p = _slice(p, 0, used, rank - 1)
        flat.append(G.reshape(p, (rows, used)))
    out, mats = dft_matrices(used, n, inverse, onesided)
    results = []
    for pair in mats:
        total = None
        for src, m in zip(flat, pair):
            if m is None:
                continue
            term = dense(src, Constant(m.astype(dtype), "", dtype))
            total = term if total is None else binary("add", total, term)
        if total is not None:
            results.append(total)
    back = [0] * rank
    for i, d in enumerate(perm):
        back[d] = i
    outs = []
    for r in results:
        r = G.reshape(r, lead + [out])
        r = G.transpose(r, back) if perm != list(range(rank)) else r
        outs.append(G.reshape(r, list(r.shape) + [1]))
    y = outs[0] if len(outs) == 1 else G.concatenate(outs, rank)
    return y if y.dtype == x.dtype else G.cast(y, x.dtype)


@register_converter("DFT")
def _dft(im, node, a):
    x = im.tensor(node.input[0])
    inverse, onesided = bool(a.get("inverse", 0)), bool(a.get("onesided", 0))
    if im.opset >= 20:
        axis = (int(np.asarray(im.value(node.input[2], "DFT's axis")).reshape(()))
                if len(node.input) > 2 and node.input[2] else -2)
    else:
        axis = int(a.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if len(node.input) > 1 and node.input[1]:
        n = int(np.asarray(im.value(node.input[1], "DFT's dft_length")).reshape(()))
    elif inverse and onesided:
        n = 2 * (x.shape[axis] - 1)
    else:
        n = x.shape[axis]
    if onesided and not inverse and x.shape[-1] != 1:
        raise OnnxImportError(f"DFT {node.name!r}: onesided takes a real input")
    return transform(x, axis, n, inverse, onesided, f"DFT {node.name!r}")


@register_converter("STFT")
def _stft(im, node, a):
    signal = im.tensor(node.input[0])
    step = int(np.asarray(im.value(node.input[1], "STFT's frame_step")).reshape(()))
    window = im.tensor(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 3 and node.input[3]:
        frame = int(np.asarray(im.value(node.input[3], "STFT's frame_length")).reshape(()))
    elif window is not None:
        frame = window.shape[0]
    else:
        raise OnnxImportError(f"STFT {node.name!r}: give a window or a frame_length")
    onesided = bool(a.get("onesided", 1))
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2) or step < 1:
        raise OnnxImportError(f"STFT {node.name!r}: signal must be [batch, length, 1 or 2] "
                              f"and frame_step positive, got {list(signal.shape)}, {step}")
    if onesided and signal.shape[-1] != 1:
        raise OnnxImportError(f"STFT {node.name!r}: onesided takes a real signal")
    batch, length, c = signal.shape
    frames = (length - frame) // step + 1
    if frames < 1 or (window is not None and window.shape != (frame,)):
        raise OnnxImportError(f"STFT {node.name!r}: frames of {frame} do not fit the signal "
                              f"of {length}, or the window is not [{frame}]")
    index = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).reshape(-1)
    taken = GI.take(signal, Constant(index.astype(np.int64), "", "int64"), 1)
    x = G.reshape(taken, (batch, frames, frame, c))
    if window is not None:
        w = window if window.dtype == x.dtype else G.cast(window, x.dtype)
        x = binary("multiply", x, G.reshape(w, (1, 1, frame, 1)))
    return transform(x, 2, frame, False, onesided, f"STFT {node.name!r}")
