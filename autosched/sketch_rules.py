"""Sketch generation for the GPU: rules over the compute DAG.

The rules, per stage (outputs first, as Ansor derives them):

* always inline: element-wise / injective stages that are not outputs;
* multi-level tiling ("SSSRRSRS") for reductions whose inputs are reused across outputs,
  with the element-wise consumer fused at the thread level, or a local cache_write when
  there is none; the inputs are copied to shared memory at the outer reduce loop and
  fetched cooperatively (fused, vectorized, split by the thread count, bound to threads);
* split-K for long reductions: the same tiling of a factored reduction (rfactor) whose
  partial sums come from different blocks, and a small kernel that adds them up, fused
  with the element-wise consumer;
* cross-thread reduction for reductions with few outputs per reduction length: a block
  per output, the reduction split over its threads;
* everything else (element-wise outputs, reductions without reuse): fused, split into
  blocks of threads.

Each combination of the choices per stage is one sketch. The steps name loops and stages
through :mod:`~ptxforge.passes.schedule.names`, as the passes do; the test suite applies
every sketch of every supported workload (tests/test_autosched_sketch.py), so nothing is
checked again here at run time.
"""

from __future__ import annotations

import itertools

from ..passes.schedule.names import split_outer
from .dag_analysis import DAGAnalysis
from .sketch import Sketch
from .steps import CrossThreadStep, InlineStep, SimpleStep, TileStep

MAX_SKETCHES = 16
SPLIT_K_MIN_REDUCE = 256          # reductions at least this long may be split over blocks
CROSS_THREAD_MIN_REDUCE = 64      # ... and may be reduced across threads when the output
CROSS_THREAD_SPACE_RATIO = 16     # count is at most this multiple of the reduction length


def rfactor_available() -> bool:
    """Whether the schedule passes include ``rfactor`` (split-K and cross-thread rules)."""
    from ..passes import get_pass
    from ..passes.errors import UnknownPassError

    try:
        get_pass("rfactor")
    except UnknownPassError:
        return False
    return True


def stage_options(an: DAGAnalysis, name: str, use_rfactor: bool) -> list:
    """The rule choices for one non-inlined stage."""
    st = an.stages[name]
    if not st.reduce:
        return ["simple"]
    opts = ["tile"] if st.has_reuse() else ["simple"]
    if use_rfactor and not st.ordered:  # an order-sensitive sum stays serial
        if opts == ["tile"] and st.reduce_size >= SPLIT_K_MIN_REDUCE:
            opts.append("split_k")
        if (st.reduce_size >= CROSS_THREAD_MIN_REDUCE
                and st.space_size <= CROSS_THREAD_SPACE_RATIO * st.reduce_size):
            opts.append("cross_thread")
    return opts


def _split_k_axis(st) -> int:
    """The reduce axis to split over blocks: the longest."""
    return max(range(len(st.reduce)), key=lambda k: st.reduce[k][1])


def build_steps(an: DAGAnalysis, choice: dict, fused: dict) -> list:
    """The steps of one sketch: ``choice`` maps stages to rules, ``fused`` stages to their
    fused consumers."""
    steps: list = []
    taken = set(fused.values())
    cached = set()
    order = an.order()
    for name in reversed(order):
        st = an.stages[name]
        if st.inlined or name in taken:
            continue
        rule = choice.get(name, "simple")
        cons = fused.get(name)
        cons_axes = tuple(an.stages[cons].spatial[k][0]
                          for k in range(len(st.spatial))) if cons else ()
        spatial = tuple(a for a, _ in st.spatial)
        if rule in ("tile", "split_k"):
            shared = tuple(st.inputs)
            ndims = tuple(len(_shape_of(an, x)) for x in shared)
            cached |= {x for x in shared if x in an.stages and an.stages[x].inlined}
            split_k = _split_k_axis(st) if rule == "split_k" else None
            steps.append(TileStep(name, tuple(st.spatial), tuple(st.reduce),
                                  None if split_k is not None else cons,
                                  () if split_k is not None else cons_axes, shared, ndims,
                                  split_k, tuple(st.accesses)))
            if split_k is not None:
                r = st.reduce[split_k][0]
                if cons:
                    steps.append(SimpleStep(cons, cons_axes, st.space_size, attach=name,
                                            attach_loop=spatial[0]))
                else:
                    steps.append(SimpleStep(name, spatial, st.space_size,
                                            reduce_loop=split_outer(r)))
        elif rule == "cross_thread":
            steps.append(CrossThreadStep(name, spatial, tuple(st.reduce), cons, cons_axes))
        elif cons:
            steps.append(SimpleStep(cons, cons_axes, st.space_size, attach=name,
                                    attach_loop=spatial[0]))
        else:
            steps.append(SimpleStep(name, spatial, st.space_size,
                                    reduce_loop=st.reduce[0][0] if st.reduce else None))
    inlines = [InlineStep(n, "late_inline" if n in cached else "inline")
               for n in order if an.stages[n].inlined]
    return inlines + steps


def _shape_of(an: DAGAnalysis, name: str) -> tuple:
    if name in an.stages:
        return an.stages[name].shape
    return tuple(an.placeholders[name].shape)


def generate_sketches(an: DAGAnalysis) -> list:
    """All sketches of the task analysed in ``an`` (at most :data:`MAX_SKETCHES`)."""
    use_rfactor = rfactor_available()
    order = [n for n in an.order() if not an.stages[n].inlined]
    # fused consumers: each consumer fuses into at most one producer
    fused: dict = {}
    for name in order:
        st = an.stages[name]
        if not st.reduce:
            continue
        cons = an.fusible_consumer(name)
        if cons and cons not in fused.values() and not an.stages[cons].reduce:
            fused[name] = cons
    taken = set(fused.values())
    decide = [n for n in order if n not in taken]
    options = [stage_options(an, n, use_rfactor) for n in decide]
    sketches = []
    for combo in itertools.product(*options):
        choice = dict(zip(decide, combo))
        desc = ", ".join(f"{r}({n})" for n, r in choice.items() if r != "simple" or
                         an.stages[n].reduce) or "simple"
        sketches.append(Sketch(desc, build_steps(an, choice, fused)))
        if len(sketches) >= MAX_SKETCHES:
            break
    return sketches
