"""The tensor memory accelerator (TMA) and mbarriers in the IR (device IR, kernels only).

* :class:`TensorMap`: a kernel parameter that is a global tensor seen through a
  ``CUtensorMap`` (the kernel gets the 128-byte map by value, never a pointer);
* :class:`MbarrierInit`, :class:`FenceMbarrierInit`, :class:`MbarrierArrive` (with or
  without ``expect_tx``), :class:`MbarrierWait`: the mbarrier protocol;
* :class:`TmaLoad`: one box of a tensor map copied into shared memory, completing its
  bytes on an mbarrier.

Text forms (printer and parser): a parameter ``A: float16[256, 512] tensormap[64, 64]
swizzle(128B)``; ``mbarrier_init(bar[0], 1)``, ``fence_mbarrier_init``,
``mbarrier_arrive(bar[0])``, ``mbarrier_arrive_expect_tx(bar[0], 8192)``,
``mbarrier_wait(bar[0], parity)``, ``tma_load(A_s[0], A[r, c], bar[0])``. The facts and
limits are in :mod:`ptxforge.ir.intrin.tma`; ``docs/tma.md`` shows a kernel.
"""

from __future__ import annotations

from collections.abc import Callable

from . import dtype as dt
from .expr import Expr, IRError
from .intrin.tma import MBARRIER_MAX_COUNT, box_bytes, tensor_map_problem
from .stmt import Buffer, OperandStmt, Stmt


class TensorMap(Buffer):
    """A global tensor seen through a TMA tensor map: a kernel parameter read only by
    :class:`TmaLoad` copies of ``box`` (one extent per dimension, outermost first).

    ``shape`` is the tensor's (compact, row-major, outermost first): the host launches the
    kernel with a buffer of that many elements, and the runtime encodes the map from the
    buffer's address (``cuTensorMapEncodeTiled``, cached per address). ``swizzle``
    (``none``, ``32B``, ``64B``, ``128B``) permutes the box's 16-byte chunks in shared
    memory as wgmma's matrix descriptors of the same swizzle read them. The limits of
    ``ir/intrin/tma.py`` are checked here.
    """

    __slots__ = ("box", "swizzle")

    def __init__(self, name: str, dtype: str, shape, box, swizzle: str = "none"):
        super().__init__(name, dtype, shape, "global")
        self.box = tuple(int(b) for b in box)
        self.swizzle = swizzle
        problem = tensor_map_problem(self.dtype, self.shape, self.box, swizzle)
        if problem:
            raise IRError(f"tensor map {name}: {problem}")

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box writes (and completes on its mbarrier)."""
        return box_bytes(self.dtype, self.box)

    @property
    def box_elems(self) -> int:
        """Elements one copy of the box writes."""
        return self.box_bytes // dt.nbytes(self.dtype)

    @property
    def type_suffix(self) -> str:
        """What the text form adds after the tensor's type."""
        box = ", ".join(str(b) for b in self.box)
        return f" tensormap[{box}] swizzle({self.swizzle})"

    def __repr__(self):
        return (f"TensorMap({self.name}, {self.dtype}, {list(self.shape)}, box="
                f"{list(self.box)}, swizzle={self.swizzle})")


def _count(value, what: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or \
            not low <= value <= MBARRIER_MAX_COUNT:
        raise IRError(f"{what} must be an int {low}-{MBARRIER_MAX_COUNT}, got {value!r}")
    return value


class _BarrierStmt(OperandStmt):
    """A statement on mbarrier ``index`` of the shared ``uint64`` buffer ``barrier``."""

    __slots__ = ("barrier", "index")

    def _with(self, **kw) -> Stmt:
        raise NotImplementedError

    def exprs(self) -> tuple:
        return (self.index,)

    def map_exprs(self, fe: Callable) -> Stmt:
        i = fe(self.index)
        return self if i is self.index else self._with(index=i)

    def map_buffers(self, bmap: dict) -> Stmt:
        b = bmap.get(self.barrier)
        return self if b is None else self._with(barrier=b)


class MbarrierInit(_BarrierStmt):
    """``mbarrier.init.shared::cta.b64 [bar], count``: the mbarrier starts in phase 0,
    expecting ``count`` arrivals a phase. One thread initializes; a
    :class:`FenceMbarrierInit` and a block barrier publish it before other threads or TMA
    copies use it."""

    __slots__ = ("count",)

    def __init__(self, barrier: Buffer, index: Expr, count: int):
        self.barrier = barrier
        self.index = index
        self.count = _count(count, f"mbarrier_init of {barrier.name}: the arrival count", 1)

    def _with(self, **kw) -> Stmt:
        return MbarrierInit(kw.get("barrier", self.barrier), kw.get("index", self.index),
                            self.count)


class MbarrierArrive(_BarrierStmt):
    """``mbarrier.arrive.shared::cta.b64``: the thread is one of the phase's expected
    arrivals. With ``tx_bytes``, ``mbarrier.arrive.expect_tx``: first the phase's
    transaction count grows by that many bytes, which the TMA copies completing on the
    barrier bring back to zero (the arrival of the thread that issues the phase's
    copies)."""

    __slots__ = ("tx_bytes",)

    def __init__(self, barrier: Buffer, index: Expr, tx_bytes: int | None = None):
        self.barrier = barrier
        self.index = index
        self.tx_bytes = None if tx_bytes is None else _count(
            tx_bytes, f"mbarrier_arrive_expect_tx on {barrier.name}: the transaction bytes", 0)

    def _with(self, **kw) -> Stmt:
        return MbarrierArrive(kw.get("barrier", self.barrier), kw.get("index", self.index),
                              self.tx_bytes)


class MbarrierWait(_BarrierStmt):
    """Wait until the phase of the mbarrier whose parity is ``parity`` (int32, 0 or 1) has
    completed: a loop on ``mbarrier.try_wait.parity.shared::cta.b64``. A barrier starts in
    phase 0, so a wait for parity 1 on a fresh barrier returns at once (the phase "before"
    it: a producer's first wait on an empty slot). After the wait the thread sees the
    writes of the TMA copies that completed the phase."""

    __slots__ = ("parity",)

    def __init__(self, barrier: Buffer, index: Expr, parity: Expr):
        if not isinstance(parity, Expr) or parity.dtype != "int32":
            raise IRError(f"mbarrier_wait on {barrier.name}: the parity must be an int32 "
                          f"expression, got {parity!r}")
        self.barrier = barrier
        self.index = index
        self.parity = parity

    def exprs(self) -> tuple:
        return (self.index, self.parity)

    def map_exprs(self, fe: Callable) -> Stmt:
        i, p = fe(self.index), fe(self.parity)
        return self if i is self.index and p is self.parity else self._with(index=i, parity=p)

    def _with(self, **kw) -> Stmt:
        return MbarrierWait(kw.get("barrier", self.barrier), kw.get("index", self.index),
                            kw.get("parity", self.parity))


class FenceMbarrierInit(OperandStmt):
    """``fence.mbarrier_init.release.cluster``: makes the thread's ``mbarrier.init`` s
    visible to the async proxy (the TMA copies completing on them); a block barrier after
    it publishes them to the other threads."""

    __slots__ = ()

    def exprs(self) -> tuple:
        return ()

    def map_exprs(self, fe: Callable) -> Stmt:
        return self

    def map_buffers(self, bmap: dict) -> Stmt:
        return self


class TmaLoad(OperandStmt):
    """``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes``:
    copy the box of ``tmap`` whose first element is at ``coords`` (int32, one per
    dimension, outermost first like the tensor's indices; coordinates before the start or
    past the end are legal and those elements are written as zeros) into the shared buffer
    ``dst`` from element ``dst_index`` (dense, row-major, swizzled as the map says), and
    complete ``tmap.box_bytes`` transaction bytes on mbarrier ``bar_index`` of ``barrier``.
    One thread issues it; the waiters of the barrier's phase see the data."""

    __slots__ = ("dst", "dst_index", "tmap", "coords", "barrier", "bar_index")

    def __init__(self, dst: Buffer, dst_index: Expr, tmap: TensorMap, coords,
                 barrier: Buffer, bar_index: Expr):
        coords = tuple(coords)
        if not isinstance(tmap, TensorMap):
            raise IRError(f"tma_load into {dst.name}: the source must be a TensorMap "
                          f"parameter, got {tmap!r}")
        if len(coords) != tmap.ndim:
            raise IRError(f"tma_load of {tmap.name}: {len(coords)} coordinates for a "
                          f"{tmap.ndim}-d tensor map")
        for c in coords:
            if not isinstance(c, Expr) or c.dtype != "int32":
                raise IRError(f"tma_load of {tmap.name}: coordinates are int32 expressions, "
                              f"got {c!r}")
        if dst.dtype != tmap.dtype:
            raise IRError(f"tma_load of {tmap.name} ({tmap.dtype}) into {dst.name} "
                          f"({dst.dtype}): the dtypes differ")
        self.dst = dst
        self.dst_index = dst_index
        self.tmap = tmap
        self.coords = coords
        self.barrier = barrier
        self.bar_index = bar_index

    def replace(self, **kw) -> TmaLoad:
        return TmaLoad(kw.get("dst", self.dst), kw.get("dst_index", self.dst_index),
                       kw.get("tmap", self.tmap), kw.get("coords", self.coords),
                       kw.get("barrier", self.barrier), kw.get("bar_index", self.bar_index))

    def exprs(self) -> tuple:
        return (self.dst_index, *self.coords, self.bar_index)

    def map_exprs(self, fe: Callable) -> Stmt:
        d, b = fe(self.dst_index), fe(self.bar_index)
        c = tuple(fe(v) for v in self.coords)
        if d is self.dst_index and b is self.bar_index and all(
                x is y for x, y in zip(c, self.coords)):
            return self
        return self.replace(dst_index=d, coords=c, bar_index=b)

    def map_buffers(self, bmap: dict) -> Stmt:
        if not any(b in bmap for b in (self.dst, self.barrier, self.tmap)):
            return self
        return self.replace(dst=bmap.get(self.dst, self.dst),
                            tmap=bmap.get(self.tmap, self.tmap),
                            barrier=bmap.get(self.barrier, self.barrier))


TMA_STMTS = (MbarrierInit, MbarrierArrive, MbarrierWait, FenceMbarrierInit, TmaLoad)
"""The statements of the TMA and mbarrier protocol."""


def stmt_text(s: Stmt, name: Callable, expr: Callable) -> str:
    """The text form of one of :data:`TMA_STMTS`; ``name`` prints a buffer, ``expr`` an
    expression."""
    if isinstance(s, FenceMbarrierInit):
        return "fence_mbarrier_init"
    if isinstance(s, TmaLoad):
        coords = ", ".join(expr(c) for c in s.coords)
        return (f"tma_load({name(s.dst)}[{expr(s.dst_index)}], {name(s.tmap)}[{coords}], "
                f"{name(s.barrier)}[{expr(s.bar_index)}])")
    bar = f"{name(s.barrier)}[{expr(s.index)}]"
    if isinstance(s, MbarrierInit):
        return f"mbarrier_init({bar}, {s.count})"
    if isinstance(s, MbarrierArrive):
        if s.tx_bytes is None:
            return f"mbarrier_arrive({bar})"
        return f"mbarrier_arrive_expect_tx({bar}, {s.tx_bytes})"
    if isinstance(s, MbarrierWait):
        return f"mbarrier_wait({bar}, {expr(s.parity)})"
    raise IRError(f"not a TMA or mbarrier statement: {type(s).__name__}")


KEYWORDS = ("tma_load", "mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx",
            "mbarrier_wait", "fence_mbarrier_init")
"""Words of the text forms (never the name of a var or buffer)."""


__all__ = ["FenceMbarrierInit", "KEYWORDS", "MbarrierArrive", "MbarrierInit", "MbarrierWait",
           "TMA_STMTS", "TensorMap", "TmaLoad", "stmt_text"]
