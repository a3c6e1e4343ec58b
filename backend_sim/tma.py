"""mbarriers and TMA copies in the simulator.

Per block of a chunk and mbarrier (an element of a shared ``uint64`` buffer) the state is
the hardware's: the expected arrivals of a phase, the arrivals still pending, the
transaction count (bytes expected by ``expect_tx`` less bytes completed by copies) and the
phase number. A phase completes when no arrival is pending and the transaction count is
zero; the barrier then moves to the next phase, expecting the same arrivals.

A ``tma_load`` reads its box from the global tensor when it is issued (zeros outside the
tensor), permutes it by the map's swizzle exactly as the hardware lays it out in shared
memory (so a wgmma descriptor over the tile reads the right elements), and completes its
bytes on its barrier at once. Its data *lands* in shared memory only when a thread's
``mbarrier_wait`` observes the phase it completed: until then its destination elements are
in flight, and an ordinary read or store of one of them is an error (the wait that makes
the data visible is missing), as is a second copy to them.

The simulator runs a block's threads in program order, so a wait whose phase is not
complete when it runs cannot be released by later statements: it raises
:class:`SimBarrierError` (on the GPU the wait hangs unless threads the simulator runs later
complete the phase first; a producer's copies must precede the consumers' waits in program
order, e.g. in one loop skewed by the pipeline's depth). So do a copy to an uninitialised
barrier, a copy whose barrier's initialisation no ``fence.mbarrier_init`` published, more
arrivals in a phase than it expects, and a kernel that ends with a phase still expecting
transaction bytes (``expect_tx`` and the copies' bytes disagree).
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir.intrin.tma import shared_align, swizzle_bytes
from ..ir.stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
)
from .errors import SimBarrierError, SimIRError, SimMemoryError, SimRaceError


class _Barriers:
    """The mbarriers of one shared buffer, per block of the chunk."""

    def __init__(self, nblocks: int, size: int):
        shape = (nblocks, size)
        self.ready = np.zeros(shape, bool)  # initialised
        self.fenced = np.zeros(shape, bool)  # initialisation published (fence.mbarrier_init)
        self.expected = np.zeros(shape, np.int64)
        self.pending = np.zeros(shape, np.int64)
        self.tx = np.zeros(shape, np.int64)
        self.phase = np.zeros(shape, np.int64)


class TmaState:
    """The mbarriers and TMA copies in flight of one chunk of blocks."""

    def __init__(self, chunk):
        self.chunk = chunk
        self.bars: dict[str, _Barriers] = {}
        # copies not landed: (barrier name, block, index, phase, dst, keys, values)
        self.copies: list = []
        self.inflight: dict = {}  # id(dst array) -> count of in-flight copies per element
        # called with (destination array, keys, False) at a copy's issue: the wgmma state
        # refuses a copy over a tile that wgmmas not yet waited for read
        self.on_issue = None

    # state lookups ----------------------------------------------------------------------
    def _active(self, mask) -> np.ndarray:
        c = self.chunk
        return np.arange(c.lanes) if mask is None else np.flatnonzero(mask)

    def _at(self, name: str, size: int, index, act: np.ndarray, what: str):
        """The blocks and barrier indices of the active lanes."""
        c = self.chunk
        bars = self.bars.get(name)
        if bars is None:
            bars = self.bars[name] = _Barriers(c.nblocks, size)
        idx = np.broadcast_to(np.asarray(index, np.int64), (c.lanes,)).take(act)
        bad = (idx < 0) | (idx >= size)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimMemoryError(f"illegal memory access: kernel {c.kernel}, {what} on "
                                 f"mbarrier {name}[{int(idx[j])}] outside [0, {size}) "
                                 f"({c.where(act[j])})")
        return bars, c.lblk.take(act).astype(np.int64), idx

    def _require_ready(self, bars, blk, idx, act, name: str, what: str) -> None:
        bad = ~bars.ready[blk, idx]
        if bad.any():
            j = int(np.argmax(bad))
            c = self.chunk
            raise SimBarrierError(
                f"kernel {c.kernel}: {c.where(act[j])} {what} mbarrier {name}[{int(idx[j])}] "
                "before any thread initialised it (mbarrier_init, fence_mbarrier_init and a "
                "barrier first)")

    def _complete(self, name: str, bars: _Barriers, blk, idx) -> None:
        """Move the barriers among ``(blk, idx)`` whose phase is complete to the next."""
        done = (bars.pending[blk, idx] == 0) & (bars.tx[blk, idx] == 0)
        if not done.any():
            return
        b, i = blk[done], idx[done]
        bars.phase[b, i] += 1
        bars.pending[b, i] = bars.expected[b, i]

    # statements -------------------------------------------------------------------------
    def init(self, name: str, size: int, index, count: int, mask) -> None:
        act = self._active(mask)
        if act.size == 0:
            return
        bars, blk, idx = self._at(name, size, index, act, "mbarrier_init")
        bars.ready[blk, idx] = True
        bars.fenced[blk, idx] = False
        bars.expected[blk, idx] = count
        bars.pending[blk, idx] = count
        bars.tx[blk, idx] = 0
        bars.phase[blk, idx] = 0

    def fence_init(self, mask) -> None:
        """``fence.mbarrier_init``: every barrier initialised so far in the lanes' blocks is
        visible to the async proxy."""
        act = self._active(mask)
        blocks = np.unique(self.chunk.lblk.take(act))
        for bars in self.bars.values():
            sel = bars.ready[blocks]
            bars.fenced[blocks] |= sel

    def arrive(self, name: str, size: int, index, tx: int | None, mask) -> None:
        act = self._active(mask)
        if act.size == 0:
            return
        what = "mbarrier_arrive" if tx is None else "mbarrier_arrive_expect_tx"
        bars, blk, idx = self._at(name, size, index, act, what)
        self._require_ready(bars, blk, idx, act, name, f"arrives ({what}) at")
        if tx:
            np.add.at(bars.tx, (blk, idx), tx)
        np.subtract.at(bars.pending, (blk, idx), 1)
        over = bars.pending[blk, idx] < 0
        if over.any():
            j = int(np.argmax(over))
            c = self.chunk
            raise SimBarrierError(
                f"kernel {c.kernel}: {c.where(act[j])} arrives at mbarrier "
                f"{name}[{int(idx[j])}] in a phase whose {int(bars.expected[blk[j], idx[j]])} "
                "expected arrivals are all in (its transaction bytes still outstanding): the "
                "arrival count of mbarrier_init must equal the threads that arrive a phase")
        self._complete(name, bars, blk, idx)

    def load(self, dname: str, dst: np.ndarray, dkey, dindex, dsize: int, esize: int,
             src: np.ndarray, shape: tuple, box: tuple, swizzle: str, coords: list,
             bname: str, bsize: int, bindex, mask) -> None:
        """``tma_load`` by the lanes in ``mask`` (each lane one copy)."""
        c = self.chunk
        act = self._active(mask)
        if act.size == 0:
            return
        bars, blk, idx = self._at(bname, bsize, bindex, act, "tma_load")
        self._require_ready(bars, blk, idx, act, bname, "issues a tma_load completing on")
        unfenced = ~bars.fenced[blk, idx]
        if unfenced.any():
            j = int(np.argmax(unfenced))
            raise SimBarrierError(
                f"kernel {c.kernel}: {c.where(act[j])} issues a tma_load completing on "
                f"mbarrier {bname}[{int(idx[j])}], whose initialisation no "
                "fence_mbarrier_init made visible to the async proxy")
        nelem = int(np.prod(box))
        dindex = np.broadcast_to(np.asarray(dindex, np.int64), (c.lanes,)).take(act)
        dkey = np.broadcast_to(np.asarray(dkey, np.int64), (c.lanes,)).take(act)
        align = shared_align(swizzle)
        bad = (dindex < 0) | (dindex + nelem > dsize)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimMemoryError(
                f"illegal memory access: kernel {c.kernel}, tma_load destination "
                f"{dname}[{int(dindex[j])}:{int(dindex[j]) + nelem}] outside [0, {dsize}) "
                f"({c.where(act[j])})")
        bad = dindex * esize % align != 0
        if bad.any():
            j = int(np.argmax(bad))
            raise SimMemoryError(
                f"misaligned address: kernel {c.kernel}, tma_load to {dname}[{int(dindex[j])}] "
                f"at byte {int(dindex[j]) * esize}, not a multiple of {align} ({swizzle} "
                f"swizzle) ({c.where(act[j])})")
        # where each element of the dense box lies once swizzled
        place = swizzle_bytes(np.arange(nelem, dtype=np.int64) * esize, swizzle) // esize
        grid = np.indices(box, dtype=np.int64).reshape(len(box), -1)
        counts = self._count(dname, dst)
        for n, lane in enumerate(act):
            at = np.array([int(np.broadcast_to(co, (c.lanes,))[lane]) for co in coords],
                          np.int64)
            pos = grid + at[:, None]
            inside = np.all((pos >= 0) & (pos < np.asarray(shape)[:, None]), axis=0)
            flat = np.ravel_multi_index(tuple(np.clip(pos, 0, np.asarray(shape)[:, None] - 1)),
                                        shape)
            values = np.where(inside, src.take(flat), np.zeros((), src.dtype))
            keys = dkey[n] + place
            if counts[keys].any():
                raise SimRaceError(
                    f"kernel {c.kernel}: {c.where(lane)} issues a tma_load to {dname}"
                    f"[{int(dindex[n])}..] while an earlier copy to those elements has not "
                    "landed (no mbarrier_wait observed its phase)")
            if self.on_issue is not None:
                self.on_issue(dst, keys, False)
            counts[keys] += 1
            b, i = int(blk[n]), int(idx[n])
            self.copies.append((bname, b, i, int(bars.phase[b, i]), dst, keys, values))
            bars.tx[b, i] -= nelem * esize
            self._complete(bname, bars, blk[n:n + 1], idx[n:n + 1])

    def wait(self, name: str, size: int, index, parity, mask) -> None:
        c = self.chunk
        act = self._active(mask)
        if act.size == 0:
            return
        bars, blk, idx = self._at(name, size, index, act, "mbarrier_wait")
        self._require_ready(bars, blk, idx, act, name, "waits on")
        par = np.broadcast_to(np.asarray(parity, np.int64), (c.lanes,)).take(act)
        phase = bars.phase[blk, idx]
        blocked = (phase % 2) == (par & 1)
        if blocked.any():
            j = int(np.argmax(blocked))
            b, i = blk[j], idx[j]
            raise SimBarrierError(
                f"kernel {c.kernel}: {c.where(act[j])} waits on mbarrier {name}[{int(i)}] for "
                f"the phase of parity {int(par[j]) & 1} (phase {int(phase[j])}), which still "
                f"expects {int(bars.pending[b, i])} arrival(s) and {int(bars.tx[b, i])} "
                "transaction bytes, and nothing earlier in program order completes it: a "
                "deadlock on the GPU unless threads the simulator runs later complete it "
                "first (issue a phase's copies and arrivals before its waits in program "
                "order, or check the parity and the expect_tx bytes)")
        # the waiters' blocks see every copy of a phase that completed
        seen = set(zip(blk.tolist(), idx.tolist()))
        keep = []
        for rec in self.copies:
            bname, b, i, ph, dst, keys, values = rec
            if bname == name and (b, i) in seen and ph < bars.phase[b, i]:
                dst[keys] = values
                self.inflight[id(dst)][1][keys] -= 1
            else:
                keep.append(rec)
        self.copies = keep

    # checks -----------------------------------------------------------------------------
    def check(self, name: str, dst: np.ndarray, key, mask, verb: str) -> None:
        """Fail if an active lane reads or stores an element a TMA copy has in flight."""
        entry = self.inflight.get(id(dst))
        if entry is None or not self.copies:
            return
        count = entry[1]
        c = self.chunk
        hit = np.broadcast_to(count.take(np.asarray(key), mode="clip") > 0, (c.lanes,))
        if mask is not None:
            hit = hit & mask
        if hit.any():
            lane = int(np.argmax(hit))
            k = int(np.broadcast_to(np.asarray(key), (c.lanes,))[lane])
            raise SimRaceError(
                f"TMA copy not waited for: kernel {c.kernel}, {c.where(lane)} {verb} "
                f"{name} (element {k} of the chunk's copies) while a tma_load to it has not "
                "landed; an mbarrier_wait on the copy's barrier and phase must come first")

    def wgmma_read(self, name: str, arr: np.ndarray, keys, what: str) -> None:
        """Fail if a wgmma reads elements a TMA copy has in flight (no wait observed it)."""
        entry = self.inflight.get(id(arr))
        if entry is None or not self.copies:
            return
        if (entry[1].take(keys) > 0).any():
            raise SimRaceError(
                f"TMA copy not waited for: kernel {self.chunk.kernel}, {what} reads {name} "
                "while a tma_load to it has not landed; an mbarrier_wait on the copy's "
                "barrier and phase must come before the wgmma")

    def finish(self) -> None:
        """The kernel's end: no phase left expecting transaction bytes."""
        c = self.chunk
        for name, bars in self.bars.items():
            left = np.argwhere(bars.ready & (bars.tx != 0))
            if left.size:
                b, i = (int(x) for x in left[0])
                raise SimBarrierError(
                    f"kernel {c.kernel}: mbarrier {name}[{i}] of block {b + c.first} ends the "
                    f"kernel with {int(bars.tx[b, i])} transaction bytes outstanding in its "
                    "phase: the expect_tx bytes and the bytes of the copies completing on it "
                    "differ")

    def _count(self, name: str, dst: np.ndarray) -> np.ndarray:
        entry = self.inflight.get(id(dst))
        if entry is None:
            entry = self.inflight[id(dst)] = (name, np.zeros(dst.size, np.int32))
        return entry[1]


class TmaEmitter:
    """Mixin of the kernel generator: code for the TMA and mbarrier statements and the
    in-flight check of ordinary accesses to TMA destinations."""

    def tma_setup(self, body, prelude, walk) -> None:
        stmts = [s for s in walk(body) if isinstance(
            s, (MbarrierInit, MbarrierArrive, MbarrierWait, FenceMbarrierInit, TmaLoad))]
        self.has_tma = bool(stmts)
        self.tma_dsts = {s.dst for s in stmts if isinstance(s, TmaLoad)}
        # the run-time state is keyed by label: the buffer's name, made unique
        self.bar_labels: dict = {}
        for s in stmts:
            b = getattr(s, "barrier", None)
            if b is not None and b not in self.bar_labels:
                taken = set(self.bar_labels.values())
                label, n = b.name, 0
                while label in taken:
                    n += 1
                    label = f"{b.name}#{n}"
                self.bar_labels[b] = label
        if self.has_tma:
            prelude.line("_T = _TmaState(_C)")

    def tma_stmt(self, s, B) -> None:
        if isinstance(s, FenceMbarrierInit):
            B.line(f"_T.fence_init({B.mask})")
            return
        if isinstance(s, TmaLoad):
            self._tma_load(s, B)
            return
        bar = self._barrier(s.barrier)
        idx = self.mat(self.ex(s.index, B), B)
        if isinstance(s, MbarrierInit):
            B.line(f"_T.init({bar}, {idx}, {s.count}, {B.mask})")
        elif isinstance(s, MbarrierArrive):
            B.line(f"_T.arrive({bar}, {idx}, {s.tx_bytes}, {B.mask})")
        else:
            par = self.mat(self.ex(s.parity, B), B)
            B.line(f"_T.wait({bar}, {idx}, {par}, {B.mask})")

    def _barrier(self, b) -> str:
        info = self.facts.buffer(b)
        if info.scope != "shared":
            raise SimIRError(f"kernel {self.name}: mbarrier buffer {b.name} is {info.scope}; "
                             "mbarriers live in shared memory")
        return f"{self.bar_labels[b]!r}, {b.size}"

    def _tma_load(self, s: TmaLoad, B) -> None:
        d = self.facts.buffer(s.dst)
        src = self.facts.buffer(s.tmap)
        if d.scope != "shared":
            raise SimIRError(f"kernel {self.name}: tma_load into {s.dst.name} ({d.scope}); a "
                             "TMA copy writes shared memory")
        di = self.mat(self.ex(s.dst_index, B), B)
        key = di
        if d.copies:
            key = self.mat(self.ex(self.key_expr(d, s.dst_index), B), B)
        coords = "[" + ", ".join(self.mat(self.ex(c, B), B) for c in s.coords) + "]"
        bidx = self.mat(self.ex(s.bar_index, B), B)
        t = s.tmap
        B.line(f"_T.load({s.dst.name!r}, {d.code}, {key}, {di}, {d.size}, "
               f"{dt.nbytes(s.dst.dtype)}, {src.code}, {tuple(t.shape)!r}, {tuple(t.box)!r}, "
               f"{t.swizzle!r}, {coords}, {self._barrier(s.barrier)}, {bidx}, {B.mask})")

    def async_check(self, buffer, code: str, pos: str, B, verb: str) -> None:
        if buffer in self.tma_dsts:
            B.line(f"_T.check({buffer.name!r}, {code}, {pos}, {B.mask}, {verb!r})")
        super().async_check(buffer, code, pos, B, verb)


__all__ = ["TmaEmitter", "TmaState"]
