"""cp.async in the simulator: copies in flight, commit groups and waits.

A copy reads its source when it is issued, but its bytes land in shared memory only when
a wait of the issuing thread covers its group, as on the GPU, where the write may happen
at any time in between. Until then the destination elements are *in flight*: a read or a
store of one of them by any thread is an error (a wait that does not cover the access).
Where the copies land, the shared buffer's race tracker sees a write by the issuing thread
at that point, so a reader in another thread still needs a barrier after the wait. At
issue, the destination must not have been read by another thread in the current barrier
interval (the copy may land at once).

:class:`AsyncCopyEmitter` emits the calls into generated kernels; :class:`AsyncCopies`
holds the state of one chunk of lanes.
"""

from __future__ import annotations

import numpy as np

from ..ir.stmt import AsyncCommit, AsyncCopy, AsyncWait, Stmt
from .errors import SimMemoryError, SimRaceError
from .runtime import _differs


class AsyncCopies:
    """The in-flight copies of one chunk: per lane, its count of committed groups; per
    copy, the lanes, group, destination keys and values not landed yet."""

    def __init__(self, chunk):
        self.chunk = chunk
        self.committed = np.zeros(chunk.lanes, np.int64)
        self.records: list = []
        self.inflight: dict = {}  # destination array id -> (name, count per element)
        # called with (destination array, keys, landed) at issue and at landing: the wgmma
        # state checks the writes of the tiles it reads
        self.on_write = None

    # issue ------------------------------------------------------------------------------
    def copy(self, dname: str, dst: np.ndarray, race, dkey, dindex, dsize: int,
             sname: str, src: np.ndarray, sindex, ssize: int, lanes: int, nbytes: int,
             src_bytes, mask) -> None:
        """Issue ``cp.async`` of ``lanes`` elements for the lanes in ``mask``."""
        c = self.chunk
        act = np.arange(c.lanes) if mask is None else np.flatnonzero(mask)
        if act.size == 0:
            return
        dkey, dindex, sindex = (_per_lane(x, c.lanes).take(act).astype(np.int64)
                                for x in (dkey, dindex, sindex))
        # the element's size in the device IR (a bfloat16 buffer is held in a float32
        # array on the host, so the array's itemsize is not the copy's)
        esize = nbytes // lanes
        count = np.full(act.size, nbytes, np.int64) if src_bytes is None else \
            _per_lane(src_bytes, c.lanes).take(act).astype(np.int64)
        bad = (count < 0) | (count > nbytes) | (count % esize != 0)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimMemoryError(
                f"kernel {c.kernel}: cp.async of {nbytes} bytes to {dname} reads "
                f"{int(count[j])} bytes; the src-size must be whole {dst.dtype} elements "
                f"from 0 to {nbytes} ({c.where(act[j])})")
        count //= esize
        ok = count > 0
        for what, name, index, size, n in (("destination", dname, dindex, dsize, lanes),
                                           ("source", sname, sindex, ssize, count)):
            sel = n > 0
            bad = sel & ((index < 0) | (index + n > size))
            if bad.any():
                j = int(np.argmax(bad))
                raise SimMemoryError(
                    f"illegal memory access: kernel {c.kernel}, cp.async {what} {name}"
                    f"[{int(index[j])}:{int(index[j] + np.broadcast_to(n, index.shape)[j])}] "
                    f"outside [0, {size}) "
                    f"({c.where(act[j])})")
            bad = sel & (index * esize % nbytes != 0)
            if bad.any():
                j = int(np.argmax(bad))
                raise SimMemoryError(
                    f"misaligned address: kernel {c.kernel}, cp.async of {nbytes} bytes "
                    f"with {what} {name}[{int(index[j])}] at byte offset "
                    f"{int(index[j]) * esize}, not a multiple of {nbytes} ({c.where(act[j])})")
        step = np.arange(lanes, dtype=np.int64)
        keys = (dkey[:, None] + step).reshape(-1)
        read = step < count[:, None]
        skeys = np.where(read, np.where(ok, sindex, 0)[:, None] + step, 0)
        values = np.where(read, src.take(skeys), np.zeros((), src.dtype)).reshape(-1)
        if race is not None:
            self._check_unread(race, keys, np.repeat(act, lanes), "is the target of a cp.async")
        if self.on_write is not None:
            self.on_write(dst, keys, False)
        lane_of = np.repeat(act, lanes)
        group = self.committed.take(lane_of)
        count = self._count(dname, dst, dsize)
        np.add.at(count, keys, 1)
        self.records.append((dst, race, keys, values, lane_of, group))

    def commit(self, mask) -> None:
        if mask is None:
            self.committed += 1
        else:
            self.committed[np.asarray(mask)] += 1

    def wait(self, pending: int, mask) -> None:
        """``cp.async.wait_group pending`` for the lanes in ``mask``: land every copy of a
        group at least ``pending`` groups older than the lane's last commit."""
        c = self.chunk
        waiting = np.ones(c.lanes, bool) if mask is None else np.asarray(mask, bool)
        keep = []
        for rec in self.records:
            dst, race, keys, values, lane_of, group = rec
            done = waiting.take(lane_of) & (group < self.committed.take(lane_of) - pending)
            if not done.any():
                keep.append(rec)
                continue
            k, v, lanes = keys[done], values[done], lane_of[done]
            np.subtract.at(self.inflight[id(dst)][1], k, 1)
            if race is not None:
                self._land(race, dst, k, v, lanes)
            dst[k] = v
            if self.on_write is not None:
                self.on_write(dst, k, True)
            if race is not None and k.size > 1:
                lost = _differs(dst.take(k), v)
                if lost.any():  # two threads' copies land different values on one element
                    j = int(np.argmax(lost))
                    other = lanes[np.flatnonzero(k == k[j])[-1]]
                    self._waw(race, k[j], lanes[j], other)
            if not done.all():
                rest = ~done
                keep.append((dst, race, keys[rest], values[rest], lane_of[rest], group[rest]))
        self.records = keep

    # checks of ordinary accesses ----------------------------------------------------------
    def check(self, name: str, dst: np.ndarray, key, mask, verb: str) -> None:
        """Fail if an active lane reads or stores an element whose copy is in flight."""
        entry = self.inflight.get(id(dst))
        if entry is None or not self.records:
            return
        count, size = entry[1], entry[2]
        c = self.chunk
        if np.ndim(key) == 0:
            if count[int(key)] == 0 or (mask is not None and not np.any(mask)):
                return
            lane = 0 if mask is None else int(np.argmax(mask))
            k = int(key)
        else:
            hit = count.take(key, mode="clip") > 0  # inactive lanes may hold any key
            if mask is not None:
                hit &= mask
            if not hit.any():
                return
            lane = int(np.argmax(hit))
            k = int(key[lane])
        raise SimRaceError(
            f"cp.async not waited for: kernel {c.kernel}, {c.where(lane)} {verb} "
            f"{name}[{k % size}] while a cp.async to it is in flight; a wait that "
            "covers the copy's group (async_wait) must come first (and a barrier, for "
            "reads by other threads)")

    # helpers ------------------------------------------------------------------------------
    def _count(self, name: str, dst: np.ndarray, size: int) -> np.ndarray:
        entry = self.inflight.get(id(dst))
        if entry is None:
            entry = self.inflight[id(dst)] = (name, np.zeros(dst.size, np.int32), size)
        return entry[1]

    def _waw(self, race, key, lane, other_lane, other: str = "") -> None:
        c = self.chunk
        other = other or c.where(other_lane)
        raise SimRaceError(
            f"conflicting writes: kernel {c.kernel}, a cp.async of {c.where(lane)} lands a "
            f"different value on {race.name}[{int(key) % race.size}] than {other} wrote "
            "in the same barrier interval")

    def _check_unread(self, race, keys, lanes, what: str) -> None:
        """Fail if another thread read one of ``keys`` in the current barrier interval."""
        sync = race.sync
        if race.log and race.log_interval == sync.nbar:
            race.fold()
        if race.folded != sync.nbar:
            return
        stamp, base = _stamps(sync, lanes)
        rs = race.rstamp.take(keys)
        bad = (rs >= base) & (rs != stamp)
        if bad.any():
            j = int(np.argmax(bad))
            c = self.chunk
            b = base if np.ndim(base) == 0 else base[j]
            raise SimRaceError(
                f"missing barrier: kernel {c.kernel}, {c.where(lanes[j])} issues a cp.async "
                f"to {race.name}[{int(keys[j]) % race.size}], which "
                f"{c.thread_of(int(rs[j]) - int(b))} read in the same barrier interval")

    def _land(self, race, dst, keys, values, lanes) -> None:
        """Record the landing writes in the race tracker, as stores of the issuing lanes."""
        self._check_unread(race, keys, lanes, "lands")
        stamp, base = _stamps(race.sync, lanes)
        if race.wrote == race.sync.nbar:
            ws = race.wstamp.take(keys)
            bad = (ws >= base) & (ws != stamp)
            if bad.any():
                bad &= _differs(dst.take(keys), values)
                if bad.any():
                    j = int(np.argmax(bad))
                    b = base if np.ndim(base) == 0 else base[j]
                    tid = int(ws[j]) - int(b)
                    self._waw(race, keys[j], lanes[j], None, self.chunk.thread_of(tid))
        race.wstamp[keys] = stamp
        race.wrote = race.sync.nbar


def _per_lane(x, lanes: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), (lanes,))


def _stamps(sync, lanes: np.ndarray):
    stamp = sync.stamp.take(lanes)
    base = sync.base if np.ndim(sync.base) == 0 else sync.base.take(lanes)
    return stamp, base


class AsyncCopyEmitter:
    """Mixin of the kernel generator: code for AsyncCopy, AsyncCommit and AsyncWait, and
    the in-flight check of ordinary accesses to their destination buffers."""

    def async_setup(self, body: Stmt, prelude, walk) -> None:
        self.async_dsts = {s.dst for s in walk(body) if isinstance(s, AsyncCopy)}
        if any(isinstance(s, (AsyncCopy, AsyncCommit, AsyncWait)) for s in walk(body)):
            prelude.line("_A = _AsyncCopies(_C)")

    def async_stmt(self, s: Stmt, B) -> None:
        if isinstance(s, AsyncCommit):
            B.line(f"_A.commit({B.mask})")
            return
        if isinstance(s, AsyncWait):
            B.line(f"_A.wait({s.pending}, {B.mask})")
            return
        d = self.facts.buffer(s.dst)
        src = self.facts.buffer(s.src)
        if d.scope != "shared" or src.scope != "global":
            from .errors import SimIRError

            raise SimIRError(f"kernel {self.name}: async_copy from {s.src.name} ({src.scope}) "
                             f"to {s.dst.name} ({d.scope}); cp.async copies global to shared")
        di = self.mat(self.ex(s.dst_index, B), B)
        si = self.mat(self.ex(s.src_index, B), B)
        key = di
        if d.copies:
            key = self.mat(self.ex(self.key_expr(d, s.dst_index), B), B)
        part = "None" if s.src_bytes is None else self.mat(self.ex(s.src_bytes, B), B)
        B.line(f"_A.copy({s.dst.name!r}, {d.code}, {d.race or None}, {key}, {di}, {d.size}, "
               f"{s.src.name!r}, {src.code}, {si}, {src.size}, {s.lanes}, {s.bytes}, "
               f"{part}, {B.mask})")

    def async_check(self, buffer, code: str, pos: str, B, verb: str) -> None:
        if buffer in self.async_dsts:
            B.line(f"_A.check({buffer.name!r}, {code}, {pos}, {B.mask}, {verb!r})")


__all__ = ["AsyncCopies", "AsyncCopyEmitter"]
