"""``ptxforge.tvm``: TVM's module names mapped onto ptxforge's own API.

Code written for TVM ports by changing the import prefix only::

    import ptxforge.tvm as tvm
    from ..tvm import te, topi, autotvm, auto_scheduler

This package only maps names and arguments; docs/porting.md lists what maps to what.
"""

from .. import driver as _driver
from ..nd import cuda, gpu, sim
from . import (
    auto_scheduler,
    autotvm,
    contrib,
    nd,
    relay,
    runtime,
    target,
    te,
    testing,
    tir,
    topi,
    transform,
)

cpu = sim


def device(kind: str = "cuda", index: int = 0):
    """``tvm.device("cuda", 0)``; ``"sim"`` (or ``"cpu"``/``"llvm"``) is the CPU simulator."""
    if kind in ("cuda", "gpu", "nvptx"):
        return cuda(index)
    if kind in ("sim", "cpu", "llvm"):
        return sim(index)
    raise ValueError(f"tvm.device: unknown device kind {kind!r}; use 'cuda' or 'sim'")


def lower(sch, args=None, name: str | None = None, simple_mode: bool = False, **_ignored):
    """``tvm.lower``: the lowered device IR. ``simple_mode`` has no meaning here (the printed
    IR is always the plain one) and ``name`` only names the result in TVM; both are accepted."""
    return _driver.lower(sch, args)


def build(sch, args=None, target="cuda", target_host=None, name: str | None = None):
    """``tvm.build``: compile for ``target`` (``"cuda"`` or ``"sim"``); ``name`` (default
    ``"main"``) is the function's ``entry_name``. ``target_host`` has no meaning (the host
    side is Python) and is ignored."""
    return _driver.build(sch, args, target=target, name=name or "main")


__all__ = ["te", "topi", "autotvm", "auto_scheduler", "relay", "contrib", "target", "transform",
           "runtime",
           "testing", "tir", "nd", "cuda", "gpu", "cpu", "sim", "device", "lower", "build"]
