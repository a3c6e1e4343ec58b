"""The small builders the attention kernels share: constants of the softmax, typed
immediates, loops, the operand buffers and the annotation of a tensorized nest."""

from __future__ import annotations

from ....ir import dtype as dt
from ....ir.expr import Expr, FloatImm, IntImm, Var, select
from ....ir.intrin import ANNOTATION
from ....ir.intrin.keys import IntrinKey
from ....ir.intrin.registry import lookup
from ....ir.stmt import Buffer, For, Stmt
from .workload import AttentionWorkload

F32 = "float32"
NEG_INF = FloatImm(float("-inf"), F32)
LOG2E = 1.4426950408889634
MASK_FLOOR = -(2.0 ** 127)
"""The lowest base-2 value an additive mask element takes: a float32 mask of ``finfo.min``
times ``log2 e`` would overflow to minus infinity and empty a row the imported graph's
softmax averages. Half of ``finfo.max`` keeps every later step finite: a score minus any
reachable running maximum, and the maxima's differences."""
MASK_KNEE = MASK_FLOOR / LOG2E
"""The finite mask elements below which the scaling by ``log2 e`` could pass
:data:`MASK_FLOOR`: they are halved instead (:func:`_scaled_mask`)."""
RESCALE_THRESHOLD = 8.0
"""How far (in the exponent) a row's scores may exceed its running maximum before the
maximum moves and the output is rescaled: probabilities stay below ``e^8``, about 2981."""


def _i(v: int) -> IntImm:
    return IntImm(v, dt.INDEX)


def _f(v: float) -> FloatImm:
    return FloatImm(v, F32)


def _scaled_mask(m: Expr, dtype: str) -> Expr:
    """The float32 additive mask element ``m`` in base 2: ``m log2 e`` where the mask's
    dtype cannot pass :data:`MASK_FLOOR` that way (float16's ``-65504``); for float32 and
    bfloat16, whose ``finfo.min`` can, ``m log2 e`` down to :data:`MASK_KNEE` and ``m / 2``
    below it (between ``MASK_FLOOR`` and ``MASK_FLOOR / 2.9``: every value finite, and far
    enough down that such a key's probability is zero beside any unmasked key). Minus
    infinity stays minus infinity (a row masked by it entirely stays the kernel's zero),
    and a row filled with one value averages its keys as the float32 softmax does. One
    compare, one select and one multiply (a clamp of ``m log2 e`` and a test for minus
    infinity took one more: a ``max``)."""
    if dtype == "float16":
        return m * _f(LOG2E)
    return m * select(m >= _f(MASK_KNEE), _f(LOG2E), _f(0.5))


def _var(name: str) -> Var:
    return Var(name)


def _loop(name: str, extent: int, body_fn, kind: str = "serial", thread: str = "",
          annotations: dict | None = None) -> For:
    v = _var(name)
    return For(v, extent, body_fn(v), kind, thread, annotations)


def _lanes(body_fn) -> For:
    """A loop over the 32 lanes of each warp (``threadIdx.x``)."""
    return _loop("tx", 32, body_fn, "thread", "threadIdx.x")


def _intrin(key: IntrinKey) -> dict:
    return {ANNOTATION: lookup(key).name}


def _loop_var(v: Var, extent: int, body: Stmt, thread: str) -> For:
    return For(v, extent, body, "thread", thread)


def _operand_buffers(w: AttentionWorkload) -> tuple:
    """The kernel's flat ``q``, ``k``, ``v`` parameters: the operands, or the wider tensors
    they are viewed in (:class:`~.workload.OperandView`)."""
    shapes = w.shapes()
    out = []
    for name in "qkv":
        n = 1
        for d in shapes[name]:
            n *= d
        out.append(Buffer(name, w.dtype, [n]))
    return tuple(out)
