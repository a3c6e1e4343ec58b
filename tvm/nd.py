"""``tvm.nd``: ``array(a, device)`` (``ctx=`` too, as older TVM wrote it) and ``empty``."""

from .. import nd as _nd


def array(data, device=None, ctx=None):
    """Copy ``data`` to ``device`` (the simulator by default)."""
    return _nd.array(data, device if device is not None else ctx)


def empty(shape, dtype: str = "float32", device=None, ctx=None):
    """An uninitialized array on ``device``."""
    return _nd.empty(shape, dtype, device if device is not None else ctx)


__all__ = ["array", "empty"]
