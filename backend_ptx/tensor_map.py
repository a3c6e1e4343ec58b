"""Tensor maps in kernel launches: a kernel parameter that is a
:class:`~ptxforge.ir.stmt_tma.TensorMap` is declared ``.param .align 64 .b8 name[128]`` and
passed by value. The caller hands the launch the tensor's device pointer, like any buffer;
the launch encodes the map from it (:func:`~.cuda_driver.encode_tensor_map`, cached per
address) into a 64-byte aligned 128-byte slot that the parameter's entry of
``kernelParams`` points to.
"""

from __future__ import annotations

import ctypes
import re

from ..ir.intrin.tma import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES
from ..ir.stmt_tma import TensorMap

_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)(?:\s+\.ptr[^,)]*)?\s+"
                       r"(\w+)(\[(\d+)\])?")


def tensor_map_params(func) -> dict:
    """``{parameter index: TensorMap}`` of a device-IR kernel (None: none)."""
    if func is None:
        return {}
    return {i: p for i, p in enumerate(func.params) if isinstance(p, TensorMap)}


def ptx_tensor_map_params(ptx: str, symbol: str) -> list[int]:
    """Indices of the by-value 128-byte parameters of entry ``symbol`` in ``ptx``."""
    m = re.search(rf"\.entry\s+{re.escape(symbol)}\s*\(([^)]*)\)", ptx)
    if m is None:
        return []
    out = []
    for i, part in enumerate(p for p in m.group(1).split(",") if p.strip()):
        pm = _PARAM_RE.search(part)
        if pm and pm.group(5) == str(TENSOR_MAP_BYTES) and pm.group(2) == "b8":
            out.append(i)
    return out


class TensorMapSlots:
    """The 128-byte parameter slots of one loaded kernel's tensor maps."""

    def __init__(self, compiled, maps: dict, slots) -> None:
        launch = compiled.launch
        ptx = compiled.sources.get("ptx")
        # a builder keeps no sources of a kernel it assembled (only the cubin travels to
        # the runner): the device IR's maps are then the whole word, as the PTX was made
        # from that device IR; with the PTX at hand the two are checked against each other
        want = (sorted(maps) if ptx is None
                else ptx_tensor_map_params(ptx, launch.symbol))
        missing = [i for i in want if i not in maps]
        if missing:
            names = ", ".join(launch.params[i].name for i in missing)
            raise ValueError(
                f"kernel {compiled.name} takes tensor maps ({names}) by value, but no "
                "TensorMap parameter describes them; load it through its module "
                "(PtxModule.load), which reads them off the device IR")
        self.maps = {i: m for i, m in maps.items() if i in want}
        extra = sorted(set(maps) - set(want))
        if extra:
            raise ValueError(f"kernel {compiled.name}: parameters {extra} are tensor maps in "
                             "the device IR but not by-value maps in its PTX")
        self._buffers = {}
        self._addrs = {}
        for i in self.maps:
            # a 128-byte slot on a 64-byte boundary (the map's alignment)
            raw = (ctypes.c_uint8 * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN))()
            addr = -(-ctypes.addressof(raw) // TENSOR_MAP_ALIGN) * TENSOR_MAP_ALIGN
            self._buffers[i] = raw
            self._addrs[i] = addr
            slots[i] = addr
        self._last: dict = {}

    def fill(self, ptrs) -> None:
        """Encode (or reuse) each map for the tensor pointer the launch passes there."""
        from .cuda_driver import encode_tensor_map

        for i, m in self.maps.items():
            ptr = int(ptrs[i])
            if self._last.get(i) == ptr:
                continue
            data = encode_tensor_map(ptr, m.dtype, m.shape, m.box, m.swizzle)
            ctypes.memmove(self._addrs[i], data, TENSOR_MAP_BYTES)
            self._last[i] = ptr


__all__ = ["TensorMapSlots", "ptx_tensor_map_params", "tensor_map_params"]
