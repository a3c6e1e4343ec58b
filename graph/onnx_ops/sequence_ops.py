"""ONNX ``ReverseSequence``: the first ``sequence_lens[b]`` steps of each batch entry
reversed along the time axis, the rest left in place.

It is a ``gather_elements`` along the time axis whose indices are computed element-wise
from the lengths (``L - 1 - t`` where ``t < L``, else ``t``), so a compiled network reads
each element once and the lengths may be run-time data. A length past the time extent is
clamped in compiled code (as every gather index is) and is an ``IndexError`` in the
reference executor.
"""

from __future__ import annotations

import numpy as np

from .. import opdefs as G
from ..frontend_onnx import OnnxImportError, register_converter
from ..ir import Call, Constant
from ..opdefs import index as GI
from ..opdefs import logic as GL
from ..opdefs import transform as GT
from ..opdefs.arith import binary


@register_converter("ReverseSequence")
def _reverse_sequence(im, node, a):
    x = im.tensor(node.input[0])
    lens = im.tensor(node.input[1])
    time, batch = int(a.get("time_axis", 0)), int(a.get("batch_axis", 1))
    if x.ndim < 2 or {time, batch} != {0, 1}:
        raise OnnxImportError(f"time_axis {time} and batch_axis {batch} must be 0 and 1 (one "
                              f"each) on an input of at least 2 dimensions, got "
                              f"{list(x.shape)}")
    if lens.dtype not in ("int32", "int64") or lens.shape != (x.shape[batch],):
        raise OnnxImportError(f"sequence_lens must be int32 or int64 of shape "
                              f"[{x.shape[batch]}], got {lens.dtype} {list(lens.shape)}")

    def along(axis: int, extent: int) -> tuple:
        return tuple(extent if d == axis else 1 for d in range(x.ndim))

    steps = Constant(np.arange(x.shape[time], dtype=np.int64).reshape(along(time,
                                                                           x.shape[time])),
                     f"{node.output[0]}_steps", "int64")
    lens = G.reshape(G.cast(lens, "int64") if lens.dtype != "int64" else lens,
                     along(batch, x.shape[batch]))
    one = Constant(np.array(1, np.int64), "", "int64")
    mirrored = binary("subtract", binary("subtract", lens, one), steps)
    index = GL.where(Call("less", [steps, lens]), mirrored,
                     GT.broadcast_to(steps, mirrored.shape))
    return GI.gather_elements(x, GT.broadcast_to(index, x.shape), time)
