"""Checks of a device-IR module read from a file, before anything runs it.

The parser accepts any well-formed text, and the simulator and the GPU assume what the
compiler guarantees: operand types that fit their operators, integer indices, buffers and
launches within the target's limits. A loaded module is checked for all of it here, with
the IR verifier (:func:`ptxforge.ir.verify.verify`: types, scoping, launch and shared-memory
limits of the target) and the limit the verifier leaves to ``validate_gpu`` (local memory
per thread), so a damaged or hand-edited file is a ``ModuleFormatError`` at load rather
than a numpy error or a GPU fault later. Nothing here needs the compiler.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir.stmt import Alloc
from ..ir.traversal import walk
from .archive import ModuleFormatError


def check_device_module(path: str, module, target: str, what: str):
    """Verify ``module`` (device IR of ``what``, read from ``path``) for ``target`` (the
    manifest's target string); raise ``ModuleFormatError`` naming the fault. Returns the
    :class:`~ptxforge.target.Target`."""
    from ..ir.verify import verify
    from ..target import TargetError, as_target

    try:
        t = as_target(target)
    except (TargetError, ValueError, TypeError) as e:
        raise ModuleFormatError(f"{path}: the manifest's target {target[:60]!r} is not one "
                                f"this ptxforge knows ({e})") from None
    try:
        verify(module, target=t)
    except RecursionError:
        raise ModuleFormatError(f"{path}: the device IR of {what} is nested too deeply to "
                                "check") from None
    except Exception as e:  # noqa: BLE001 - the verifier's errors and any it trips over
        raise ModuleFormatError(f"{path}: the device IR of {what} is not valid for "
                                f"{t}: {e}") from None
    for f in module.functions.values():
        if f in module.kernels():
            continue
        for a in walk(f.body):
            if isinstance(a, Alloc):
                size = a.buffer.size * dt.nbytes(a.buffer.dtype)
                if size > t.global_memory_bytes:
                    raise ModuleFormatError(
                        f"{path}: {what} allocates {a.buffer.name} of {size} bytes; {t} has "
                        f"{t.global_memory_bytes}")
    for k in module.kernels():
        local = sum(a.buffer.size * dt.nbytes(a.buffer.dtype) for a in walk(k.body)
                    if isinstance(a, Alloc) and a.buffer.scope == "local")
        if local > t.max_local_memory_per_thread:
            raise ModuleFormatError(
                f"{path}: kernel {k.name} of {what} needs {local} bytes of local memory per "
                f"thread; {t} allows {t.max_local_memory_per_thread}")
    return t
