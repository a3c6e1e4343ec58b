"""Run-time state of one simulated launch, and the checks that generated kernels call.

A launch runs its thread blocks in chunks; a :class:`Chunk` holds the lanes of one chunk
(every thread of every block in it, lane = local block * threads per block + thread), the
hardware indices as int32 arrays over those lanes, the barrier state and the per-buffer
race trackers. Generated kernel code (:mod:`.codegen`) calls the functions here only on
paths that can fail or that need the race checker; the common paths are inline numpy.
"""

from __future__ import annotations

import numpy as np

from .errors import SimBarrierError, SimDivergenceError, SimMemoryError, SimRaceError

LANES_PER_CHUNK = 1 << 16
"""Lanes simulated at once (as many whole blocks as fit); bounds the memory of local
buffers and temporaries, which hold one value per lane."""


def fill_value(dtype: np.dtype):
    """What fresh (uninitialized) memory holds: NaN for floats, a loud pattern otherwise.

    A GPU leaves new allocations undefined; NaN makes any read of such memory show up in
    the results instead of passing by chance as zero.
    """
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).max


class Chunk:
    """The lanes of ``nblocks`` consecutive thread blocks starting at block ``first``."""

    def __init__(self, kernel: str, grid: tuple, block: tuple, first: int, nblocks: int,
                 track_races: bool):
        gx, gy, _ = grid
        tx, ty, _ = block
        threads = tx * ty * block[2]
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.threads = threads
        self.first = first
        self.nblocks = nblocks
        self.lanes = nblocks * threads
        lane = np.arange(self.lanes, dtype=np.int64)
        tid = lane % threads
        lblk = lane // threads
        gblk = lblk + first
        self.lane = lane.astype(np.int32)
        self.lane64 = lane
        self.tid = tid.astype(np.int32)
        self.lblk = lblk.astype(np.int32)
        self.index = {
            "threadIdx.x": (tid % tx).astype(np.int32),
            "threadIdx.y": (tid // tx % ty).astype(np.int32),
            "threadIdx.z": (tid // (tx * ty)).astype(np.int32),
            "blockIdx.x": (gblk % gx).astype(np.int32),
            "blockIdx.y": (gblk // gx % gy).astype(np.int32),
            "blockIdx.z": (gblk // (gx * gy)).astype(np.int32),
        }
        self.sync = Sync(self, track_races)
        self._arena: np.ndarray | None = None  # dynamic shared memory of shared bytes

    # memory ---------------------------------------------------------------------------
    def shared(self, size: int, dtype: str, per_block: bool) -> np.ndarray:
        """A shared buffer: one copy per block of the chunk, flat (block-major)."""
        dt = np.dtype(dtype)
        n = size * self.nblocks if per_block else size
        return np.full(n, fill_value(dt), dt)

    def dynamic_shared(self, offset: int, size: int, dtype: str, dynamic_bytes: int
                       ) -> np.ndarray:
        """A buffer placed at byte ``offset`` of dynamic shared memory, as a view of the
        chunk's one byte array, so that buffers placed in the same bytes overwrite each
        other as on the GPU. Only for chunks of one block (a kernel whose buffers share
        bytes runs its blocks one at a time)."""
        if self.nblocks != 1:
            raise ValueError("dynamic shared memory as one byte array needs chunks of one "
                             f"block, not {self.nblocks}")
        dt = np.dtype(dtype)
        if self._arena is None or self._arena.size < dynamic_bytes:
            # fresh shared memory reads as NaN (all bits set) in every float type
            self._arena = np.full(-(-dynamic_bytes // 16) * 16, 0xFF, np.uint8)
        if offset % dt.itemsize or offset + size * dt.itemsize > self._arena.size:
            raise ValueError(f"a {size}-element {dt} buffer does not fit at byte {offset} of "
                             f"{dynamic_bytes} bytes of dynamic shared memory")
        first = offset // dt.itemsize
        return self._arena.view(dt)[first:first + size]

    def shared_bytes_tracker(self, overlaps: dict):
        """The barrier-interval check of buffers sharing bytes (backend_sim/shared_bytes)."""
        from .shared_bytes import SharedBytesTracker

        return SharedBytesTracker(self.kernel, overlaps)

    def block_offset(self, size: int, dtype: str) -> np.ndarray:
        """Per lane, where its block's copy of a shared buffer of ``size`` starts."""
        return self.lblk.astype(dtype) * size

    def local(self, size: int, dtype: str, per_lane: bool) -> np.ndarray:
        """A local buffer: shape (size, lanes), so element ``i`` of all lanes is one row."""
        dt = np.dtype(dtype)
        shape = (size, self.lanes) if per_lane else (size,)
        return np.full(shape, fill_value(dt), dt)

    def race(self, name: str, size: int) -> SharedRace:
        return SharedRace(self, name, size)

    # messages -------------------------------------------------------------------------
    def thread_of(self, tid: int) -> str:
        bx, by, _ = self.block
        t = int(tid)
        return f"thread ({t % bx}, {t // bx % by}, {t // (bx * by)})"

    def where(self, lane: int) -> str:
        """'thread (x, y, z) of block (x, y, z)' for a lane of this chunk."""
        ix = self.index
        lane = int(lane)
        blk = tuple(int(ix[f"blockIdx.{c}"][lane]) for c in "xyz")
        return f"{self.thread_of(self.tid[lane])} of block {blk}"


WARP = 32


def shuffle_xor(c: Chunk, value, lane_mask: int, width: int, active) -> np.ndarray:
    """``shfl.sync.bfly.b32`` with a full member mask, for every lane of chunk ``c``:
    lane ``l`` of a warp (32 consecutive threads of a block) reads the value of lane
    ``j = l ^ lane_mask``, or its own where ``j`` lies above the last lane of its segment
    of ``width`` lanes. ``active``: the lanes executing it (None: all); every warp must run
    it with all 32 lanes or none."""
    if c.threads % WARP:
        raise SimDivergenceError(
            f"kernel {c.kernel}: a warp shuffle in a block of {c.threads} threads; its last "
            f"warp has only {c.threads % WARP} of {WARP} lanes, and shfl.sync with a full "
            "member mask is undefined there")
    if active is not None:
        warps = np.asarray(active).reshape(-1, WARP)
        split = np.flatnonzero(warps.any(axis=1) != warps.all(axis=1))
        if split.size:
            w = int(split[0])
            row = warps[w]
            inside = w * WARP + int(np.argmax(row))
            outside = w * WARP + int(np.argmax(~row))
            raise SimDivergenceError(
                f"kernel {c.kernel}: warp shuffle executed by {c.where(inside)} but not by "
                f"{c.thread_of(c.tid[outside])} of the same warp (divergent control flow); "
                "every lane of a warp must execute a shuffle")
    lane = c.lane64
    within = lane % WARP
    src = within ^ lane_mask
    last = (within & ~(width - 1)) | (width - 1)
    src = np.where(src <= last, src, within)
    value = np.asarray(value)
    if value.ndim == 0:
        return np.full(c.lanes, value, value.dtype)
    return value[lane - within + src]


class Sync:
    """Barrier state: epochs per block, and each lane's stamp for the race trackers.

    A stamp is ``epoch * threads + thread``: two accesses are in the same barrier interval
    of a block when their stamps are both at least ``epoch * threads`` (``base``).
    """

    def __init__(self, chunk: Chunk, track: bool):
        self.chunk = chunk
        self.track = track
        self.nbar = 0
        self.named_state: NamedBarriers | None = None  # made at the first named barrier
        if track:
            self.epoch = np.zeros(chunk.nblocks, np.int64)
            self.base: int | np.ndarray = 0
            self.stamp = chunk.tid.astype(np.int64)

    def named(self, bid: int, threads: int, arrive: bool, mask) -> None:
        """``bar.sync bid, threads`` (``bar.arrive`` where ``arrive``) for the lanes in
        ``mask`` (None: all): :class:`NamedBarriers`."""
        if self.named_state is None:
            self.named_state = NamedBarriers(self.chunk)
        self.named_state.step(bid, threads, arrive, mask)

    def finish(self) -> None:
        """The kernel's end: every named barrier complete, no thread left waiting."""
        if self.named_state is not None:
            self.named_state.finish()

    def barrier(self, mask) -> None:
        """``__syncthreads()`` for the lanes in ``mask`` (None: all)."""
        c = self.chunk
        if self.named_state is not None:
            self.named_state.check_not_waiting(mask, "__syncthreads()")
        partial = None
        if mask is not None:
            per_block = np.asarray(mask).reshape(c.nblocks, c.threads)
            arrived = per_block.any(axis=1)
            complete = per_block.all(axis=1)
            split = np.flatnonzero(arrived != complete)
            if split.size:
                b = int(split[0])
                row = per_block[b]
                inside = int(np.argmax(row))
                outside = int(np.argmax(~row))
                raise SimBarrierError(
                    f"kernel {c.kernel}: barrier reached by {c.where(b * c.threads + inside)} "
                    f"but not by {c.thread_of(outside)} of the same block (divergent "
                    "__syncthreads); keep barriers outside conditions and thread loops that "
                    "do not cover the whole block"
                )
            if not arrived.all():
                partial = arrived
        if not self.track:
            return
        T = c.threads
        if partial is None:
            # every block of the chunk steps its epoch; a plain counter keeps reads cheap
            self.nbar += 1
            self.epoch += 1
            self.base = self.base + T
            self.stamp = self.stamp + T
        else:
            self.epoch[partial] += 1
            self.base = self.epoch[c.lblk] * T
            self.stamp = self.base + c.tid


class NamedBarriers:
    """Named barriers (``bar.sync id, n`` / ``bar.arrive id, n``) of the chunk's blocks.

    Per block and barrier id, the threads arrived in the current phase; per lane, the
    barrier it waits at (0: none). Arriving threads are counted; when ``n`` have arrived the
    phase completes and its waiting threads go on. The simulator runs a block's threads in
    program order (statement by statement, a branch's sides one after the other), so a
    thread that syncs before the others arrived is marked waiting and must be released
    before it reaches its next barrier: the arrivals that release it may come later in
    program order (the other side of a branch on the warpgroup, a later statement), as on
    the GPU. A waiting thread reaching another barrier, a phase overshooting its count, a
    warp split at a barrier, and a phase left incomplete at the kernel's end raise
    :class:`SimBarrierError`. Named barriers order no shared-memory accesses for the race
    checker (its intervals end at whole-block barriers only): a conflict they alone would
    order is reported, never missed."""

    IDS = 16

    def __init__(self, chunk: Chunk):
        self.chunk = chunk
        self.count = np.zeros((self.IDS, chunk.nblocks), np.int64)
        self.want = np.zeros((self.IDS, chunk.nblocks), np.int64)  # the phase's count
        self.wait = np.zeros(chunk.lanes, np.int8)  # the id a lane waits at, 0: none

    def _lanes(self, mask) -> np.ndarray:
        c = self.chunk
        return np.ones(c.lanes, bool) if mask is None else np.asarray(mask, bool)

    def check_not_waiting(self, mask, what: str) -> None:
        """Raise where a lane in ``mask`` still waits at a named barrier."""
        waiting = self._lanes(mask) & (self.wait != 0)
        if waiting.any():
            c = self.chunk
            lane = int(np.argmax(waiting))
            bid = int(self.wait[lane])
            blk = int(c.lblk[lane])
            raise SimBarrierError(
                f"kernel {c.kernel}: {c.where(lane)} waits at bar.sync {bid} "
                f"({self.count[bid, blk]} of {self.want[bid, blk]} threads arrived) and "
                f"reaches {what} before the other threads arrive there: a deadlock on the "
                "GPU unless threads the simulator runs later in program order arrive first; "
                "make each phase's arrivals precede the waiters' next barrier (a bar.arrive "
                "before the loop for the first phase), or check the counts")

    def step(self, bid: int, threads: int, arrive: bool, mask) -> None:
        c = self.chunk
        what = f"bar.{'arrive' if arrive else 'sync'} {bid}, {threads}"
        lanes = self._lanes(mask)
        self.check_not_waiting(lanes, what)
        if c.threads % WARP:
            raise SimBarrierError(f"kernel {c.kernel}: {what} in a block of {c.threads} "
                                  "threads; named barriers count whole warps")
        warps = lanes.reshape(-1, WARP)
        split = np.flatnonzero(warps.any(axis=1) != warps.all(axis=1))
        if split.size:
            row = warps[int(split[0])]
            base = int(split[0]) * WARP
            raise SimBarrierError(
                f"kernel {c.kernel}: {what} reached by {c.where(base + int(np.argmax(row)))} "
                f"but not by {c.thread_of(c.tid[base + int(np.argmax(~row))])} of the same "
                "warp; a warp arrives at a named barrier whole (branch on warps, not lanes)")
        per_block = lanes.reshape(c.nblocks, c.threads).sum(axis=1)
        count, want = self.count[bid], self.want[bid]
        busy = (count > 0) & (want != threads) & (per_block > 0)
        if busy.any():
            b = int(np.argmax(busy))
            raise SimBarrierError(
                f"kernel {c.kernel}: {what} in block {b + c.first} while the barrier's "
                f"phase counts {want[b]} threads ({count[b]} arrived): every thread must "
                "name the same count at one barrier")
        count += per_block
        want[per_block > 0] = threads
        over = count > threads
        if over.any():
            b = int(np.argmax(over))
            raise SimBarrierError(
                f"kernel {c.kernel}: {count[b]} threads arrive at barrier {bid} of block "
                f"{b + c.first} in one phase, more than its count of {threads}: the count "
                "must equal the threads that take part (both sides' sync and arrive)")
        done = count == threads
        if not arrive:
            # the lanes of a phase that is not complete wait in it
            pending = lanes & ~done[c.lblk]
            self.wait[pending] = bid
        if done.any():
            self.wait[(self.wait == bid) & done[c.lblk]] = 0
            count[done] = 0
            want[done] = 0

    def finish(self) -> None:
        c = self.chunk
        left = np.argwhere(self.count > 0)
        if left.size:
            bid, b = (int(x) for x in left[0])
            waiting = np.flatnonzero((self.wait == bid) & (c.lblk == b))
            who = (f"{c.where(int(waiting[0]))} waits there (the GPU hangs)" if waiting.size
                   else "no thread waits (a bar.arrive nobody syncs on)")
            raise SimBarrierError(
                f"kernel {c.kernel}: barrier {bid} of block {b + c.first} ends the kernel "
                f"with {self.count[bid, b]} of {self.want[bid, b]} threads arrived; {who}: a "
                "bar.sync or bar.arrive is missing, or the counts do not match")


def _active(sync: Sync, key, nz):
    """Keys, stamps and bases of the active lanes (``nz``: their indices, None: all)."""
    c = sync.chunk
    base = sync.base
    if nz is None:
        if np.ndim(key) == 0:
            key = np.full(c.lanes, key, np.int64)
        return key, sync.stamp, base, None
    if np.ndim(key) == 0:
        key = np.full(nz.size, key, np.int64)
    else:
        key = key.take(nz)
    if np.ndim(base):
        base = base.take(nz)
    return key, sync.stamp.take(nz), base, nz


def _differs(a: np.ndarray, b) -> np.ndarray:
    """Element-wise 'not the same bits' (so NaN equals NaN and writing it twice is benign)."""
    b = np.asarray(b, dtype=a.dtype)
    if a.dtype.kind == "f":
        view = np.dtype(f"u{a.dtype.itemsize}")
        return a.view(view) != np.broadcast_to(b, a.shape).view(view)
    return a != b


class SharedRace:
    """Race tracker of one shared buffer.

    Per element it keeps the stamp of the last writer and of the last reader. Reads are
    only logged at first: most barrier intervals that read a buffer never write it, and
    their log is dropped at the next barrier. The log is replayed into the reader stamps
    when the buffer is written in the same interval (or when the log grows long).
    """

    LOG_LIMIT = 1 << 22
    """Logged read positions before they are folded into the reader stamps."""

    def __init__(self, chunk: Chunk, name: str, size: int):
        n = size * chunk.nblocks
        self.chunk = chunk
        self.sync = chunk.sync
        self.name = name
        self.size = size
        self.rstamp = np.full(n, -1, np.int64)
        self.wstamp = np.full(n, -1, np.int64)
        self.wrote = -1  # barrier count of the last write
        self.folded = -1  # barrier count of the last replay of logged reads
        self.log: list = []
        self.logged = 0
        self.log_interval = -1

    def _fail(self, lane: int, key: int, verb: str, other_stamp: int, other_verb: str,
              base: int):
        c = self.chunk
        other = c.thread_of(int(other_stamp) - int(base))
        index = int(key) % self.size
        raise SimRaceError(
            f"missing barrier: kernel {c.kernel}, {c.where(lane)} {verb} "
            f"{self.name}[{index}] {other_verb} by {other} in the same barrier interval"
        )

    def read_check(self, key, mask) -> None:
        """Check and log a read of ``key`` (flat, block-major) by the lanes in ``mask``."""
        sync = self.sync
        if self.wrote == sync.nbar:
            nz = None if mask is None else np.flatnonzero(mask)
            k, stamp, base, nz = _active(sync, key, nz)
            ws = self.wstamp.take(k)
            bad = (ws >= base) & (ws != stamp)
            if bad.any():
                j = int(np.argmax(bad))
                self._fail(j if nz is None else nz[j], k[j], "reads", ws[j], "written",
                           base if np.ndim(base) == 0 else base[j])
        if self.log_interval != sync.nbar:
            self.log.clear()
            self.logged = 0
            self.log_interval = sync.nbar
        self.log.append((key, mask, sync.stamp))
        self.logged += self.chunk.lanes
        if self.logged > self.LOG_LIMIT:
            self.fold()

    def fold(self) -> None:
        """Replay the logged reads into the reader stamps (later reads win)."""
        if not self.log:
            return
        keys, stamps = [], []
        lanes = self.chunk.lanes
        for key, mask, stamp in self.log:
            if mask is None:
                keys.append(np.broadcast_to(key, (lanes,)))
                stamps.append(stamp)
            else:
                nz = np.flatnonzero(mask)
                keys.append(key.take(nz) if np.ndim(key) else np.full(nz.size, key))
                stamps.append(stamp.take(nz))
        self.rstamp[np.concatenate(keys)] = np.concatenate(stamps)
        self.folded = self.sync.nbar
        self.log.clear()
        self.logged = 0

    def write(self, buf: np.ndarray, key, value, nz) -> None:
        """Store ``value`` at ``key`` for the active lanes (``nz``: their indices)."""
        sync = self.sync
        key, stamp, base, nz = _active(sync, key, nz)
        if np.ndim(value) and nz is not None:
            value = value.take(nz)

        def lane(j):
            return j if nz is None else nz[j]

        def base_of(j):
            return base if np.ndim(base) == 0 else base[j]

        if self.log and self.log_interval == sync.nbar:
            self.fold()
        if self.folded == sync.nbar:
            rs = self.rstamp.take(key)
            bad = (rs >= base) & (rs != stamp)
            if bad.any():
                j = int(np.argmax(bad))
                self._fail(lane(j), key[j], "writes", rs[j], "read", base_of(j))
        if self.wrote == sync.nbar:
            ws = self.wstamp.take(key)
            bad = (ws >= base) & (ws != stamp)
            if bad.any():
                bad &= _differs(buf.take(key), value)
                if bad.any():
                    j = int(np.argmax(bad))
                    self._fail(lane(j), key[j], "writes a different value to", ws[j],
                               "written", base_of(j))
        buf[key] = value
        if np.ndim(value) and key.size > 1:
            # two lanes of one block storing different values to one element in one store
            lost = _differs(buf.take(key), value)
            if lost.any():
                j = int(np.argmax(lost))
                winner = int(np.flatnonzero(key == key[j])[-1])
                self._fail(lane(j), key[j], "writes a different value to", stamp[winner],
                           "written", base_of(winner))
        self.wstamp[key] = stamp
        self.wrote = sync.nbar


def out_of_bounds(chunk: Chunk, buffer: str, index, size: int, mask, what: str) -> None:
    """Raise :class:`SimMemoryError` if an active lane's ``index`` is outside [0, size).

    Generated code calls this only after a quick check over all lanes failed; lanes
    outside ``mask`` do not execute the access, so they may hold any index.
    """
    if np.ndim(index) == 0:
        lane = 0 if mask is None else int(np.argmax(mask))
        bad_index = int(index)
    else:
        bad = (index < 0) | (index >= size)
        if mask is not None:
            bad &= mask
        if not bad.any():
            return
        lane = int(np.argmax(bad))
        bad_index = int(index[lane])
    raise SimMemoryError(
        f"illegal memory access: kernel {chunk.kernel}, buffer {buffer} index {bad_index} "
        f"outside [0, {size}) ({chunk.where(lane)}) on a {what}"
    )
