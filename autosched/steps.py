"""The steps of a sketch: each schedules one stage (or a stage and its fused consumer) and
emits its schedule passes from slot values.

The names of the loops and stages the passes create come from
:mod:`~ptxforge.passes.schedule.names` (a two-way split of ``ff`` makes
``split_outer(ff)`` and ``split_inner(ff)``, a cache copy of ``X`` is the stage
``cache_name(X, "shared")`` with loops ``copy_axes(ndim)``, ...). Splits are done one level
at a time (as the tutorial's printed schedule does), so a five-level tiling of ``ff`` has
the loops ``level_names(ff, 5)``, blocks outermost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..passes.schedule import (
    Bind,
    CacheRead,
    CacheWrite,
    ComputeAt,
    ComputeInline,
    Fuse,
    Pragma,
    Reorder,
    RFactor,
    Split,
    Unroll,
    Vectorize,
)
from ..passes.schedule.names import (
    cache_name,
    copy_axes,
    fused_name,
    level_names,
    loop_ref,
    rfactor_name,
    slot_name,
    split_inner,
    split_outer,
)
from .sketch import ChoiceSlot, TileSlot

UNROLL_CHOICES = (0, 16, 64, 512, 1024)
VECTOR_CHOICES = (1, 2, 4)
THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)
XTHREAD_CHOICES = (32, 64, 128, 256, 512)


def split_passes(stage: str, axis: str, factors) -> list:
    """``split`` passes making ``len(factors)`` loops of ``axis`` with these extents (the
    outermost extent is implied), one two-way split of the outer part at a time."""
    out = []
    cur = axis
    for f in reversed(factors[1:]):
        out.append(Split(loop_ref(stage, cur), factors=(int(f),)))
        cur = split_outer(cur)
    return out


def fuse_passes(stage: str, loops) -> list:
    """The ``fuse`` of ``loops`` of ``stage`` (none for a single loop)."""
    if len(loops) == 1:
        return []
    return [Fuse(tuple(loop_ref(stage, x) for x in loops))]


def reorder_pass(stage: str, loops) -> Reorder:
    return Reorder(tuple(loop_ref(stage, x) for x in loops))


def pragma_passes(stage: str, loop: str, steps: int) -> list:
    ref = loop_ref(stage, loop)
    return [Pragma(ref, "auto_unroll_max_step", int(steps)),
            Pragma(ref, "unroll_explicit", True)]


@dataclass(frozen=True)
class InlineStep:
    """``compute_inline`` of an element-wise or injective stage."""

    stage: str
    phase: str = "inline"

    def slots(self) -> list:
        return []

    def emit(self, vals, out) -> None:
        out[self.phase].append(ComputeInline(self.stage))


@dataclass(frozen=True)
class TileStep:
    """Multi-level tiling of a reduction stage for the GPU ("SSSRRSRS").

    Spatial axes split into five loops (block, vthread, thread, and two inner levels);
    reduce axes into three (outer, middle, inner); order: the three spatial levels, outer
    and middle reduce, the fourth spatial level, inner reduce, the fifth spatial level.
    The stage is computed at the thread level of its element-wise consumer (tiled with the
    same block, vthread and thread extents) or, when there is none, of its own copy out of
    a local cache (cache_write). Inputs in ``shared`` are copied into shared memory at the
    outer reduce loop and fetched cooperatively by all threads of a block.

    With ``split_k`` (the index of a reduce axis), that axis is first split in two and its
    outer part factored out (rfactor): the partial sums for each outer index are computed by
    separate blocks, and the stage itself then adds them up (a :class:`SimpleStep`).
    """

    stage: str
    spatial: tuple                # ((axis, extent), ...)
    reduce: tuple
    consumer: str | None          # fused element-wise consumer, or None for cache_write
    consumer_axes: tuple = ()
    shared: tuple = ()            # inputs copied to shared memory (buffer names)
    shared_ndims: tuple = ()      # their dimension counts
    split_k: int | None = None
    accesses: tuple = field(default=(), compare=False)   # the stage's reads (Access)
    unroll_choices: tuple = UNROLL_CHOICES
    vector_choices: tuple = VECTOR_CHOICES
    names: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        c = self.stage
        if self.split_k is not None:
            r = self.reduce[self.split_k][0]
            cons = rfactor_name(c)
            tiled = cache_name(cons, "local")
            cons_axes = tuple(copy_axes(len(self.spatial) + 1))
        elif self.consumer is None:
            tiled, cons = cache_name(c, "local"), c
            cons_axes = tuple(copy_axes(len(self.spatial)))
        else:
            tiled, cons, cons_axes = c, self.consumer, tuple(self.consumer_axes)
        self.names["tiled"] = tiled
        self.names["consumer"] = cons
        self.names["consumer_axes"] = cons_axes
        # reduce axes as the tiled stage sees them (the split-K axis is its inner part)
        red = []
        for k, (name, _) in enumerate(self.reduce):
            red.append(split_inner(name) if k == self.split_k else name)
        self.names["reduce"] = red
        if self.split_k is not None:
            self.names["k_axis"] = split_outer(r)

    # -- slots ----------------------------------------------------------------------------
    def slot(self, kind: str, name: str = "") -> str:
        return slot_name(self.stage, kind, name)

    def slots(self) -> list:
        out = [TileSlot(self.slot("tile", a), e, 5) for a, e in self.spatial]
        for k, (a, e) in enumerate(self.reduce):
            out.append(TileSlot(self.slot("tile", a), e, 4 if k == self.split_k else 3))
        out.append(ChoiceSlot(self.slot("unroll"), self.unroll_choices))
        out.extend(ChoiceSlot(self.slot("vec", x), self.vector_choices) for x in self.shared)
        return out

    # -- passes ---------------------------------------------------------------------------
    def emit(self, vals, out) -> None:
        c = self.stage
        n = self.names
        t, d, d_axes = n["tiled"], n["consumer"], n["consumer_axes"]
        sp = [vals[self.slot("tile", a)] for a, _ in self.spatial]
        rd = [vals[self.slot("tile", a)] for a, _ in self.reduce]
        if self.split_k is not None:
            r, e = self.reduce[self.split_k]
            k_factors = rd[self.split_k]
            out["structure"] += [Split(loop_ref(c, r), factors=(e // k_factors[0],)),
                                 RFactor(loop_ref(c, split_outer(r))),
                                 CacheWrite(rfactor_name(c), "local")]
            rd[self.split_k] = k_factors[1:]
        elif self.consumer is None:
            out["structure"].append(CacheWrite(c, "local"))
        tile = out["tile"]
        levels = [[] for _ in range(5)]
        if self.split_k is not None:
            levels[0].append(n["k_axis"])
        for (a, _), f in zip(self.spatial, sp):
            tile += split_passes(t, a, f)
            for k, name in enumerate(level_names(a, 5)):
                levels[k].append(name)
        r_levels = [[] for _ in range(3)]
        for a, f in zip(n["reduce"], rd):
            tile += split_passes(t, a, f)
            for k, name in enumerate(level_names(a, 3)):
                r_levels[k].append(name)
        order = (levels[0] + levels[1] + levels[2] + r_levels[0] + r_levels[1] + levels[3]
                 + r_levels[2] + levels[4])
        tile.append(reorder_pass(t, order))
        # the consumer: block, vthread, thread, inner (the two inner levels together)
        d_levels = [[] for _ in range(4)]
        first = 0
        if self.split_k is not None:
            d_levels[0].append(d_axes[0])
            first = 1
        for a, f in zip(d_axes[first:], sp):
            tile += split_passes(d, a, (f[0], f[1], f[2], f[3] * f[4]))
            for k, name in enumerate(level_names(a, 4)):
                d_levels[k].append(name)
        tile.append(reorder_pass(d, sum(d_levels, [])))
        out["attach"].append(ComputeAt(t, loop_ref(d, d_levels[2][-1])))
        for x in self.shared:
            out["attach"].append(CacheRead(x, "shared", (t,)))
        bind = out["bind"]
        for lv, tag in zip(d_levels[:3], ("blockIdx.x", "vthread", "threadIdx.x")):
            bind += fuse_passes(d, lv)
            bind.append(Bind(loop_ref(d, fused_name(lv)), tag))
        # the consumer's per-thread loops read the local accumulators: unrolled, their
        # indices are constants and the accumulators stay in registers
        bind += [Unroll(loop_ref(d, x)) for x in d_levels[3]]
        nthreads = 1
        for f in sp:
            nthreads *= f[2]
        for x, ndim in zip(self.shared, self.shared_ndims):
            s = cache_name(x, "shared")
            bind.append(ComputeAt(s, loop_ref(t, r_levels[0][-1])))
            axes = copy_axes(ndim)
            bind += fuse_passes(s, axes)
            fz = fused_name(axes)
            vec = vals[self.slot("vec", x)]
            bind += [Split(loop_ref(s, fz), factors=(vec,)),
                     Vectorize(loop_ref(s, split_inner(fz))),
                     Split(loop_ref(s, split_outer(fz)), factors=(nthreads,)),
                     Bind(loop_ref(s, split_inner(split_outer(fz))), "threadIdx.x")]
        out["pragma"] += pragma_passes(t, order[0], vals[self.slot("unroll")])


@dataclass(frozen=True)
class SimpleStep:
    """An element-wise stage, or a reduction without data reuse: its spatial loops fused,
    split into blocks of threads. ``attach`` names a producer computed inside each thread
    (the final sum of a split-K reduction fused into its element-wise consumer)."""

    stage: str
    axes: tuple                   # spatial axis names
    size: int                     # number of outputs
    attach: str | None = None
    attach_loop: str | None = None    # the attached producer's first loop (unroll pragma)
    reduce_loop: str | None = None    # the stage's own first reduce loop, if a reduction
    thread_choices: tuple = THREAD_CHOICES
    unroll_choices: tuple = UNROLL_CHOICES

    def threads(self) -> tuple:
        limit = max(32, 1 << max(self.size - 1, 0).bit_length())
        return tuple(t for t in self.thread_choices if t <= limit) or (self.thread_choices[0],)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "bind", kind)

    def slots(self) -> list:
        out = [ChoiceSlot(self.slot("threads"), self.threads())]
        if self.attach or self.reduce_loop:
            out.append(ChoiceSlot(self.slot("unroll"), self.unroll_choices))
        return out

    def emit(self, vals, out) -> None:
        d = self.stage
        bind = out["bind"]
        bind += fuse_passes(d, self.axes)
        f = fused_name(self.axes)
        bind += [Split(loop_ref(d, f), factors=(vals[self.slot("threads")],)),
                 Bind(loop_ref(d, split_outer(f)), "blockIdx.x"),
                 Bind(loop_ref(d, split_inner(f)), "threadIdx.x")]
        if self.attach:
            bind.append(ComputeAt(self.attach, loop_ref(d, split_inner(f))))
            out["pragma"] += pragma_passes(self.attach, self.attach_loop,
                                           vals[self.slot("unroll")])
        elif self.reduce_loop:
            out["pragma"] += pragma_passes(d, self.reduce_loop, vals[self.slot("unroll")])


@dataclass(frozen=True)
class CrossThreadStep:
    """A reduction computed by a block per output: its reduce loops fused, split by the
    thread count, the inner part factored out (rfactor) and reduced across the threads of
    the block (a tree in shared memory). An element-wise consumer is fused at the block."""

    stage: str
    spatial: tuple                # spatial axis names
    reduce: tuple                 # ((axis, extent), ...)
    consumer: str | None = None
    consumer_axes: tuple = ()
    thread_choices: tuple = XTHREAD_CHOICES
    unroll_choices: tuple = UNROLL_CHOICES

    @property
    def reduce_size(self) -> int:
        n = 1
        for _, e in self.reduce:
            n *= e
        return n

    def threads(self) -> tuple:
        return tuple(t for t in self.thread_choices if t <= max(32, self.reduce_size)) or (32,)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "xthread", kind)

    def slots(self) -> list:
        return [ChoiceSlot(self.slot("threads"), self.threads()),
                ChoiceSlot(self.slot("unroll"), self.unroll_choices)]

    def emit(self, vals, out) -> None:
        c = self.stage
        red = [a for a, _ in self.reduce]
        out["structure"] += fuse_passes(c, red)
        rf = fused_name(red)
        out["structure"] += [Split(loop_ref(c, rf), factors=(vals[self.slot("threads")],)),
                             RFactor(loop_ref(c, split_inner(rf)))]
        bind = out["bind"]
        bind.append(Bind(loop_ref(c, split_inner(rf)), "threadIdx.x"))
        if self.consumer:
            d = self.consumer
            fd = fused_name(self.consumer_axes)
            bind += fuse_passes(d, self.consumer_axes)
            bind += [Bind(loop_ref(d, fd), "blockIdx.x"), ComputeAt(c, loop_ref(d, fd))]
        else:
            bind += fuse_passes(c, self.spatial)
            bind.append(Bind(loop_ref(c, fused_name(self.spatial)), "blockIdx.x"))
        bind.append(ComputeAt(rfactor_name(c), loop_ref(c, split_inner(rf))))
        out["pragma"] += pragma_passes(rfactor_name(c), self.spatial[0],
                                       vals[self.slot("unroll")])
