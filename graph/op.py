"""Operator definitions: what each graph operator is, by name.

An :class:`OpDef` gives an operator its attribute defaults and checks, its type relation
(shape and dtype inference with messages that say what is wrong), its te computation (for
compiling a fused function), its numpy reference (for the reference executor and constant
folding) and its fusion pattern, as Relay's ``OpPatternKind``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from .ir import GraphError, TensorType


class OpPattern(IntEnum):
    """How an operator combines with others under fusion (Relay's ``OpPatternKind``)."""

    ELEMWISE = 0
    """Each output element reads the same element of every input."""
    BROADCAST = 1
    """Element-wise with broadcasting along some dimensions."""
    INJECTIVE = 2
    """Each output element reads one element of each input (reshape, transpose, pad)."""
    COMM_REDUCE = 3
    """A commutative reduction (mean, sum)."""
    OUT_ELEMWISE_FUSABLE = 4
    """A complex operator whose output element-wise consumers can fuse into its epilogue
    (convolution, dense, pooling)."""
    OPAQUE = 8
    """Never fused with anything (softmax, layer norm)."""


InferFn = Callable[[list[TensorType], dict], TensorType]
LowerFn = Callable[[list, dict], object]
RefFn = Callable[[list[np.ndarray], dict], np.ndarray]
NormalizeFn = Callable[[dict], dict]


@dataclass(frozen=True)
class OpDef:
    """One operator.

    Attributes:
        name: the operator's name (``"nn.conv2d"``).
        num_inputs: how many arguments it takes (None: any number, at least one).
        infer: ``(arg types, attrs) -> output type``; raises :class:`GraphError`.
        lower: ``(te tensors or scalars, attrs) -> te tensor``: the te computation.
        ref: ``(numpy arrays, attrs) -> numpy array``: the reference semantics.
        pattern: the fusion pattern, or a function of the attrs giving it.
        defaults: attribute defaults; unknown attribute names are an error.
        normalize: canonicalizes attribute values (pairs, 4-tuples) after defaults apply.
        scalar_args: indices of arguments that may be given to ``lower`` as Python scalars
            when they are one-element constants.
    """

    name: str
    num_inputs: int | None
    infer: InferFn
    lower: LowerFn
    ref: RefFn
    pattern: OpPattern | Callable[[dict], OpPattern]
    defaults: dict = field(default_factory=dict)
    normalize: NormalizeFn | None = None
    scalar_args: tuple[int, ...] = ()

    def normalize_attrs(self, attrs: dict) -> dict:
        unknown = sorted(set(attrs) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise GraphError(f"{self.name}: unknown attribute(s) {unknown}; its attributes are "
                             f"{known}")
        out = dict(self.defaults)
        out.update(attrs)
        if self.normalize is not None:
            out = self.normalize(out)
        return out

    def infer_type(self, arg_types: list[TensorType], attrs: dict) -> TensorType:
        if self.num_inputs is not None and len(arg_types) != self.num_inputs:
            raise GraphError(f"{self.name} takes {self.num_inputs} argument(s), got "
                             f"{len(arg_types)}")
        if self.num_inputs is None and not arg_types:
            raise GraphError(f"{self.name} takes at least one argument")
        return self.infer(arg_types, attrs)

    def pattern_of(self, attrs: dict) -> OpPattern:
        return self.pattern(attrs) if callable(self.pattern) else self.pattern


_OPS: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    """Add an operator to the registry (names must be new)."""
    if opdef.name in _OPS:
        raise GraphError(f"operator {opdef.name} is already registered")
    _OPS[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    """The operator called ``name``; :class:`GraphError` with close matches otherwise."""
    _load_ops()
    try:
        return _OPS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_OPS), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise GraphError(f"unknown operator {name!r}{hint}") from None


def list_ops() -> list[str]:
    """Every operator name, sorted."""
    _load_ops()
    return sorted(_OPS)


_loaded = False


def _load_ops() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import opdefs  # noqa: F401  (registers the operators)


def pattern_of(call) -> OpPattern:
    """The fusion pattern of a call node."""
    return get_op(call.op).pattern_of(call.attrs)
