"""``nn.group_norm`` (group and instance normalization) and ``nn.lrn`` on channel-first
data, lowered to :mod:`ptxforge.ops.nn.group_norm`. Group normalization fuses its
element-wise consumers (a residual add, an activation: its normalizing stage is computed in
their kernel, after the two statistics reductions); LRN fuses with nothing (``OPAQUE``)."""

from __future__ import annotations

from ...ops.nn import group_norm as N
from ..ir import Call, Node, TensorType
from ..op import OpDef, OpPattern, register_op
from .common import expect_float, fail


def _gn_infer(types, attrs):
    op = "nn.group_norm"
    data, gamma, beta = types
    expect_float(op, "data", data)
    if data.ndim < 2:
        fail(op, f"data must be [N, C, ...], got {data}")
    c, g = data.shape[1], attrs["num_groups"]
    if isinstance(g, bool) or not isinstance(g, int) or g < 1 or c % g:
        fail(op, f"num_groups={g!r} must be a positive int dividing the {c} channels")
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t.shape not in ((c,), (g,)):
            fail(op, f"{what} must have shape [{c}] (per channel) or [{g}] (per group), got "
                     f"{list(t.shape)}")
        if t.dtype != data.dtype:
            fail(op, f"{what} has dtype {t.dtype} but data has {data.dtype}")
    return data


register_op(OpDef(
    name="nn.group_norm", num_inputs=3, infer=_gn_infer,
    lower=lambda a, attrs: N.group_norm(a[0], a[1], a[2], attrs["num_groups"],
                                        attrs["epsilon"]),
    ref=lambda a, attrs: N.group_norm_reference(a[0], a[1], a[2], attrs["num_groups"],
                                                attrs["epsilon"]),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE, defaults={"num_groups": 1, "epsilon": 1e-5},
))


def group_norm(data: Node, gamma: Node, beta: Node, num_groups: int,
               epsilon: float = 1e-5) -> Call:
    """Group normalization of ``[N, C, ...]`` data: statistics per sample and group of
    ``C / num_groups`` channels; ``gamma``/``beta`` per channel ``[C]`` or per group.
    ``num_groups == C`` is instance normalization."""
    return Call("nn.group_norm", [data, gamma, beta],
                {"num_groups": int(num_groups), "epsilon": float(epsilon)})


def _lrn_infer(types, attrs):
    (data,) = types
    expect_float("nn.lrn", "data", data)
    if data.ndim < 2:
        fail("nn.lrn", f"data must be [N, C, ...], got {data}")
    size = attrs["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        fail("nn.lrn", f"size must be a positive int, got {size!r}")
    return TensorType(data.shape, data.dtype)


def _lrn_args(attrs):
    return attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"]


register_op(OpDef(
    name="nn.lrn", num_inputs=1, infer=_lrn_infer,
    lower=lambda a, attrs: N.lrn(a[0], *_lrn_args(attrs)),
    ref=lambda a, attrs: N.lrn_reference(a[0], *_lrn_args(attrs)),
    pattern=OpPattern.OPAQUE,
    defaults={"size": 1, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
))


def lrn(data: Node, size: int, alpha: float = 1e-4, beta: float = 0.75,
        bias: float = 1.0) -> Call:
    """Local response normalization across channels (ONNX ``LRN``)."""
    return Call("nn.lrn", [data], {"size": int(size), "alpha": float(alpha),
                                   "beta": float(beta), "bias": float(bias)})
