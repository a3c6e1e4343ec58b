"""Features of configs for the cost model.

* ``knob``: the knob values themselves (split extents, permutations, one-hot annotations,
  knob values), looked up per knob in tables, so a whole population is featurized with a
  few numpy gathers. Only comparable between tasks of the same template and space.
* ``itervar``: the loop structure of the lowered kernels: per loop (in program order, up
  to :data:`MAX_LOOPS`) its extent, depth, the products of the extents above and below it,
  its kind (serial, unroll, vectorize, block or thread binding), its unroll pragmas and the
  memory accesses in its body per scope; plus the kernel's launch shape and the
  statistics of :mod:`ptxforge.measure.kernel_stats`.
* ``curve``: a fixed-length summary of the same loops that does not depend on loop names or
  counts: for each memory scope, the accesses per iteration and the iteration count along
  the deepest loop nest, sampled at :data:`CURVE_POINTS` depths; plus the kernel
  statistics. Comparable across tasks, hence the feature for transfer learning.

``itervar`` and ``curve`` need each config instantiated and lowered (tens of milliseconds
each), so :class:`FeatureCache` computes them in forked worker processes and remembers them
per config index; a config that cannot be instantiated or lowered has no features (None)
and the tuners never propose it.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Load
from ..ir.stmt import Alloc, For, If, Let, Seq, Stmt, Store, stmt_exprs, walk_exprs
from .space import ANNOTATIONS, AnnotateEntity, ReorderEntity, SplitEntity

FEATURE_TYPES = ("knob", "itervar", "curve")
MAX_LOOPS = 24
CURVE_POINTS = 8
SCOPES = ("global", "shared", "local")
_KIND_SLOTS = ("serial", "unroll", "vectorize", "block", "thread")


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


# -- knob features ------------------------------------------------------------------------------


class KnobFeaturizer:
    """Knob features of config indices, by table look-up (vectorized)."""

    def __init__(self, space):
        self.space = space
        self.dims = np.array(space.dims, dtype=np.int64)
        self.tables = []
        for knob in space.space_map.values():
            rows = [_entity_row(e, knob) for e in knob.entities]
            width = max(len(r) for r in rows)
            self.tables.append(np.array([r + [0.0] * (width - len(r)) for r in rows],
                                        dtype=np.float32))

    def knobs(self, indices) -> np.ndarray:
        """Config indices as an (n, knobs) array of candidate indices."""
        p = np.asarray(indices, dtype=np.int64).copy()
        out = np.empty((len(p), len(self.dims)), dtype=np.int64)
        for j, d in enumerate(self.dims):
            out[:, j] = p % d
            p //= d
        return out

    def __call__(self, indices) -> np.ndarray:
        k = self.knobs(indices)
        return np.concatenate([t[k[:, j]] for j, t in enumerate(self.tables)], axis=1)


def _entity_row(e, knob) -> list:
    if isinstance(e, SplitEntity):
        return [float(v) for v in e.extents(knob.product)]
    if isinstance(e, ReorderEntity):
        return [float(v) for v in e.perm]
    if isinstance(e, AnnotateEntity):
        row: list = []
        for ann in e.anns:
            onehot = [0.0] * len(ANNOTATIONS)
            onehot[ANNOTATIONS.index(ann)] = 1.0
            row += onehot
        return row
    v = e.val
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return [float(v)]
    return [float(knob.index_of(e))]


# -- loop-structure features ----------------------------------------------------------------------


class _Loop:
    __slots__ = ("extent", "depth", "kind", "unroll_step", "explicit", "above", "below",
                 "access")

    def __init__(self, f: For, depth: int, above: float):
        self.extent = f.extent
        self.depth = depth
        if f.kind == "thread":
            self.kind = "block" if f.thread.startswith("blockIdx") else "thread"
        else:
            self.kind = f.kind if f.kind in _KIND_SLOTS else "serial"
        self.unroll_step = float(f.annotations.get("auto_unroll_max_step", 0) or 0)
        self.explicit = float(bool(f.annotations.get("unroll_explicit", 0)))
        self.above = above * (1 if self.kind in ("block", "thread") else f.extent)
        self.below = 1.0
        self.access = {s: 0.0 for s in SCOPES}


def _collect_loops(body: Stmt) -> tuple[list, list]:
    """Loops in program order and the chain of loops of the deepest nest."""
    loops: list = []

    def visit(s: Stmt, depth: int, above: float, stack: list) -> tuple[float, dict, list]:
        """(statement instances per run, accesses per scope per run, deepest chain)."""
        if isinstance(s, Seq):
            total, acc, best = 0.0, {k: 0.0 for k in SCOPES}, []
            for c in s.stmts:
                n, a, chain = visit(c, depth, above, stack)
                total += n
                for k in SCOPES:
                    acc[k] += a[k]
                if len(chain) > len(best):
                    best = chain
            return total, acc, best
        if isinstance(s, For):
            loop = _Loop(s, depth, above)
            loops.append(loop)
            n, a, chain = visit(s.body, depth + 1, loop.above, stack)
            loop.below = max(1.0, n)
            loop.access = a
            times = 1 if loop.kind in ("block", "thread") else s.extent
            return n * times, {k: v * times for k, v in a.items()}, [loop] + chain
        if isinstance(s, If):
            n, a, chain = visit(s.then, depth, above, stack)
            if s.else_ is not None:
                n2, a2, chain2 = visit(s.else_, depth, above, stack)
                n += n2
                a = {k: a[k] + a2[k] for k in SCOPES}
                chain = chain if len(chain) >= len(chain2) else chain2
            return n, a, chain
        if isinstance(s, (Let, Alloc)):
            return visit(s.body, depth, above, stack)
        acc = {k: 0.0 for k in SCOPES}
        if isinstance(s, Store):
            acc[s.buffer.scope] = acc.get(s.buffer.scope, 0.0) + 1
        for e in stmt_exprs(s):
            for x in walk_exprs(e):
                if isinstance(x, Load):
                    acc[x.buffer.scope] = acc.get(x.buffer.scope, 0.0) + 1
        return 1.0, acc, []

    _, _, chain = visit(body, 0, 1.0, [])
    return loops, chain


def _stats_row(stats) -> list:
    return [_log(stats.grid[0]), _log(stats.grid[1]), _log(stats.grid[2]),
            _log(stats.block[0]), _log(stats.block[1]), _log(stats.block[2]),
            _log(stats.shared_bytes), _log(stats.local_bytes), _log(stats.flops),
            _log(stats.int_ops), _log(stats.global_sector_bytes),
            _log(stats.shared_bytes_accessed), _log(stats.barriers),
            _log(stats.global_load_bytes)]


STATS_WIDTH = 14
LOOP_WIDTH = 4 + len(_KIND_SLOTS) + 2 + len(SCOPES)
ITERVAR_WIDTH = STATS_WIDTH + MAX_LOOPS * LOOP_WIDTH
CURVE_WIDTH = STATS_WIDTH + len(SCOPES) * CURVE_POINTS * 2


def itervar_features(device_module) -> np.ndarray:
    """Loop-structure features of the first kernel that does the most work."""
    from ..measure.kernel_stats import analyze_kernel

    kernel, stats = _main_kernel(device_module, analyze_kernel)
    loops, _ = _collect_loops(kernel.body)
    row = _stats_row(stats)
    for loop in loops[:MAX_LOOPS]:
        kind = [1.0 if loop.kind == k else 0.0 for k in _KIND_SLOTS]
        row += [_log(loop.extent), float(loop.depth), _log(loop.above), _log(loop.below)]
        row += kind + [_log(loop.unroll_step), loop.explicit]
        row += [_log(loop.access[s]) for s in SCOPES]
    row += [0.0] * (ITERVAR_WIDTH - len(row))
    return np.asarray(row, dtype=np.float32)


def curve_features(device_module) -> np.ndarray:
    """Accesses per iteration and iterations along the deepest loop nest, per scope,
    sampled from the innermost loop outwards at fixed depths."""
    from ..measure.kernel_stats import analyze_kernel

    kernel, stats = _main_kernel(device_module, analyze_kernel)
    _, chain = _collect_loops(kernel.body)
    inner_first = list(reversed(chain))
    row = _stats_row(stats)
    for scope in SCOPES:
        for k in range(CURVE_POINTS):
            if inner_first:
                loop = inner_first[min(k, len(inner_first) - 1)]
                row += [_log(loop.access[scope]), _log(loop.below * max(loop.extent, 1))]
            else:
                row += [0.0, 0.0]
    return np.asarray(row, dtype=np.float32)


def _main_kernel(device_module, analyze):
    kernels = device_module.kernels()
    if not kernels:
        raise ValueError("the lowered module has no kernel")
    best = None
    for k in kernels:
        st = analyze(k)
        work = st.total_flops + st.int_ops * st.threads * st.blocks
        if best is None or work > best[2]:
            best = (k, st, work)
    return best[0], best[1]


def lowered_features(task, config, kind: str) -> np.ndarray | None:
    """``itervar`` or ``curve`` features of one config (None when it does not lower)."""
    from ..passes import PassContext
    from ..passes.lower import lowering_pipeline

    try:
        s, _ = task.instantiate(config)
        with PassContext(verify=False) as ctx:
            device = lowering_pipeline()(s.module, ctx)
        return itervar_features(device) if kind == "itervar" else curve_features(device)
    except Exception:  # an invalid config has no features; the tuner avoids it
        return None


# -- the cache and its workers ----------------------------------------------------------------

_worker_tasks: dict = {}


def _features_job(name: str, args: tuple, target: str, indices: list, kind: str) -> list:
    """Worker side: features of config indices of a task (the task is made once per
    worker)."""
    from .task import create

    key = (name, repr(args), target)
    task = _worker_tasks.get(key)
    if task is None:
        task = _worker_tasks[key] = create(name, args, target)
    return [lowered_features(task, task.config_space.get(int(i)), kind) for i in indices]


class FeatureCache:
    """Features of config indices of one task, computed once each.

    ``knob`` features are computed on the spot; ``itervar``/``curve`` features in
    ``n_parallel`` forked workers (0: in this process), in chunks of ``chunk`` configs.
    """

    def __init__(self, task, kind: str, n_parallel: int | None = None, chunk: int = 8):
        if kind not in FEATURE_TYPES:
            raise ValueError(f"unknown feature type {kind!r}; use one of {FEATURE_TYPES}")
        self.task = task
        self.kind = kind
        self.chunk = chunk
        self._knob = KnobFeaturizer(task.config_space) if kind == "knob" else None
        self._cache: dict = {}
        if n_parallel is None:
            from ..measure.build import default_parallelism

            n_parallel = default_parallelism()
        self.n_parallel = n_parallel
        self._pool = None

    @property
    def width(self) -> int:
        if self._knob is not None:
            return sum(t.shape[1] for t in self._knob.tables)
        return ITERVAR_WIDTH if self.kind == "itervar" else CURVE_WIDTH

    def get(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """``(features, valid)``: one row per index; ``valid[i]`` is False for configs that
        could not be instantiated or lowered (their row is zeros)."""
        idx = [int(i) for i in indices]
        if self._knob is not None:
            return self._knob(np.asarray(idx, dtype=np.int64)), np.ones(len(idx), dtype=bool)
        missing = list(dict.fromkeys(i for i in idx if i not in self._cache))
        if missing:
            self._compute(missing)
        out = np.zeros((len(idx), self.width), dtype=np.float32)
        valid = np.zeros(len(idx), dtype=bool)
        for r, i in enumerate(idx):
            f = self._cache[i]
            if f is not None:
                out[r] = f
                valid[r] = True
        return out, valid

    def _compute(self, indices: list) -> None:
        if self.n_parallel == 0 or len(indices) <= 2:
            space = self.task.config_space
            for i in indices:
                self._cache[i] = lowered_features(self.task, space.get(i), self.kind)
            return
        from ..measure.pool import WorkerPool

        if self._pool is None:
            self._pool = WorkerPool(self.n_parallel, "fork", name="ptxforge-features")
        chunks = [indices[k:k + self.chunk] for k in range(0, len(indices), self.chunk)]
        jobs = [(n, _features_job, (self.task.name, self.task.args, self.task.target, c,
                                    self.kind)) for n, c in enumerate(chunks)]
        for o, c in zip(self._pool.run(jobs, timeout=120.0), chunks):
            values = o.value if o.status == "ok" else [None] * len(c)
            for i, v in zip(c, values):
                self._cache[i] = v

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
