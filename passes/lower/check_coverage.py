"""check_coverage: reject thread bindings under which a kernel would not compute every output
element exactly once.

A GPU runs every (blockIdx, threadIdx) pair of a launch once, in parallel, with a barrier only
among the threads of one block. Lowering maps a loop bound to a thread index onto that index
(a nested loop bound to the same index shares it, guarded where shorter). The bindings below
compile to kernels that skip or repeat work, or read what another block or thread wrote
without a barrier, so they are rejected before lowering, naming the stage, the loop and the
rule:

* ``one tag per stage index``: two loops that both index a stage are bound to the same
  thread index; after lowering they share it, and only the diagonal of the two is computed.
* ``nested extent``: a loop bound to a thread index inside a loop bound to the same index
  with fewer threads; the iterations past the outer extent would never run.
* ``block index outermost``: a ``blockIdx`` loop nested in another loop of its kernel
  (serial, unrolled, ``threadIdx``, ...). Blocks run once per launch, in parallel: the
  enclosing loop's iterations are not ordered against other blocks.
* ``no cross-block reduction``: a reduce loop bound to ``blockIdx``; blocks cannot combine
  partial results (bind it to ``threadIdx`` for a cross-thread reduction, or ``rfactor``).
* ``one reducing thread index``: reduce loops bound to two thread indices; the cross-thread
  reduction combines over one.
* ``reduction replicated``: a reduction that several threads (or blocks) would run into the
  same elements of memory they share, because a thread index of the kernel does not index
  it; their read-modify-write steps race.
* ``producer visible to its readers``: a stage computed inside another stage's loops spreads
  its work over a thread index its readers do not share: over ``blockIdx`` (no grid-wide
  barrier), or over ``threadIdx`` into registers or global memory (only shared memory is
  visible to the other threads of the block after a barrier).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import free_vars
from ...ir.stmt import Alloc, Block, For, PrimFunc, Seq, Stmt
from ...ir.traversal import block_paths
from ..base import Pass
from ..registry import register_pass
from ..schedule.compute_at import output_buffers, reads_of
from .buffer_uses import BufferUses
from .common import LoweringError
from .compact_buffers import placed_scope


def _thread_loops(path: list) -> list:
    return [n for n in path if isinstance(n, For) and n.kind == "thread" and n.extent > 1]


def _launch(kernel: Stmt, paths: dict) -> dict:
    """``{tag: (extent, stage)}``: each hardware index of a kernel, its launch extent and a
    stage that binds it at that extent."""
    out: dict = {}
    for name, path in paths.items():
        for n in _thread_loops(path):
            if n.extent > out.get(n.thread, (1, ""))[0]:
                out[n.thread] = (n.extent, name)
    return out


def _fail(stage: str, loop: For, rule: str, message: str):
    raise LoweringError(f"stage {stage}, loop {loop.var.name}: {message} [rule: {rule}]",
                        stage=stage, axis=loop.var.name, limit=rule)


def _check_nesting(name: str, loops: list, feeds: set) -> None:
    for k, n in enumerate(loops):
        if n.kind != "thread" or not n.thread.startswith("blockIdx") or n.extent <= 1:
            continue
        for m in loops[:k]:
            if m.extent > 1 and not (m.kind == "thread" and m.thread.startswith("blockIdx")):
                what = f"{m.kind} loop" if m.kind != "thread" else f"{m.thread} loop"
                _fail(name, n, "block index outermost",
                      f"bound to {n.thread} inside {what} {m.var.name} (extent {m.extent}) of "
                      f"the same kernel; blocks run once per launch and in parallel, so a "
                      f"block index must enclose every other loop of its kernel: reorder "
                      f"{n.var.name} outward or give the stage its own kernel")
    by_tag: dict = {}
    for n in loops:
        if n.kind != "thread":
            continue
        # lowering gives a nested loop the enclosing loop's index, guarded by its extent:
        # the body runs where outer == inner < inner extent, whatever the extents
        for m in by_tag.get(n.thread, []):
            if m.var in feeds and n.var in feeds:
                _fail(name, n, "one tag per stage index",
                      f"bound to {n.thread}, as is {m.var.name}, and both index the stage; "
                      f"they would share one hardware index and compute only their diagonal: "
                      f"bind one of them to another index, or fuse them first")
            if n.extent > m.extent or (m.var in feeds and n.extent < m.extent):
                cut = m.var.name if n.extent < m.extent else n.var.name
                _fail(name, n, "nested extent",
                      f"bound to {n.thread} with extent {n.extent} inside loop {m.var.name} "
                      f"bound to the same index with extent {m.extent}; they share one "
                      f"hardware index, so the iterations of {cut} past "
                      f"{min(n.extent, m.extent)} would never run: split so the bound parts "
                      f"match, or bind {n.var.name} to another index")
        by_tag.setdefault(n.thread, []).append(n)


def _check_reduction(name: str, block: Block, loops: list, scope: str, launch: dict) -> None:
    reduce_feeds: set = set()
    feeds: set = set()
    for iv, b in zip(block.iter_vars, block.bindings):
        free_vars(b, reduce_feeds if iv.kind == "R" else feeds)
    feeds |= reduce_feeds
    reducing = [n for n in _thread_loops(loops) if n.var in reduce_feeds]
    for n in reducing:
        if n.thread.startswith("blockIdx"):
            _fail(name, n, "no cross-block reduction",
                  f"a reduce loop bound to {n.thread}; blocks cannot combine partial results, "
                  "so each would write its own partial sum: bind it to threadIdx (a "
                  "cross-thread reduction) or rfactor it into a separate stage")
    if len(reducing) > 1:
        _fail(name, reducing[1], "one reducing thread index",
              f"a reduce loop bound to {reducing[1].thread} while {reducing[0].var.name} "
              f"reduces over {reducing[0].thread}; a cross-thread reduction combines over "
              "one thread index: fuse the reduce loops before binding")
    if scope in ("local", "warp", "warpgroup"):
        # each thread (each warp: its lanes run a fragment's intrinsics together) reduces
        # into its own copy
        return
    for tag, (extent, by) in sorted(launch.items()):
        if scope == "shared" and tag.startswith("blockIdx"):
            continue  # every block has its own shared memory
        mine = [n for n in _thread_loops(loops) if n.thread == tag]
        if any(n.var in feeds for n in mine):
            continue
        where = (f"its loop {mine[0].var.name} is bound to {tag} but does not index it"
                 if mine else f"none of its loops is bound to {tag}")
        loop = mine[0] if mine else loops[-1] if loops else None
        message = (f"a reduction into {scope} memory, but {where} while the kernel runs "
                   f"{extent} of {tag} (bound by stage {by}); that many copies would update "
                   f"the same elements at once: bind a loop of {name} to {tag} or move it "
                   "to its own kernel")
        if loop is None:
            raise LoweringError(f"stage {name}: {message} [rule: reduction replicated]",
                                stage=name, limit="reduction replicated")
        _fail(name, loop, "reduction replicated", message)


def _check_producer(name: str, path: list, scope: str, readers: list, launch: dict) -> None:
    block = path[-1]
    feeds: set = set()
    for b in block.bindings:
        free_vars(b, feeds)
    shared_loops = None
    for rpath in readers:
        ids = {id(n) for n in rpath}
        shared_loops = ids if shared_loops is None else shared_loops & ids
    for n in path:
        if not isinstance(n, For) or n.kind != "thread" or id(n) in shared_loops:
            continue
        full = launch.get(n.thread, (1, ""))[0]
        if n.var not in feeds and n.extent >= full:
            continue  # every thread runs it alike: repeated, not split
        blocks = n.thread.startswith("blockIdx")
        if blocks:
            why = "no barrier orders the blocks of one launch"
        elif scope != "shared":
            why = (f"the result lives in {scope} memory, which the other threads of the "
                   "block cannot read after a barrier; cache it in shared memory")
        else:
            continue
        spread = (f"spreads the stage's work over {n.extent} {'blocks' if blocks else 'threads'}"
                  if n.var in feeds else
                  f"runs the stage on {n.extent} of the kernel's {full} "
                  f"{'blocks' if blocks else 'threads'} only")
        _fail(name, n, "producer visible to its readers",
              f"bound to {n.thread}, which {spread}, but its readers in the same kernel "
              f"({', '.join(r[-1].name for r in readers)}) do not share that loop; {why}")


def check_global_memory(func: PrimFunc) -> None:
    """Raise :class:`LoweringError` when the function's buffers (parameters and global
    intermediates) cannot all be in the target GPU's memory at once."""
    from ...ir import dtype as dt
    from ...target import current_target

    target = current_target()
    body, buffers = func.body, list(func.params)
    while isinstance(body, Alloc):
        if body.buffer.scope == "global":
            buffers.append(body.buffer)
        body = body.body
    total = sum(b.size * dt.nbytes(b.dtype) for b in buffers)
    if total > target.global_memory_bytes:
        big = max(buffers, key=lambda b: b.size * dt.nbytes(b.dtype))
        raise LoweringError(
            f"the buffers of {func.name} need {total} bytes of global memory (the largest, "
            f"{big.name}, {big.size * dt.nbytes(big.dtype)} bytes); the target "
            f"{target.label} has {target.global_memory_bytes}: split the work into smaller "
            "tensors", stage=big.name, limit=f"global_memory_bytes={target.global_memory_bytes}")


def check_division_by_zero(func: PrimFunc) -> None:
    """Raise :class:`LoweringError` for an integer division or modulo whose divisor is a
    constant zero (a GPU computes an undefined value; numpy raises or warns)."""
    from ...ir import dtype as dt
    from ...ir.expr import Bin, IntImm
    from ...ir.simplify import simplify
    from ...ir.stmt import stmt_exprs, walk_exprs
    from ...ir.stmt import walk as walk_all

    for node in walk_all(func.body):
        for e in stmt_exprs(node):
            for x in walk_exprs(e):
                if not (isinstance(x, Bin) and x.op in ("div", "mod", "floordiv", "floormod")
                        and dt.is_int(x.dtype)):
                    continue
                b = x.b if isinstance(x.b, IntImm) or free_vars(x.b) else simplify(x.b)
                if isinstance(b, IntImm) and b.value == 0:
                    stage = next((n.name for n in _blocks_holding(func.body, node)), "")
                    raise LoweringError(
                        f"{'stage ' + stage + ': ' if stage else ''}integer {x.op} by zero in "
                        f"{x}; a GPU computes an undefined value: divide by a non-zero "
                        "constant or guard the division", stage=stage,
                        limit="division by zero")


def _blocks_holding(root: Stmt, node: Stmt) -> list:
    return [p[-1] for p in block_paths(root).values() if _holds(p[-1], node)]


def _holds(block: Block, node: Stmt) -> bool:
    from ...ir.stmt import walk as walk_all

    return any(n is node for n in walk_all(block))


def check_coverage(func: PrimFunc) -> PrimFunc:
    """Raise :class:`LoweringError` for the first binding that breaks a rule of this
    module, or for buffers beyond the target's memory; return ``func`` unchanged
    otherwise."""
    check_global_memory(func)
    check_division_by_zero(func)
    body = func.body
    while isinstance(body, Alloc):
        body = body.body
    kernels = list(body.stmts) if isinstance(body, Seq) else [body]
    params = set(func.params)
    uses = BufferUses()
    for kernel in kernels:
        paths = block_paths(kernel)
        launch = _launch(kernel, paths)
        for name, path in paths.items():
            block: Block = path[-1]
            loops = [n for n in path if isinstance(n, For)]
            feeds: set = set()
            for b in block.bindings:
                free_vars(b, feeds)
            _check_nesting(name, loops, feeds)
            # a tuple compute's stage writes one buffer per output; each may have readers
            for k, buf in enumerate(output_buffers(block)):
                scope = "global" if buf in params else placed_scope(func.body, buf, uses)
                if k == 0 and block.init is not None:
                    _check_reduction(name, block, loops, scope, launch)
                # (a stage that does not touch buf is skipped before its loads are read)
                readers = [p for other, p in paths.items() if other != name
                           and uses.accesses(p[-1], buf) and reads_of(p[-1], buf)]
                if readers:
                    _check_producer(name, path, scope, readers, launch)
    return func


@register_pass
@dataclass(frozen=True)
class CheckCoverage(Pass):
    """Reject thread bindings that would skip or repeat output elements (see the module
    docstring for the rules); changes nothing."""

    name = "check_coverage"
    lowering = True
    levels = (Level.PRIM,)

    def apply(self, module, ctx):
        return self.map_functions(module, check_coverage)
