"""Small helpers the ONNX converters share: optional inputs, string attributes, refusals."""

from __future__ import annotations

from ..frontend_onnx import OnnxImportError


def has_input(node, k: int) -> bool:
    """Whether ``node`` gives its ``k``-th input (ONNX leaves an optional one out or empty)."""
    return len(node.input) > k and bool(node.input[k])


def text_attr(value, default: str) -> str:
    """A string attribute as ``str`` (ONNX stores bytes), ``default`` where it is absent."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def refuse(node, message: str):
    """Raise the import error for ``node``, naming its operator and name."""
    raise OnnxImportError(f"{node.op_type} {node.name!r}: {message}")
