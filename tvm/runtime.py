"""``tvm.runtime``: ``load_module`` of an exported module (``ptxforge.runtime``)."""

from ..runtime import ModuleFormatError, RuntimeModule, load_module  # noqa: F401
