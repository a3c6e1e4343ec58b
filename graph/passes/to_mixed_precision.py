"""``to_mixed_precision``: run a float32 network in float16 or bfloat16 where that is safe.

As TVM's ToMixedPrecision, every operator has a policy (:data:`MIXED_PRECISION_POLICY`):

- ``ALWAYS``: convolutions and matrix products take low-precision inputs (float32 arguments
  are cast) and produce a low-precision result; the operators accumulate in float32 and
  round once (``ops.utils.accumulate_dtype``), so only the inputs lose precision. An
  ``nn.attention`` kept whole for the fused kernel (its softmax in float32 registers)
  is one of them; its float mask stays float32 (the kernel converts the mask element of
  each score to float32 as it adds it, and reads a float32 mask as it is): in 16 bits
  float32's ``finfo.min`` fill would become minus infinity, and a row the mask empties
  would no longer average its keys as the imported graph's float32 softmax does.
- ``FOLLOW``: element-wise and layout operators, pooling, bias add: low precision when every
  non-constant float argument already is, else float32 (constants take the other
  arguments' dtype). A residual add of two low-precision convolutions stays low; an add
  of a low value and a float32 one runs in float32.
- ``NEVER``: softmax, layer norm, batch norm, mean and exp/log/pow/sqrt-like operators run
  in float32 (low-precision arguments are cast up), since their accuracy needs it.
  Operators missing from the table are ``NEVER``.

Casts appear only where a value crosses from one region to the other, at most once per
value and dtype; a cast of a constant is folded at once, so weights are converted when the
network is built, not when it runs. A cast back up of a value that was cast down is not
removed (it is not exact); a cast down of a value cast up from that dtype is (it is).
The graph's inputs and outputs keep their dtypes (``keep_io_dtype``); with
``keep_io_dtype=False`` float32 outputs are returned in the low dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .. import opdefs as G
from ..ir import Call, Constant, Graph, GraphError, Node
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call


class MixedPolicy(Enum):
    """How an operator runs in a mixed-precision network."""

    ALWAYS = "always"
    FOLLOW = "follow"
    NEVER = "never"


_ALWAYS = ("nn.conv2d", "nn.dense", "nn.matmul", "nn.batch_matmul", "nn.attention")
_FOLLOW = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negative", "nn.relu",
    "nn.leaky_relu", "clip", "tanh", "sigmoid", "erf", "nn.bias_add", "nn.max_pool2d",
    "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d", "nn.pad", "reshape",
    "nn.batch_flatten", "squeeze", "expand_dims", "transpose", "concatenate", "strided_slice",
)
_NEVER = (
    "nn.softmax", "nn.layer_norm", "nn.rms_norm", "nn.batch_norm", "mean", "exp", "log",
    "power", "sqrt", "rsqrt", "nn.conv2d_winograd", "nn.winograd_weight_transform",
)

MIXED_PRECISION_POLICY: dict[str, MixedPolicy] = {
    **{op: MixedPolicy.ALWAYS for op in _ALWAYS},
    **{op: MixedPolicy.FOLLOW for op in _FOLLOW},
    **{op: MixedPolicy.NEVER for op in _NEVER},
}
"""The policy of each operator (others are ``NEVER``). Average pooling accumulates in
float32 inside the operator, so it may FOLLOW; ``tanh``, ``sigmoid`` and ``erf`` compute in
float32 and round once (docs/precision.md)."""

LOW_PRECISIONS = ("float16", "bfloat16")


def policy_of(op: str) -> MixedPolicy:
    """The mixed-precision policy of operator ``op``."""
    return MIXED_PRECISION_POLICY.get(op, MixedPolicy.NEVER)


class _Caster:
    """Casts made at most once per (value, dtype); constants folded at once."""

    def __init__(self):
        self.memo: dict[tuple[int, str], Node] = {}

    def __call__(self, node: Node, dtype: str) -> Node:
        if node.dtype == dtype:
            return node
        key = (id(node), dtype)
        if key not in self.memo:
            if (isinstance(node, Call) and node.op == "cast"
                    and node.args[0].dtype == dtype and dtype in LOW_PRECISIONS):
                out = node.args[0]  # low -> float32 -> low is the identity
            else:
                call = G.cast(node, dtype)
                out = fold_call(call, call.args) if isinstance(node, Constant) else None
                out = out if out is not None else call
            self.memo[key] = out
        return self.memo[key]


@register_graph_pass
@dataclass(frozen=True)
class ToMixedPrecision(GraphPass):
    """Run the float32 parts of a network in ``dtype`` where the policy table allows.

    Parameters:
        dtype: ``"float16"`` or ``"bfloat16"``.
        keep_io_dtype: return the outputs in their original dtype (True), or leave float32
            outputs that end in a low-precision region in ``dtype``.
    """

    name = "to_mixed_precision"
    dtype: str = "float16"
    keep_io_dtype: bool = True

    def apply(self, graph: Graph, ctx) -> Graph:
        low = self.dtype
        if low not in LOW_PRECISIONS:
            raise GraphError(f"to_mixed_precision: dtype must be one of {LOW_PRECISIONS}, "
                             f"got {low!r}")
        cast = _Caster()
        new: dict[int, Node] = {}
        for node in graph.nodes():
            if not isinstance(node, Call):
                new[id(node)] = node
                continue
            if isinstance(node.op, Graph):
                raise GraphError("to_mixed_precision runs before operator fusion; this graph "
                                 "is fused")
            args = [new[id(a)] for a in node.args]
            new[id(node)] = self._convert(node, args, cast)
        outputs = []
        for o in graph.outputs:
            out = new[id(o)]
            outputs.append(cast(out, o.dtype) if self.keep_io_dtype else out)
        return Graph(graph.params, outputs, graph.name, graph.attrs)

    def _convert(self, call: Call, args: list[Node], cast: _Caster) -> Node:
        low, attrs = self.dtype, dict(call.attrs)
        floats = [k for k, a in enumerate(call.args) if a.dtype == "float32"]
        if call.op == "cast" or call.dtype != "float32" or not floats:
            # not a float32 computation: its arguments go back to their original dtypes
            return Call(call.op, [cast(a, o.dtype) for a, o in zip(args, call.args)], attrs)
        policy = policy_of(call.op)
        if policy is MixedPolicy.ALWAYS:
            if attrs.get("precision"):
                attrs["precision"] = ""  # TF32 is a float32 precision; low inputs need none
            keep = {3} if call.op == "nn.attention" else set()  # the mask (module doc)
            new_args = [cast(a, low) if k in floats and k not in keep else a
                        for k, a in enumerate(args)]
            return Call(call.op, new_args, attrs)
        if policy is MixedPolicy.FOLLOW:
            variable = [args[k] for k in floats if not isinstance(args[k], Constant)]
            if variable and all(a.dtype == low for a in variable):
                new_args = [cast(a, low) if k in floats else a for k, a in enumerate(args)]
                return Call(call.op, new_args, attrs)
        return Call(call.op, [cast(a, o.dtype) for a, o in zip(args, call.args)], attrs)
