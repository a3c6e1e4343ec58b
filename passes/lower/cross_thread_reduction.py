"""cross_thread_reduction: a reduction whose reduce loop is bound to threadIdx becomes a
per-thread partial reduction followed by a reduction across the threads.

Each thread accumulates its share into a local register (out-of-range elements of a
non-dividing split leave the reducer's identity there). The threads then combine their
partials in one of two ways, and thread 0 of each reduction writes the result to the
reduction's buffer, which its readers read after a barrier:

- warp shuffles, where every lane of every warp provably executes them: ``log2(min(n,
  32))`` butterfly steps (``shfl_xor``) leave each warp's total in all its lanes; for
  ``n > 32`` lane 0 of each warp stores it to a shared buffer of one value per warp, one
  barrier, and every warp reduces those ``n / 32`` values with ``log2(n / 32)`` more
  butterfly steps. Taken when the reduce thread loop is bound to ``threadIdx.x``, its
  extent ``n`` is a power of two from 2 to 1024 and equals the launch's ``blockDim.x``
  (the largest extent of the function's ``threadIdx.x`` loops; or ``n`` is 32 and
  ``blockDim.x`` a multiple of 32, whose warps past the first skip the reduction as a
  whole and which needs no barrier), the block's threads fill
  whole warps, the reduced type is float32, float16, bfloat16 or int32, no thread loop lies
  inside the reduce thread loop, no other ``threadIdx.x`` loop encloses it, and no
  condition around it depends on a thread index that splits warps. Lanes of a warp are
  then consecutive ``threadIdx.x`` values of one reduction (``n >= 32``) or whole groups of
  ``n`` of them (``n < 32``, several reductions per warp, ``threadIdx.y`` / ``z`` loops
  around the reduction at their full launch extent).
- otherwise a tree in shared memory: every partial is stored, and the block combines them
  in ``log2(n)`` steps separated by barriers.

``CrossThreadReduction(warp_shuffle=False)`` always builds the tree. The reduction's
spatial indices must not depend on loops inside the thread loop (one reduction per
execution of the thread loop's body), and every reduce loop must be at or inside the
thread loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import (
    COMBINER_OF_OP,
    SHUFFLE_DTYPES,
    WARP_SIZE,
    Bin,
    IntImm,
    Load,
    conjuncts,
    const,
    free_vars,
    reducer_identity,
    shfl_xor,
    substitute,
)
from ...ir.stmt import Alloc, Barrier, Block, Buffer, For, If, PrimFunc, Seq, Store, stmt_children
from ...ir.traversal import follow_path, replace_at, walk
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError


def _find(s, path):
    if isinstance(s, Block) and s.init is not None and not s.annotations.get(
            "cross_thread_partial"):
        loops = [n for n in path if isinstance(n, For)]
        rv = set()
        for iv, b in zip(s.iter_vars, s.bindings):
            if iv.kind == "R":
                free_vars(b, rv)
        if any(n.kind == "thread" and n.thread.startswith("threadIdx") and n.var in rv
               for n in loops):
            return path + [s]
    for c in stmt_children(s):
        r = _find(c, path + [s])
        if r is not None:
            return r
    return None


def cross_thread_reduction(func: PrimFunc, warp_shuffle: bool = True) -> PrimFunc:
    body = func.body
    block_dim = None  # the launch's threads, read once a reduction is found
    while True:
        path = _find(body, [])
        if path is None:
            return func.replace(body=body)
        if warp_shuffle and block_dim is None:
            block_dim = _block_dim(body)  # rewrites add no thread loops: read once
        body = _rewrite(path, block_dim)


def _block_dim(body) -> dict:
    """The launch's threads per block by tag: the largest extent of the thread loops of
    each tag (over the whole function: never smaller than any one kernel's)."""
    ext: dict = {}
    for x in walk(body):
        if isinstance(x, For) and x.kind == "thread" and x.thread.startswith("threadIdx"):
            ext[x.thread] = max(ext.get(x.thread, 1), x.extent)
    return ext


def _warp_aligned(path, tk: int, tloop: For, dtype: str, block_dim: dict | None) -> bool:
    """Whether every lane of every warp reaching the end of ``tloop``'s body runs it, and
    the lanes of each warp are ``tloop``'s consecutive indices (see the module docstring)."""
    n = tloop.extent
    if block_dim is None or tloop.thread != "threadIdx.x" or dtype not in SHUFFLE_DTYPES:
        return False
    bx = block_dim.get("threadIdx.x", 1)
    if not (2 <= n <= 1024 and n & (n - 1) == 0):
        return False
    if bx != n and not (n == WARP_SIZE and bx % WARP_SIZE == 0):
        return False  # idle lanes (threadIdx.x >= n) would share warps with active ones
    threads = 1
    for v in block_dim.values():
        threads *= v
    if threads % WARP_SIZE:
        return False
    if any(isinstance(x, For) and x.kind == "thread" for x in walk(tloop.body)):
        return False
    # the vars conditions around the reduction may read without splitting a warp: serial
    # and block loops, and for whole warps per reduction the other thread indices
    allowed = set()
    for nd in path[:tk]:
        if not isinstance(nd, For):
            continue
        if nd.kind == "thread" and nd.thread.startswith("threadIdx"):
            if nd.thread == "threadIdx.x":
                return False
            if n < WARP_SIZE:
                if nd.extent != block_dim.get(nd.thread, 1):
                    return False  # the loop's idle threads share warps with active ones
                continue
        allowed.add(nd.var)
    for nd in path[:tk]:
        cond = None
        if isinstance(nd, If):
            cond = nd.cond
        elif isinstance(nd, Block) and nd.predicate is not None:
            cond = substitute(nd.predicate, dict(
                zip((iv.var for iv in nd.iter_vars), nd.bindings)))
        if cond is not None and not free_vars(cond) <= allowed:
            return False
    return True


def _butterfly(part: Buffer, op: str, lanes: int) -> list:
    """Stores that leave in every lane the combination of ``part`` over its group of
    ``lanes`` consecutive lanes (a power of two up to a warp)."""
    zero = (IntImm(0),)
    steps = []
    m = lanes // 2
    while m >= 1:
        steps.append(Store(part, zero, Bin(op, Load(part, zero),
                                           shfl_xor(Load(part, zero), m, lanes))))
        m //= 2
    return steps


def _rewrite(path, block_dim: dict | None = None):
    block: Block = path[-1]
    loops = [(k, n) for k, n in enumerate(path) if isinstance(n, For)]
    rv, sv = set(), set()
    for iv, b in zip(block.iter_vars, block.bindings):
        free_vars(b, rv if iv.kind == "R" else sv)
    tk, tloop = next((k, n) for k, n in loops if n.kind == "thread" and
                     n.thread.startswith("threadIdx") and n.var in rv)
    inner = {n.var for k, n in loops if k > tk}
    outer_red = [n for k, n in loops if k < tk and n.var in rv]
    if outer_red:
        raise LoweringError(
            f"cross-thread reduction {block.name}: reduce loop {outer_red[0].var.name} is "
            f"outside the thread loop {tloop.var.name}; put every reduce loop at or inside it",
            stage=block.name, axis=outer_red[0].var.name)
    if sv & inner:
        raise LoweringError(
            f"cross-thread reduction {block.name}: its output index depends on loops inside "
            f"the thread loop {tloop.var.name}; make the thread loop the innermost spatial "
            "loop's parent", stage=block.name, axis=tloop.var.name)
    st = block.body
    if not (isinstance(st, Store) and isinstance(st.value, Bin)
            and st.value.op in COMBINER_OF_OP):
        raise LoweringError(f"cross-thread reduction {block.name}: not a simple reduction",
                            stage=block.name)
    out = st.buffer
    combiner = COMBINER_OF_OP[st.value.op]
    acc_load, src = st.value.a, st.value.b
    if not (isinstance(acc_load, Load) and acc_load.buffer is out):
        acc_load, src = src, acc_load
    n = tloop.extent
    # other thread loops around the reduction: each of their indices is its own group
    groups = [nd for k, nd in loops if nd.kind == "thread" and nd.thread.startswith(
        "threadIdx") and nd is not tloop and k < tk]
    gsize = 1
    gidx = IntImm(0)
    for g in groups:
        gidx = gidx * IntImm(g.extent) + g.var
        gsize *= g.extent
    part = Buffer(f"{block.name}.red_local", out.dtype, (1,), "local")
    red = Buffer(f"{block.name}.red_shared", out.dtype, (gsize * n,), "shared")
    zero = (IntImm(0),)
    # per-thread partial: a reduction block into the local register
    pblock = Block(
        f"{block.name}.partial", block.iter_vars, block.bindings,
        Store(part, zero, Bin(st.value.op, Load(part, zero), src)),
        Store(part, zero, reducer_identity(combiner, out.dtype)), block.predicate,
        {**block.annotations, "cross_thread_partial": True})
    body = replace_at(path, pblock)
    tid = tloop.var
    shuffle = _warp_aligned(path, tk, tloop, out.dtype, block_dim)
    if shuffle:
        # butterflies within each warp, then (above a warp) across the warps' totals
        steps = _butterfly(part, st.value.op, min(n, WARP_SIZE))
        if n > WARP_SIZE:
            warps = n // WARP_SIZE
            red = Buffer(f"{block.name}.red_warp", out.dtype, (gsize * warps,), "shared")
            wbase = gidx * IntImm(warps)
            steps += [If(tid % IntImm(WARP_SIZE) == const(0),
                         Store(red, (wbase + tid // IntImm(WARP_SIZE),), Load(part, zero))),
                      Barrier(),
                      Store(part, zero, Load(red, (wbase + tid % IntImm(warps),)))]
            steps += _butterfly(part, st.value.op, warps)
        result = Load(part, zero)
    else:
        # the tree reduction at the end of the thread loop's body
        base = gidx * IntImm(n)
        steps = [Store(red, (base + tid,), Load(part, zero)), Barrier()]
        p = 1
        while p < n:
            p *= 2
        stride = p // 2
        while stride >= 1:
            cond = (tid < const(stride)) & ((tid + IntImm(stride)) < const(n))
            upd = Store(red, (base + tid,), Bin(st.value.op, Load(red, (base + tid,)),
                                                 Load(red, (base + tid + IntImm(stride),))))
            steps += [If(cond, upd), Barrier()]
            stride //= 2
        result = Load(red, (base,))
    vmap = {iv.var: b for iv, b in zip(block.iter_vars, block.bindings) if iv.kind == "S"}
    out_idx = tuple(substitute(i, vmap) for i in st.indices)
    # the block's guards on loops outside the thread loop (a non-dividing split of a
    # spatial axis) also guard the write-back; those on reduce loops guarded the partials
    outside = {n.var for k, n in loops if k < tk}
    write = If(tid == const(0), Store(out, out_idx, result))
    for term in conjuncts(block.predicate):
        if free_vars(term) <= outside:
            write = If(term, write)
    steps.append(write)
    # rebuild: find the thread loop in the new tree by following the old path positions
    tpath = follow_path(body, path, tk)
    t_new = tpath[-1]
    # the register is declared around the thread loop: decompose_reduction puts the
    # partial reduction's init just before that loop
    new_t = Alloc(part, t_new.replace(body=Seq([t_new.body] + steps)))
    body = replace_at(tpath, new_t)
    # the shared buffer lives above the thread loops of the block
    if shuffle and n <= WARP_SIZE:
        return body
    first_thread = next(k for k, nd in loops if nd.kind == "thread" and
                        nd.thread.startswith("threadIdx"))
    apath = follow_path(body, path, first_thread)
    return replace_at(apath, Alloc(red, apath[-1]))


@register_pass
@dataclass(frozen=True)
class CrossThreadReduction(Pass):
    """Lower reductions over a threadIdx-bound loop to warp shuffles where every lane of a
    warp provably runs them, else to a shared-memory tree (see the module docstring).

    Parameters:
        warp_shuffle: use warp shuffles where they apply (False: always the tree).
    """

    name = "cross_thread_reduction"
    lowering = True
    levels = (Level.PRIM,)
    warp_shuffle: bool = True

    def apply(self, module, ctx):
        return self.map_functions(
            module, lambda f: cross_thread_reduction(f, self.warp_shuffle))
