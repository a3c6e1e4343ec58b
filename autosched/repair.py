"""Repair of refused tile states: a drawn state that its tile step's limits refuse (threads,
virtual threads, shared memory, accumulators or unrolled code per thread, see
:func:`~ptxforge.autosched.kernel_model.tile_limits_exceeded`) is moved to a valid state
instead of being drawn again.

A repair pulls *levers*, each chosen uniformly (from the seeded generator) among those that
lower the quantity in excess and can move the state:

* a prime factor of a spatial axis moved from an inner level (virtual thread, thread, the
  two per-thread levels) out to the block level, or from a per-thread level (virtual thread
  included) to the thread level, which keeps the block's tile;
* a prime factor of a reduce axis moved from the middle or inner level out to the outer
  reduce loop (for the split-K axis: to the tiled stage's outer loop, the split kept);
* the unroll step lowered to the next smaller choice (unrolled code only).

Threads, virtual threads and accumulators are products of tile levels, so a pull multiplies
or divides them by the prime it moves: they are pulled down until they fit in one round,
with no evaluation. Shared memory and unrolled code are evaluated again after each round
(:func:`~ptxforge.autosched.kernel_model.tile_limits`), at most :data:`MAX_ROUNDS` of them.
Every pull moves a factor outward for good (or lowers the unroll step), so a state cannot
cycle; one still refused after the last round stays refused. The block level and the
choices other than the unroll step are kept, and different draws repair to different states.

Whether it pays depends on how many draws pass as drawn. With the lean check
(``SketchModel.step_kernels(limits_only=True)``: about 0.35 us a state on arrays of
thousands) drawing again costs about ``0.35 us / share`` a kept state, while a repaired
state costs 15-30 us (its rounds cost 1-3 ms each for a sketch, whatever its size): on the
fp16 tasks of ResNet-18/50, MobileNetV2 and BERT, where 2-9% of tile draws pass, drawing
again is as cheap or cheaper, and it keeps the draws uniform over the valid states. Below
1% (the seed layer on tight limits: 0.3%) drawing again takes 100-600k draws and up to
0.6 s a population of 2,048, and falls short of it; repairing takes 3k draws and 40-70 ms.
So the search repairs a sketch's draws only where fewer than ``repair_below`` of them pass
(:data:`~ptxforge.autosched.search_policy.DEFAULT_PARAMS`: 1%; docs/tuning.md has the
figures).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from .factorization import divisors, prime_factors, tile_table
from .kernel_model import (
    TILE_LIMITS,
    SketchModel,
    tile_limit_values,
    tile_limits,
    tile_limits_exceeded,
)
from .sketch import TileSlot
from .steps import TileStep


@functools.cache
def outward_moves(extent: int, levels: int, target: int) -> np.ndarray:
    """``[rows, levels]`` row indices of ``tile_table(extent, levels)``: for each row and
    level, the row with the smallest prime factor of that level moved into level
    ``target`` (the row itself where that level's extent is 1, and at ``target``)."""
    table = tile_table(extent, levels)
    rows = table.rows
    divs = np.array(divisors(extent), dtype=np.int64)
    # a row as one number: the divisor index of each level, in base len(divs); the table's
    # rows sorted by it, to find a moved row with searchsorted
    radix = len(divs) ** np.arange(levels, dtype=np.int64)
    codes = np.searchsorted(divs, rows) @ radix
    order = np.argsort(codes)
    smallest = np.array([prime_factors(int(d))[0] if d > 1 else 1 for d in divs],
                        dtype=np.int64)
    out = np.repeat(np.arange(len(rows), dtype=np.int64)[:, None], levels, axis=1)
    for lv in range(levels):
        if lv == target:
            continue
        p = smallest[np.searchsorted(divs, rows[:, lv])]
        movable = p > 1
        moved = rows[movable].copy()
        moved[:, lv] //= p[movable]
        moved[:, target] *= p[movable]
        at = np.searchsorted(codes, np.searchsorted(divs, moved) @ radix, sorter=order)
        out[movable, lv] = order[at]
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Lever:
    """One way to lower some of a tile state's bounded quantities: ``column`` is the
    sketch's slot; ``moves[value]`` the slot value after the pull (the value itself where
    this lever cannot move); ``relieves`` the quantities of
    :data:`~ptxforge.autosched.kernel_model.TILE_LIMITS` it lowers."""

    column: int
    moves: np.ndarray
    relieves: frozenset
    factor: np.ndarray | None = None   # [value]: the prime a tile lever moves (1: none)
    effects: tuple = (0, 0, 0)         # the moved prime's power on threads, vthreads, accum


# (level, target level, what it lowers, its power on threads, vthreads and accumulators)
# for a spatial axis's levels (block 0, virtual thread 1, thread 2, per-thread 3 and 4): a
# per-thread factor moves to the block level or, as often, to the thread level, where it
# keeps the block's tile (and its shared memory) but multiplies the threads
_PER_THREAD = frozenset({"accum", "unrolled_code"})
_SPATIAL_LEVERS = (
    (1, 0, _PER_THREAD | {"vthreads", "shared_bytes"}, (0, -1, -1)),
    (1, 2, _PER_THREAD | {"vthreads"}, (1, -1, -1)),
    (2, 0, frozenset({"threads", "shared_bytes"}), (-1, 0, 0)),
    (3, 0, _PER_THREAD | {"shared_bytes"}, (0, 0, -1)),
    (3, 2, _PER_THREAD, (1, 0, -1)),
    (4, 0, _PER_THREAD | {"shared_bytes"}, (0, 0, -1)),
    (4, 2, _PER_THREAD, (1, 0, -1)),
)
_REDUCE_RELIEVES = frozenset({"shared_bytes", "unrolled_code"})


def _lower_choice(choices: tuple) -> np.ndarray:
    """For each choice index, the index of the next smaller choice (itself if none)."""
    out = np.arange(len(choices), dtype=np.int64)
    for k, c in enumerate(choices):
        smaller = [j for j, d in enumerate(choices) if d < c]
        if smaller:
            out[k] = max(smaller, key=lambda j: choices[j])
    out.setflags(write=False)
    return out


def tile_levers(step: TileStep, sketch) -> tuple:
    """The levers of ``step`` in ``sketch`` (see the module's docstring)."""
    out = []

    def lever(axis: str, level: int, target: int, relieves: frozenset,
              effects: tuple = (0, 0, 0)) -> Lever:
        col = sketch.slot_index[step.slot("tile", axis)]
        slot = sketch.slots[col]
        assert isinstance(slot, TileSlot)
        moves = outward_moves(slot.extent, slot.levels, target)[:, level]
        table = slot.table.rows
        return Lever(col, moves, relieves, table[:, level] // table[moves, level], effects)

    for axis, _ in step.spatial:
        for level, target, relieves, effects in _SPATIAL_LEVERS:
            out.append(lever(axis, level, target, relieves, effects))
    for k, (axis, _) in enumerate(step.reduce):
        # the split-K axis's levels are (blocks, outer, middle, inner): the split stays
        first, target = (2, 1) if k == step.split_k else (1, 0)
        for level in (first, first + 1):
            out.append(lever(axis, level, target, _REDUCE_RELIEVES))
    col = sketch.slot_index[step.slot("unroll")]
    out.append(Lever(col, _lower_choice(tuple(sketch.slots[col].choices)),
                     frozenset({"unrolled_code"})))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class LeverTable:
    """The levers of a tile step as arrays, so that one call pulls a lever for each of
    many states: lever ``l`` moves column ``columns[l]`` from value ``v`` to
    ``moves[offsets[l] + v]``, moving the prime ``factors[offsets[l] + v]``; ``relieves[q,
    l]`` says whether it lowers the quantity ``TILE_LIMITS[q]``, ``effects[:, l]`` its
    power on threads, virtual threads and accumulators."""

    columns: np.ndarray
    offsets: np.ndarray
    moves: np.ndarray
    factors: np.ndarray
    relieves: np.ndarray
    effects: np.ndarray

    @classmethod
    def of(cls, levers) -> LeverTable:
        sizes = [len(lv.moves) for lv in levers]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        factors = [lv.factor if lv.factor is not None else np.ones(len(lv.moves), np.int64)
                   for lv in levers]
        relieves = np.array([[q in lv.relieves for lv in levers] for q in TILE_LIMITS])
        return cls(np.array([lv.column for lv in levers], dtype=np.int64), offsets,
                   np.concatenate([lv.moves for lv in levers]).astype(np.int64),
                   np.concatenate(factors).astype(np.int64), relieves,
                   np.array([lv.effects for lv in levers], dtype=np.int64).T)

    def pull(self, rows: np.ndarray, which: np.ndarray, quantity: np.ndarray,
             rng: np.random.Generator) -> tuple:
        """Move each state ``which[i]`` of ``rows`` by one lever that lowers the quantity
        ``TILE_LIMITS[quantity[i]]``, drawn uniformly among those that can move it (a
        state none can move is left as it is). Returns ``(moved, factor, lever)`` per
        state: whether a lever moved it, the prime it moved (1 for the unroll step) and
        which lever."""
        cur = rows[which[:, None], self.columns[None, :]]
        at = self.offsets + cur
        moved = self.moves[at]
        able = (moved != cur) & self.relieves[quantity]
        pick = np.argmax(rng.random(able.shape) * able, axis=1)
        some = able.any(axis=1)
        k = np.nonzero(some)[0]
        rows[which[k], self.columns[pick[k]]] = moved[k, pick[k]]
        return some, np.where(some, self.factors[at[np.arange(len(which)), pick]], 1), pick


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plan(model: SketchModel) -> dict:
    """``{tile step: LeverTable}`` of a sketch (cached per model)."""
    plan = _PLANS.get(model)
    if plan is None:
        plan = {st: LeverTable.of(tile_levers(st, model.sketch)) for st in model.sketch.steps
                if isinstance(st, TileStep)}
        _PLANS[model] = plan
    return plan


def repairable(model: SketchModel) -> bool:
    """Whether :func:`repair_rows` can move refused states of this sketch (it has a tile
    step)."""
    return bool(_plan(model))


@dataclass(frozen=True)
class Repair:
    """What :func:`repair_rows` did: the rows (repaired in place of the refused ones),
    which are valid, which of those were refused as drawn, and the repair's rounds (model
    evaluations after the first)."""

    rows: np.ndarray
    valid: np.ndarray
    repaired: np.ndarray
    rounds: int


MAX_ROUNDS = 8
"""The most rounds of evaluation a repair takes: a state still refused then is dropped (on
the seed layer about one refused draw in 50; the last rounds each move a few states at the
cost of a whole round)."""


def repair_rows(model: SketchModel, rows: np.ndarray, rng: np.random.Generator,
                repair_below: float = 1.0) -> Repair:
    """Check the states ``rows`` (``[n, slots]`` of ``model``'s sketch) and repair the
    refused ones of a tile sketch when fewer than ``repair_below`` of them pass as drawn
    (0: never repair, only check; 1: always). Refused states not repaired (of a sketch
    without a tile step, past ``repair_below``, or still refused after :data:`MAX_ROUNDS`)
    are returned as drawn or as far as the repair moved them, and not valid. Deterministic
    given ``rng``'s state.

    The first check is the model's, every kernel of the sketch (a tile step's by its limits
    alone, :func:`~ptxforge.autosched.kernel_model.tile_limits`: the arithmetic of its
    validity); a state that a kernel other than a tile step's refuses is not repaired. While
    states move only the tile limits are evaluated, and the repaired states pass the whole
    check once more at the end."""
    rows = np.array(rows, dtype=np.int64, copy=True)
    plan = _plan(model)
    stats, valid, fixable = _check(model, rows, limits_only=True)
    as_drawn = valid.copy()
    if not len(rows) or valid.mean() >= repair_below:
        plan = {}
    active = np.nonzero(fixable)[0] if plan else np.zeros(0, dtype=np.int64)
    stats = {st: _take(s, active) for st, s in stats.items()}
    rounds = 0
    while len(active):
        if rounds:
            V = model.sketch.values(rows[active])
            stats = {st: tile_limits(st, V, len(active)) for st in plan}
        over = {st: tile_limits_exceeded(s, model.hw) for st, s in stats.items()}
        bad = np.any([o for per in over.values() for o in per.values()], axis=0)
        valid[active[~bad]] = True
        active = active[bad]
        if not len(active) or rounds == MAX_ROUNDS:
            break
        rounds += 1
        before = rows[active].copy()
        for step, per in over.items():
            _round(plan[step], {k: o[bad] for k, o in per.items()},
                   {k: np.asarray(stats[step][k])[bad] for k in TILE_LIMITS}, active, rows,
                   tile_limit_values(model.hw), rng)
        # a state no lever moved stays refused (its sketch cannot make it valid)
        active = active[(rows[active] != before).any(axis=1)]
    repaired = valid & ~as_drawn
    if repaired.any():
        # the model's whole check (every kernel; the tile steps' by the arithmetic of their
        # validity), so that a repaired state is valid by the same rules as any other
        idx = np.nonzero(repaired)[0]
        _, ok, _ = _check(model, rows[idx], limits_only=True)
        valid[idx[~ok]] = False
        repaired[idx[~ok]] = False
    return Repair(rows, valid, repaired, rounds)


# the quantities a pull multiplies or divides by the prime it moves (products of tile
# levels), followed exactly through a round; the others are evaluated after each round
_EXACT = ("threads", "vthreads", "accum")
_Q = {q: k for k, q in enumerate(TILE_LIMITS)}


def _round(levers: LeverTable, over: dict, values: dict, active: np.ndarray,
           rows: np.ndarray, limits: dict, rng: np.random.Generator) -> None:
    """One round of pulls on the refused states ``active`` of one tile step, one lever a
    state at a time (so one :meth:`LeverTable.pull` a step for all of them).

    Threads, virtual threads and accumulators are pulled down until each fits: a pull
    multiplies or divides them by the prime it moves, so they need no evaluation. A state
    none of those moved then relieves shared memory, or else unrolled code, which the model
    must evaluate again: pulls while twice the primes moved stay within the excess (a pull
    lowers them by at most its prime: they stay at or over the limit, never far under it;
    a lowered unroll step counts as 2)."""
    m = len(active)
    vals = np.stack([np.asarray(values[q], dtype=np.int64) for q in _EXACT])
    lim = np.array([limits[q] for q in _EXACT], dtype=np.int64)[:, None]
    touched = np.zeros(m, dtype=bool)
    # shared memory or else unrolled code: which one a state relieves, and its budget
    later = np.where(over["shared_bytes"], _Q["shared_bytes"],
                     np.where(over["unrolled_code"], _Q["unrolled_code"], -1))
    excess = np.where(later == _Q["shared_bytes"], values["shared_bytes"] / limits["shared_bytes"],
                      values["unrolled_code"] / limits["unrolled_code"])
    moved_by = np.ones(m)
    sel = np.arange(m)
    while len(sel):
        exceeds = vals[:, sel] > lim   # [3, k]: threads, vthreads, accum
        # what each state relieves now: virtual threads first (they are part of the
        # accumulators), then accumulators, then threads (a per-thread factor moved to the
        # thread level adds to them); shared memory or code once none of those is over
        quantity = np.where(~touched[sel], later[sel], -1)
        for q in ("threads", "accum", "vthreads"):
            quantity = np.where(exceeds[_EXACT.index(q)], _Q[q], quantity)
        sel, quantity = sel[quantity >= 0], quantity[quantity >= 0]
        if not len(sel):
            break
        moved, factor, lever = levers.pull(rows, active[sel], quantity, rng)
        exact = np.isin(quantity, [_Q[q] for q in _EXACT])
        touched[sel] |= moved & exact
        power = levers.effects[:, lever] * moved
        vals[:, sel] = np.where(power < 0, vals[:, sel] // factor,
                                np.where(power > 0, vals[:, sel] * factor, vals[:, sel]))
        moved_by[sel] *= np.where(~exact & moved, np.where(factor == 1, 2, factor), 1)
        # a state stops when nothing moves it, or its shared memory or code budget is spent
        spent = ~exact & (2 * moved_by[sel] > excess[sel])
        later[sel[spent]] = -1
        sel = sel[moved]


def _take(stats: dict, idx: np.ndarray) -> dict:
    return {k: np.asarray(stats[k])[idx] for k in TILE_LIMITS}


def _check(model: SketchModel, rows: np.ndarray, limits_only: bool = False) -> tuple:
    """``({tile step: stats}, valid, fixable)``: the model's kernel statistics of the tile
    steps of ``rows``, its validity, and which refused states only tile limits refuse (no
    lever acts on another kernel's refusal)."""
    valid = np.ones(len(rows), dtype=bool)
    other_ok = np.ones(len(rows), dtype=bool)
    tiles = {}
    for step, kind, stats in model.step_kernels(rows, limits_only=limits_only):
        valid &= stats["valid"]
        if kind == "tile":
            tiles[step] = stats
        else:
            other_ok &= stats["valid"]
    return tiles, valid, ~valid & other_ok


def repair_population(task, pop: np.ndarray, rng: np.random.Generator,
                      repair_below: float = 1.0) -> Repair:
    """:func:`repair_rows` over a population of ``task`` (``[n, state_width]``, column 0
    the sketch), sketch by sketch (``repair_below`` as there); ``rounds`` is the most any
    sketch took."""
    pop = np.array(pop, dtype=np.int64, copy=True)
    n = len(pop)
    valid = np.zeros(n, dtype=bool)
    repaired = np.zeros(n, dtype=bool)
    rounds = 0
    for s in np.unique(pop[:, 0]) if n else ():
        idx = np.nonzero(pop[:, 0] == s)[0]
        model = task.models[int(s)]
        width = len(model.sketch.slots)
        r = repair_rows(model, pop[idx, 1: 1 + width], rng, repair_below=repair_below)
        pop[idx, 1: 1 + width] = r.rows
        valid[idx] = r.valid
        repaired[idx] = r.repaired
        rounds = max(rounds, r.rounds)
    return Repair(pop, valid, repaired, rounds)
