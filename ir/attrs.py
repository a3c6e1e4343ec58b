"""Typed function attributes: the level of a function and a kernel's launch and memory facts.

These are the protocol between the levels of the IR: schedule passes record facts on a
tensor-IR function (``storage_align``), ``split_host_device`` makes kernels with their launch
extents, lowering passes and the backends read them. Every fact is a typed field of a frozen
dataclass, so a misspelt or stale key is an error where it is made, not a silent default
where it is read.

The text form (``attrs {...}`` after a function's parameters) is JSON made by
:meth:`FuncAttrs.to_json` and read back by :meth:`FuncAttrs.from_json`::

    @main(A: float32[64]) attrs {"kind": "prim"} {
    @main_kernel0(A: float32[64]) attrs {"kind": "kernel", "grid": [2, 1, 1], "block": [32, 1, 1]} {

To add a fact, add a field with a default to :class:`KernelAttrs` (or :class:`FuncAttrs`)
and, if it is not plain JSON, its conversion in ``to_json``/``from_json``.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

from .expr import IRError


class Level(enum.Enum):
    """The level of a function (its ``kind`` in the text form)."""

    PRIM = "prim"
    """Tensor IR and scheduled IR: loop nests around blocks, n-D buffers."""
    KERNEL = "kernel"
    """Device IR: one GPU kernel with a launch configuration; no blocks."""
    HOST = "host"
    """Device IR: the host function that allocates global temporaries and launches kernels."""

    @classmethod
    def parse(cls, value: str | Level) -> Level:
        """A level from its name (``"kernel"``), with an error that lists the levels."""
        if isinstance(value, Level):
            return value
        try:
            return cls(value)
        except ValueError:
            raise IRError(f"unknown function level {value!r}; expected one of "
                          f"{', '.join(lv.value for lv in cls)}") from None

    def describe(self) -> str:
        """The level in words, for error messages."""
        return {Level.PRIM: "prim (tensor/scheduled IR)", Level.KERNEL: "kernel (device IR)",
                Level.HOST: "host (device IR)"}[self]


def _dims(name: str, value) -> tuple[int, int, int]:
    ok = (isinstance(value, (tuple, list)) and len(value) == 3
          and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value))
    if not ok:
        raise IRError(f"kernel {name} must be three ints (x, y, z), got {value!r}")
    dims = tuple(int(v) for v in value)
    if any(v < 1 for v in dims):
        raise IRError(f"kernel {name} {dims} has an extent below 1")
    return dims  # type: ignore[return-value]


def _count(name: str, value) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise IRError(f"kernel {name} must be a non-negative int, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class KernelAttrs:
    """The launch and memory facts of one kernel.

    Static shared memory is not recorded: it is the sum of the kernel's shared allocations
    without a dynamic offset (:func:`ptxforge.ir.stmt.shared_memory`), so it cannot go stale.
    """

    grid: tuple[int, int, int] = (1, 1, 1)
    """Blocks per grid (x, y, z)."""
    block: tuple[int, int, int] = (1, 1, 1)
    """Threads per block (x, y, z)."""
    stages: tuple[str, ...] = ()
    """The stages (buffers written) the kernel computes, for error messages and reports."""
    flat: bool = True
    """False between ``split_host_device`` and ``flatten_buffers``: buffers are still n-D."""
    dynamic_shared_bytes: int = 0
    """Bytes of dynamic shared memory per block (passed at launch; the kernel's shared
    allocations with a dynamic offset live in it)."""
    min_blocks_per_sm: int = 0
    """Launch bound ``.minnctapersm`` (0: none): blocks that must fit on one SM at once."""

    def __post_init__(self):
        object.__setattr__(self, "grid", _dims("grid", self.grid))
        object.__setattr__(self, "block", _dims("block", self.block))
        stages = tuple(self.stages)
        if not all(isinstance(s, str) for s in stages):
            raise IRError(f"kernel stages must be names (strings), got {stages!r}")
        object.__setattr__(self, "stages", stages)
        if not isinstance(self.flat, bool):
            raise IRError(f"kernel flat must be a bool, got {self.flat!r}")
        object.__setattr__(self, "dynamic_shared_bytes",
                           _count("dynamic_shared_bytes", self.dynamic_shared_bytes))
        object.__setattr__(self, "min_blocks_per_sm",
                           _count("min_blocks_per_sm", self.min_blocks_per_sm))

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def num_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def replace(self, **changes) -> KernelAttrs:
        return dataclasses.replace(self, **changes)


_KERNEL_DEFAULTS = KernelAttrs()


@dataclass(frozen=True)
class FuncAttrs:
    """The attributes of a function: its level, and the facts that level has.

    ``launch`` is set exactly for kernels. ``storage_align`` (tensor IR) maps a buffer name
    to ``((axis, factor, offset), ...)``, recorded by the ``storage_align`` schedule pass and
    applied when ``compact_buffers`` places the buffer; ``panels`` (tensor IR) maps a buffer
    name to the width of the panels its last dimension is stored in (the ``layout_panels``
    schedule pass; ``compact_buffers`` applies it too). ``async_copy`` (tensor IR and
    kernels) names the shared buffers filled with cp.async (the ``async_copy`` schedule
    pass; ``split_host_device`` keeps each kernel's own, ``inject_async_copy`` reads them).
    ``swizzle`` (tensor IR and kernels) maps a shared buffer name to its XOR-swizzle bits
    (the ``swizzle`` schedule pass; ``swizzle_layout`` applies them). ``software_pipeline``
    (tensor IR and kernels) says that a loop carries a ``software_pipeline`` annotation, so
    ``inject_software_pipeline`` walks only such functions.
    """

    level: Level = Level.PRIM
    launch: KernelAttrs | None = None
    storage_align: Mapping[str, tuple[tuple[int, int, int], ...]] = field(
        default_factory=dict)
    async_copy: tuple[str, ...] = ()
    swizzle: Mapping[str, int] = field(default_factory=dict)
    software_pipeline: bool = False
    panels: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        level = Level.parse(self.level)
        object.__setattr__(self, "level", level)
        if level is Level.KERNEL and self.launch is None:
            object.__setattr__(self, "launch", KernelAttrs())
        if level is not Level.KERNEL and self.launch is not None:
            raise IRError(f"a {level.value} function has no launch configuration; only "
                          "kernels do")
        if self.launch is not None and not isinstance(self.launch, KernelAttrs):
            raise IRError(f"launch must be a KernelAttrs, got {self.launch!r}")
        aligns = {}
        for name, entries in dict(self.storage_align).items():
            try:
                aligns[str(name)] = tuple(sorted(
                    (int(a), int(f), int(o)) for a, f, o in entries))
            except (TypeError, ValueError):
                raise IRError(f"storage_align of {name}: expected [[axis, factor, offset], "
                              f"...], got {entries!r}") from None
        if aligns and level is not Level.PRIM:
            raise IRError("storage_align belongs to tensor-IR (prim) functions")
        object.__setattr__(self, "storage_align", aligns)
        panels = dict(self.panels)
        if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                   and v > 0 for k, v in panels.items()):
            raise IRError(f"panels maps buffer names to panel widths (positive ints), got "
                          f"{panels!r}")
        if panels and level is not Level.PRIM:
            raise IRError("panels belongs to tensor-IR (prim) functions")
        object.__setattr__(self, "panels", dict(sorted(panels.items())))
        copies = tuple(sorted(set(self.async_copy)))
        if not all(isinstance(n, str) for n in copies):
            raise IRError(f"async_copy names shared buffers (strings), got {copies!r}")
        if copies and level is Level.HOST:
            raise IRError("async_copy belongs to tensor-IR and kernel functions")
        object.__setattr__(self, "async_copy", copies)
        swizzle = dict(self.swizzle)
        if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                   for k, v in swizzle.items()):
            raise IRError(f"swizzle maps shared buffer names to bits (ints), got {swizzle!r}")
        if swizzle and level is Level.HOST:
            raise IRError("swizzle belongs to tensor-IR and kernel functions")
        object.__setattr__(self, "swizzle", dict(sorted(swizzle.items())))
        if not isinstance(self.software_pipeline, bool):
            raise IRError(f"software_pipeline is a bool, got {self.software_pipeline!r}")
        if self.software_pipeline and level is Level.HOST:
            raise IRError("software_pipeline belongs to tensor-IR and kernel functions")

    def __hash__(self):
        return hash((self.level, self.launch, tuple(sorted(self.storage_align.items())),
                     self.async_copy, tuple(self.swizzle.items()), self.software_pipeline,
                     tuple(self.panels.items())))

    # -- constructors ------------------------------------------------------------------------
    @staticmethod
    def prim() -> FuncAttrs:
        return FuncAttrs(Level.PRIM)

    @staticmethod
    def host() -> FuncAttrs:
        return FuncAttrs(Level.HOST)

    @staticmethod
    def kernel(grid=(1, 1, 1), block=(1, 1, 1), **facts) -> FuncAttrs:
        """Attributes of a kernel: ``FuncAttrs.kernel((4, 1, 1), (128, 1, 1))``."""
        return FuncAttrs(Level.KERNEL, KernelAttrs(grid, block, **facts))

    def replace(self, **changes) -> FuncAttrs:
        return dataclasses.replace(self, **changes)

    def with_launch(self, **changes) -> FuncAttrs:
        """A kernel's attributes with some launch facts changed."""
        if self.launch is None:
            raise IRError(f"a {self.level.value} function has no launch configuration")
        return dataclasses.replace(self, launch=self.launch.replace(**changes))

    # -- text form ---------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The attributes as a JSON-able dict (``kind`` first, defaults left out except the
        launch extents)."""
        out: dict = {"kind": self.level.value}
        if self.launch is not None:
            for f in dataclasses.fields(KernelAttrs):
                value = getattr(self.launch, f.name)
                if f.name in ("grid", "block") or value != getattr(_KERNEL_DEFAULTS, f.name):
                    out[f.name] = value
        if self.storage_align:
            out["storage_align"] = {k: [list(e) for e in v]
                                    for k, v in self.storage_align.items()}
        if self.panels:
            out["panels"] = dict(self.panels)
        if self.async_copy:
            out["async_copy"] = list(self.async_copy)
        if self.swizzle:
            out["swizzle"] = dict(self.swizzle)
        if self.software_pipeline:
            out["software_pipeline"] = True
        return out

    @staticmethod
    def from_json(data: Mapping) -> FuncAttrs:
        """Read :meth:`to_json`'s dict back; an unknown or misplaced key is an error that
        names the keys the level takes."""
        data = dict(data)
        level = Level.parse(data.pop("kind", "prim"))
        launch_keys = [f.name for f in dataclasses.fields(KernelAttrs)]
        shared = ["async_copy", "swizzle", "software_pipeline"]
        allowed = {Level.PRIM: ["storage_align", "panels"] + shared,
                   Level.KERNEL: launch_keys + shared, Level.HOST: []}[level]
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = (f"; did you mean {close[0]!r}?" if close else
                        f"; a {level.value} function takes "
                        f"{', '.join(repr(k) for k in allowed) if allowed else 'none'}")
                raise IRError(f"unknown attribute {key!r} of a {level.value} function{hint}")
        common = {"async_copy": data.pop("async_copy", ()), "swizzle": data.pop("swizzle", {}),
                  "software_pipeline": data.pop("software_pipeline", False)}
        if level is Level.KERNEL:
            if "grid" not in data or "block" not in data:
                raise IRError("a kernel needs its 'grid' and 'block' launch extents")
            return FuncAttrs(level, KernelAttrs(**data), **common)
        return FuncAttrs(level, storage_align=data.get("storage_align", {}),
                         panels=data.get("panels", {}), **common)
