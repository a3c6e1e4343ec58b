"""The front end and the tensor IR: dtypes, scalar expressions, te, ComputeDAG, statements."""

import importlib

# Imported on first use (PEP 562), so that loading an exported module (which parses device
# IR) does not import the te front end.
_EXPORTS = {"ComputeDAG": "compute_dag"}
_SUBMODULES = frozenset({
    "arith", "attrs", "compute_dag", "dtype", "expr", "exprprint", "intrin", "parser",
    "printer", "region", "simplify", "stmt", "te", "to_ir", "traversal", "verify"})

__all__ = ["dtype", "expr", "te", "ComputeDAG"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
