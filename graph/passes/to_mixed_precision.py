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
- ``ROUND``: the row normalizations ``nn.layer_norm`` and ``nn.rms_norm`` read their data
  as it comes (float32 or low precision, never cast), compute their statistics and the
  normalization in float32 inside the kernel and round their result once to the low dtype
  (``out_dtype``; a low input is already that). A transformer's residual stream then stays
  in the low dtype, as PyTorch's float16 model and TVM's ToMixedPrecision keep it: a
  residual add of a low product and a low norm is a low add, the next norm reads 16 bits.
  The scale and shift (or weight) stay float32. A norm whose result is a graph output
  (or reaches one through reshapes) runs as ``NEVER`` (float32 in and out: the result is
  not rounded where it leaves the network). ``keep_norms_float32=True`` makes them all
  ``NEVER`` again (docs/precision.md compares the two).
- ``GATHER``: the gathers ``take`` (ONNX ``Gather``, an embedding lookup), ``gather_nd``
  and ``gather_elements`` move values without computing. A gather of 16-bit data gathers
  in 16 bits (exact). A gather of a float32 constant table (GPT-2's and BERT's word
  embeddings) reads the table cast to the low dtype (folded when the network is built,
  one low copy of the constant shared with its other low readers: GPT-2's LM head
  multiplies by the same table) and its result is low, so a transformer's residual stream
  starts low, as in PyTorch's float16 model, where it is read low: when the result reaches,
  through ``FOLLOW`` operators (the position embedding's add, the residual adds), an
  ``ALWAYS`` or ``ROUND`` operator or a cast to the low dtype. A gather whose result only
  reaches float32 operators or the graph's outputs keeps its float32 table (rounding it
  would lose digits that every reader widens back), as does a gather of a computed float32
  tensor (a table cast whole to read a few rows). ``keep_gathers_float32=True`` makes them
  all ``NEVER`` again (docs/precision.md).
- ``NEVER``: softmax, batch norm, mean and exp/log/pow/sqrt-like operators run in float32
  (low-precision arguments are cast up), since their accuracy needs it. Operators missing
  from the table are ``NEVER``. A softmax stays ``NEVER``: a 16-bit softmax in a graph
  computes in 16 bits, as ONNX defines it, so float32 inside needs the cast up of its
  input; ``fold_output_cast`` then makes it write the low result itself.

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
from ..opdefs.transform import VIEW_OPS
from .base import GraphPass, register_graph_pass
from .fold_constant import fold_call


class MixedPolicy(Enum):
    """How an operator runs in a mixed-precision network."""

    ALWAYS = "always"
    FOLLOW = "follow"
    ROUND = "round"
    GATHER = "gather"
    NEVER = "never"


_ALWAYS = ("nn.conv2d", "nn.dense", "nn.matmul", "nn.batch_matmul", "nn.attention")
_FOLLOW = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negative", "nn.relu",
    "nn.leaky_relu", "clip", "tanh", "sigmoid", "erf", "nn.bias_add", "nn.max_pool2d",
    "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d", "nn.pad", "reshape",
    "nn.batch_flatten", "squeeze", "expand_dims", "transpose", "concatenate", "strided_slice",
)
_ROUND = ("nn.layer_norm", "nn.rms_norm")
_GATHER = ("take", "gather_nd", "gather_elements")
_NEVER = (
    "nn.softmax", "nn.batch_norm", "mean", "exp", "log",
    "power", "sqrt", "rsqrt", "nn.conv2d_winograd", "nn.winograd_weight_transform",
)

MIXED_PRECISION_POLICY: dict[str, MixedPolicy] = {
    **{op: MixedPolicy.ALWAYS for op in _ALWAYS},
    **{op: MixedPolicy.FOLLOW for op in _FOLLOW},
    **{op: MixedPolicy.ROUND for op in _ROUND},
    **{op: MixedPolicy.GATHER for op in _GATHER},
    **{op: MixedPolicy.NEVER for op in _NEVER},
}
"""The policy of each operator (others are ``NEVER``). Average pooling accumulates in
float32 inside the operator, so it may FOLLOW; ``tanh``, ``sigmoid`` and ``erf`` compute in
float32 and round once (docs/precision.md)."""

LOW_PRECISIONS = ("float16", "bfloat16")

CONFIG_KEEP_NORMS_FLOAT32 = "to_mixed_precision.keep_norms_float32"
"""The pass context config key overriding ``keep_norms_float32`` (True or False)."""


CONFIG_KEEP_GATHERS_FLOAT32 = "to_mixed_precision.keep_gathers_float32"
"""The pass context config key overriding ``keep_gathers_float32`` (True or False)."""


def policy_of(op: str, keep_norms_float32: bool = False,
              keep_gathers_float32: bool = False) -> MixedPolicy:
    """The mixed-precision policy of operator ``op`` (``ROUND`` operators are ``NEVER``
    with ``keep_norms_float32``, ``GATHER`` operators with ``keep_gathers_float32``)."""
    policy = MIXED_PRECISION_POLICY.get(op, MixedPolicy.NEVER)
    if keep_norms_float32 and policy is MixedPolicy.ROUND:
        return MixedPolicy.NEVER
    if keep_gathers_float32 and policy is MixedPolicy.GATHER:
        return MixedPolicy.NEVER
    return policy


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


def _output_sources(graph: Graph) -> set[int]:
    """The nodes that are graph outputs or reach one through views (reshapes): a norm
    among them keeps its float32 result, which is not rounded to leave the network."""
    found: set[int] = set()
    for node in graph.outputs:
        while True:
            found.add(id(node))
            if not (isinstance(node, Call) and node.op in VIEW_OPS):
                break
            node = node.args[0]
    return found


def _tables_read_low(graph: Graph, low: str, keep_norms: set[int] | bool) -> set[int]:
    """The gathers of float32 constant tables whose result is read in ``low`` (policy
    ``GATHER`` in the module doc): followed forward through float32 ``FOLLOW`` operators,
    it reaches the data of an ``ALWAYS`` or ``ROUND`` operator, or a cast to ``low``.
    ``keep_norms``: True, or the ids of the norms that run as ``NEVER`` (outputs)."""
    users: dict[int, list[Call]] = {}
    for call in graph.calls():
        for a in call.args:
            users.setdefault(id(a), []).append(call)

    def reads_low(reader: Call, k: int) -> bool:
        if reader.op == "cast":
            return reader.dtype == low
        keep = keep_norms if isinstance(keep_norms, bool) else id(reader) in keep_norms
        policy = policy_of(reader.op, keep)
        if policy is MixedPolicy.ALWAYS:
            return not (reader.op == "nn.attention" and k == 3)  # the mask stays float32
        return policy is MixedPolicy.ROUND and k == 0  # the data, not the scale and shift

    found: set[int] = set()
    for call in graph.calls():
        if (policy_of(call.op) is not MixedPolicy.GATHER or call.dtype != "float32"
                or not isinstance(call.args[0], Constant)):
            continue
        todo, seen = [call], {id(call)}
        while todo and id(call) not in found:
            node = todo.pop()
            for reader in users.get(id(node), ()):
                for k, a in enumerate(reader.args):
                    if a is not node:
                        continue
                    if reads_low(reader, k):
                        found.add(id(call))
                    elif (policy_of(reader.op) is MixedPolicy.FOLLOW
                          and reader.dtype == "float32" and id(reader) not in seen):
                        seen.add(id(reader))
                        todo.append(reader)
    return found


@register_graph_pass
@dataclass(frozen=True)
class ToMixedPrecision(GraphPass):
    """Run the float32 parts of a network in ``dtype`` where the policy table allows.

    Parameters:
        dtype: ``"float16"`` or ``"bfloat16"``.
        keep_io_dtype: return the outputs in their original dtype (True), or leave float32
            outputs that end in a low-precision region in ``dtype``.
        keep_norms_float32: run layer and RMS norms in float32 in and out (``NEVER``)
            instead of ``ROUND`` (the module's docstring); the pass context config
            :data:`CONFIG_KEEP_NORMS_FLOAT32`, where given, overrides it.
        keep_gathers_float32: run gathers (``take``: embedding lookups) in float32 from
            float32 tables (``NEVER``) instead of ``GATHER`` (the module's docstring); the
            config :data:`CONFIG_KEEP_GATHERS_FLOAT32`, where given, overrides it.
    """

    name = "to_mixed_precision"
    dtype: str = "float16"
    keep_io_dtype: bool = True
    keep_norms_float32: bool = False
    keep_gathers_float32: bool = False

    def apply(self, graph: Graph, ctx) -> Graph:
        low = self.dtype
        if low not in LOW_PRECISIONS:
            raise GraphError(f"to_mixed_precision: dtype must be one of {LOW_PRECISIONS}, "
                             f"got {low!r}")
        config = getattr(ctx, "config", {})
        keep32 = config.get(CONFIG_KEEP_NORMS_FLOAT32, self.keep_norms_float32)
        gathers32 = config.get(CONFIG_KEEP_GATHERS_FLOAT32, self.keep_gathers_float32)
        for key, value in ((CONFIG_KEEP_NORMS_FLOAT32, keep32),
                           (CONFIG_KEEP_GATHERS_FLOAT32, gathers32)):
            if not isinstance(value, bool):
                raise GraphError(f"{key} in the pass context's config is a bool, got "
                                 f"{value!r}")
        outs = _output_sources(graph) if self.keep_io_dtype else set()
        tables = set() if gathers32 else _tables_read_low(graph, low, keep32 or outs)
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
            new[id(node)] = self._convert(node, args, cast, keep32 or id(node) in outs,
                                          gathers32, id(node) in tables)
        outputs = []
        for o in graph.outputs:
            out = new[id(o)]
            outputs.append(cast(out, o.dtype) if self.keep_io_dtype else out)
        return Graph(graph.params, outputs, graph.name, graph.attrs)

    def _convert(self, call: Call, args: list[Node], cast: _Caster,
                 keep_norms_float32: bool, keep_gathers_float32: bool,
                 table_read_low: bool) -> Node:
        low, attrs = self.dtype, dict(call.attrs)
        floats = [k for k, a in enumerate(call.args) if a.dtype == "float32"]
        if (call.op == "cast" and call.args[0].dtype == "float32"
                and args[0].dtype in LOW_PRECISIONS):
            # a graph's own cast of a value now computed in 16 bits reads that value: the
            # cast up to float32 in between is exact, and a cast to the same dtype is none
            return args[0] if args[0].dtype == call.dtype else Call("cast", [args[0]], attrs)
        if call.op == "cast" or call.dtype != "float32" or not floats:
            # not a float32 computation: its arguments go back to their original dtypes
            return Call(call.op, [cast(a, o.dtype) for a, o in zip(args, call.args)], attrs)
        policy = policy_of(call.op, keep_norms_float32, keep_gathers_float32)
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
        if policy is MixedPolicy.GATHER and (args[0].dtype == low or table_read_low):
            # a gather only moves values: low data as it is, or the low copy of a float32
            # constant table (folded and shared by the caster's memo); indices unchanged
            return Call(call.op, [cast(args[0], low), *args[1:]], attrs)
        if policy is MixedPolicy.ROUND:
            # the data as it comes (the kernel computes in float32 whatever it reads), the
            # scale and shift in float32, the result rounded once to ``low``
            data = args[0]  # float32 or ``low``: this call's data was float32
            attrs["out_dtype"] = "" if data.dtype == low else low
            params = [cast(a, o.dtype) for a, o in zip(args[1:], call.args[1:])]
            return Call(call.op, [data, *params], attrs)
        return Call(call.op, [cast(a, o.dtype) for a, o in zip(args, call.args)], attrs)
