"""``graph.build``: optimize a network, compile each distinct fused function, plan memory.

The result, a :class:`GraphLibrary`, runs with :class:`~ptxforge.graph.executor.GraphModule`
on the simulator or a GPU.

Schedules come from ``schedule_fn(fused_function) -> (Schedule, args) | None``, the hook a
tuner's ``ApplyHistoryBest`` plugs into: it gets a
:class:`~ptxforge.graph.fused.FusedFunction` (workload key, te tensor builder, name) and
returns a schedule with its argument tensors (inputs then output, in the function's
parameter order), or None when it has no record, in which case the default GPU schedule of
:func:`ptxforge.ops.schedules.default_schedule` is used and a warning names the function.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.stmt import Module
from ..ir.te import ComputeOp
from ..target import Target, TargetError, as_target
from .fused import FusedFunction, distinct_functions
from .ir import Constant, Graph, GraphError, bind_params
from .memory_plan import MemoryPlan, plan_memory
from .passes import GraphPassContext, optimization_pipeline
from .weight_prefetch import prefetched_params

ScheduleFn = Callable[[FusedFunction], "tuple | None"]


class NoTuningRecordWarning(UserWarning):
    """A fused function was compiled with the default schedule for want of a record."""


def optimize(net: Graph, params: dict | None = None, *, layout: str | None = None,
             winograd: bool = False, fuse: bool = True,
             ctx: GraphPassContext | None = None, precision: str | None = None,
             pad_channels: int | None = None,
             fused_attention: bool | None = None,
             keep_norms_float32: bool | None = None,
             keep_gathers_float32: bool | None = None) -> Graph:
    """Bind ``params`` and run the optimization pipeline (see
    :func:`~ptxforge.graph.passes.optimization_pipeline`); the result calls fused functions
    unless ``fuse`` is False. ``precision``, ``pad_channels``, ``fused_attention``,
    ``keep_norms_float32`` and ``keep_gathers_float32`` as :func:`build`."""
    from .opdefs.attention import FUSED_AUTO, FUSED_OPTION, FUSED_PRECISION_OPTION
    from .passes.to_mixed_precision import CONFIG_KEEP_GATHERS_FLOAT32, CONFIG_KEEP_NORMS_FLOAT32

    pipeline = optimization_pipeline(layout, winograd, fuse, precision, pad_channels)
    graph = bind_params(net, params)
    ctx = ctx if ctx is not None else GraphPassContext.current()
    # the graph pass config key ``fused_attention`` (the context's, else "auto", where the
    # call gives none) and the build's precision, for this run only
    before = ctx.config
    choice = (before.get(FUSED_OPTION, FUSED_AUTO) if fused_attention is None
              else bool(fused_attention))
    ctx.config = {**before, FUSED_OPTION: choice, FUSED_PRECISION_OPTION: precision}
    if keep_norms_float32 is not None:
        ctx.config[CONFIG_KEEP_NORMS_FLOAT32] = keep_norms_float32
    if keep_gathers_float32 is not None:
        ctx.config[CONFIG_KEEP_GATHERS_FLOAT32] = keep_gathers_float32
    try:
        return pipeline(graph, ctx)
    finally:
        ctx.config = before


def function_tensors(func) -> list:
    """The te tensors of a fused function, lowered from the graph once: those its workload
    key was hashed from (:attr:`FusedFunction.tensors`), which every schedule of it reuses
    (te tensors are immutable; a schedule copies what it changes). Other function-like
    objects are asked for fresh ones."""
    tensors = getattr(func, "tensors", None)
    return list(tensors) if tensors is not None else func.build_tensors()


def fused_rows_default(func: FusedFunction, target: Target | str | None = None):
    """``(Schedule, args)`` for a row-wise normalization (softmax, layer norm, RMS norm and
    what fused into them) as one kernel with a block per row and cross-thread reductions
    (the auto-scheduler's ``fused_rows`` sketch), with the threads of
    :func:`fused_rows_choice`; None when the function is not such a normalization.

    The operator library's default reduction schedule computes each row's statistics in
    one thread: BERT-base's layer norms took 77 us a call on an H100 that way, a
    block per row takes a few."""
    from ..autosched.search_task import SearchTask
    from ..ir.compute_dag import ComputeDAG

    task = SearchTask(compute_dag=ComputeDAG(function_tensors(func)),
                      workload_key=func.workload_key, desc=func.name)
    choice = fused_rows_choice(task, target)
    if choice is None:
        return None
    return schedule_rows_choice(choice), list(task.tensors)


@dataclass(frozen=True)
class RowsChoice:
    """The default's pick for a fused-rows task: its step, the elements a thread moves at
    once (``lanes``; 1: scalar), the threads a row and whether their loops unroll."""

    step: object
    lanes: int
    threads: int
    unroll: bool


def fused_rows_choice(task, target: Target | str | None = None) -> RowsChoice | None:
    """What :func:`fused_rows_default` takes for ``task`` (a ``SearchTask``): None when it
    is not a fused-rows task; else the ``fused_rows`` sketch's scalar schedule (one element
    a thread at a time, consecutive threads on consecutive elements) with the threads of
    :func:`~ptxforge.autosched.fused_rows.default_threads` (at most 8 elements a thread),
    unrolled. Few rows put one block on an SM: its threads are all the warps the SM has to
    hide the row's latency with, and a warp per row of 16-byte vectors
    (:func:`~ptxforge.ops.schedules.rows.schedule_rows`, the default before) leaves one."""
    from ..autosched.fused_rows import default_threads, fused_rows_step

    step = fused_rows_step(task)
    if step is None:
        return None
    return RowsChoice(step, 1, default_threads(step.cols), True)


def schedule_rows_choice(choice: RowsChoice):
    """The te schedule of ``choice``: 16-byte vectors (:func:`~ptxforge.ops.schedules.rows.
    schedule_rows`) where it has lanes, else the ``fused_rows`` sketch's schedule."""
    from ..autosched.fused_rows import schedule_fused_rows
    from ..ops.schedules.rows import schedule_rows

    if choice.lanes > 1:
        out, reductions, inlined = choice.step.tensors
        return schedule_rows(out, reductions, inlined, choice.threads, choice.lanes,
                             choice.unroll)
    return schedule_fused_rows(choice.step, choice.threads, choice.unroll)


def default_schedule_for(func: FusedFunction, target: Target | str | None = None):
    """The default GPU schedule of a fused function and its argument tensors: a row-wise
    normalization as one kernel with a block per row (:func:`fused_rows_default`), any
    other function as the operator library's default schedule."""
    try:
        rows = fused_rows_default(func, target)
    except Exception as e:  # noqa: BLE001 - the rule is an improvement, never a requirement
        warnings.warn(f"{func.name}: the fused-rows default failed ({type(e).__name__}: {e}); "
                      "using the operator library's default schedule", stacklevel=3)
        rows = None
    if rows is not None:
        return rows
    tensors = function_tensors(func)
    try:
        from ..ops.schedules import default_schedule

        return default_schedule([tensors[-1]]), tensors
    except Exception as e:  # noqa: BLE001 - any failure falls back to the plain schedule
        warnings.warn(f"{func.name}: the default schedule failed ({type(e).__name__}: {e}); "
                      "using one thread per output element", stacklevel=3)
        return simple_schedule(tensors[-1]), tensors


def simple_schedule(output, threads: int = 256):
    """A schedule that is valid for any DAG: injective stages inlined into their readers,
    every other stage one thread per output element (its loops fused, split over blocks
    and threads)."""
    from ..te import create_schedule, thread_axis

    s = create_schedule([output])
    ops = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    for op in reversed(ops):
        if op is not output.op and not op.reduce_axis:
            s[op].compute_inline()
    for op in reversed(ops):
        if op is not output.op and not op.reduce_axis:
            continue
        axes = list(s[op].op.axis)
        fused = s[op].fuse(*axes) if len(axes) > 1 else axes[0]
        extent = 1
        for a in op.axis:
            extent *= a.extent
        outer, inner = s[op].split(fused, factor=min(threads, extent))
        s[op].bind(outer, thread_axis("blockIdx.x"))
        s[op].bind(inner, thread_axis("threadIdx.x"))
    return s


@dataclass
class CompiledFunction:
    """A distinct fused function after compilation: its device IR, and for ``cuda`` its
    PTX module. ``tuned`` says whether the schedule came from ``schedule_fn``."""

    func: FusedFunction
    device_module: Module | None
    ptx: object | None = None
    tuned: bool = False
    pipeline_text: str = ""
    seconds: float = 0.0


@dataclass
class GraphLibrary:
    """A compiled network: run it with ``GraphModule(lib, device)``.

    Attributes:
        graph: the fused main graph.
        target: the :class:`~ptxforge.target.Target` it was built for (a cuda target: PTX
            compiled, runs on a GPU or the simulator; ``sim``: lowered only).
        functions: the compiled distinct functions, by workload key.
        call_keys: the workload key each step runs (None for reshape-only steps).
        plan: the memory plan.
        params: the weights (and folded constants), by parameter name.
    """

    graph: Graph
    target: Target
    functions: dict[str, CompiledFunction]
    call_keys: list[str | None]
    plan: MemoryPlan
    params: dict = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    def get_source(self, fmt: str = "ir") -> str:
        """Every function's device IR (``"ir"``) or PTX (``"ptx"``)."""
        parts = []
        for key, f in self.functions.items():
            if fmt == "ir":
                text = str(f.device_module)
            else:
                if f.ptx is None:
                    raise GraphError("this library was built for the simulator; build with "
                                     "target='cuda' for PTX")
                text = f.ptx.get_source(fmt)
            parts.append(f"// ==== {f.func.name} {key}\n{text}")
        return "\n".join(parts)

    def export_library(self, path, archs=None) -> str:
        """Write the network to ``path`` as one file of data (plan, device IR, kernels for
        each of ``archs``: default the cuda target's architecture, none for ``"sim"``;
        weights), loadable without the compiler by :func:`ptxforge.runtime.load_module`
        (or :func:`ptxforge.graph.load`); returns the path."""
        from ..runtime import export_network

        return export_network(self, path, archs)

    def summary(self) -> str:
        lines = [f"{len(self.functions)} compiled functions, {self.plan.summary()}"]
        for f in self.functions.values():
            how = "tuned" if f.tuned else "default schedule"
            lines.append(f"  {f.func.name:60s} x{f.func.count:<3d} {how}")
        return "\n".join(lines)


def _constant_names(graph: Graph) -> Callable[[Constant], str]:
    names: dict[int, str] = {}
    used: set[str] = {p.name for p in graph.params}

    def name_of(c: Constant) -> str:
        if id(c) not in names:
            base = c.name or "const"
            name, k = base, 1
            while name in used:
                name = f"{base}_{k}"
                k += 1
            used.add(name)
            names[id(c)] = name
        return names[id(c)]

    return name_of


def compile_function(func: FusedFunction, target: Target | str, schedule_fn: ScheduleFn | None,
                     constant_args: tuple[int, ...] = ()) -> CompiledFunction:
    """Schedule (``schedule_fn`` or the default), lower and, for a cuda target, compile;
    all with ``target`` current, so the default schedules and the limits are its.
    ``constant_args``: positions of the function's arguments that are the network's
    constants (weights) at every call; on sm_90 and later its kernels prefetch them into
    L2 before they wait for the kernel before them."""
    target = as_target(target)
    with target:
        return _compile_function(func, target, schedule_fn, tuple(constant_args))


def _attention_device(func: FusedFunction, target: Target, sch) -> tuple[Module, str] | None:
    """``(device module, pipeline text)`` of the fused attention kernel for ``func``: with
    ``sch`` (a schedule from ``schedule_fn``) when its pipeline holds a ``fused_attention``
    step, else, for a function that computes one ``nn.attention`` of its inputs, with the
    configuration :func:`~ptxforge.graph.opdefs.attention.fused_attention_module` takes
    (an AutoTVM record of ``attention.cuda``, or the default chooser's); None otherwise."""
    from ..ops.attention import TAG

    if sch is not None:
        from ..ops.schedules.attention.schedule_pass import (
            fused_attention_device_module,
            fused_attention_step,
        )

        pipeline = getattr(sch, "pipeline", None)
        step = fused_attention_step(pipeline) if pipeline is not None else None
        if step is None:
            return None
        return fused_attention_device_module(sch.module, step, target), pipeline.text
    if getattr(function_tensors(func)[-1].op, "tag", "") != TAG:
        return None  # cheap: most functions are no attention
    from .opdefs.attention import fused_attention_module

    mod = fused_attention_module(func, target)
    if mod is None:
        return None
    return mod, "fused_attention"


def _compile_function(func: FusedFunction, target: Target, schedule_fn: ScheduleFn | None,
                      constant_args: tuple[int, ...] = ()) -> CompiledFunction:
    from ..driver import lower

    t0 = time.perf_counter()
    chosen = schedule_fn(func) if schedule_fn is not None else None
    tuned = chosen is not None
    try:
        # an attention kept whole (graph pass config ``fused_attention``) runs as the fused
        # kernel: from a tuned ``fused_attention`` step, else its own default configuration
        fused = _attention_device(func, target, chosen[0] if tuned else None)
    except Exception as e:
        raise GraphError(f"{func.name}: the fused attention kernel cannot be built: "
                         f"{e}") from e
    if fused is not None:
        device_module, pipeline_text = fused
    else:
        if chosen is None:
            if schedule_fn is not None:
                warnings.warn(f"no tuning record for {func.name} (workload key "
                              f"{func.workload_key}); using the default schedule",
                              NoTuningRecordWarning, stacklevel=3)
            chosen = default_schedule_for(func, target)
        sch, args = chosen
        try:
            device_module = lower(sch, list(args))
        except Exception as e:
            if tuned:
                raise GraphError(f"{func.name}: the schedule from schedule_fn does not "
                                 f"lower: {e}") from e
            raise GraphError(f"{func.name}: the default schedule does not lower: {e}") from e
        pipeline_text = getattr(getattr(sch, "pipeline", None), "text", "")
    ptx = None
    if not target.is_sim:
        from ..backend_ptx import compile_module

        host = device_module.host
        names = tuple(host.params[j].name for j in constant_args
                      if host is not None and j < len(host.params))
        ptx = compile_module(device_module, target, constant_params=names)
    return CompiledFunction(func, device_module, ptx, tuned, pipeline_text,
                            time.perf_counter() - t0)


def build(net: Graph, target: Target | str = "cuda", params: dict | None = None,
          schedule_fn: ScheduleFn | None = None, *, layout: str | None = None,
          winograd: bool = False, ctx: GraphPassContext | None = None,
          precision: str | None = None, pad_channels: int | None = None,
          fused_attention: bool | None = None,
          keep_norms_float32: bool | None = None,
          keep_gathers_float32: bool | None = None) -> GraphLibrary:
    """Compile a network.

    Args:
        net: the network graph (weights as parameters or constants).
        target: a string or a :class:`~ptxforge.target.Target`: ``"cuda"`` (or
            ``"cuda -arch=sm_80"``) compiles PTX for that GPU (no GPU needed to build);
            ``"sim"`` only lowers, for the simulator. Both run on the simulator. The
            default schedules and the limits are the target's.
        params: weights by parameter name, bound as constants.
        schedule_fn: ``f(FusedFunction) -> (Schedule, args) | None`` (a tuner's
            history-best dispatch); functions it has no schedule for get the default one,
            with a :class:`NoTuningRecordWarning`. Default: that of the active
            ``autosched.ApplyHistoryBest`` context, if any.
        layout: ``"NHWC"`` converts NCHW convolutions and pools first; ``"NCHW"`` keeps
            them; None (default): ``"NHWC"`` for ``float16``, ``bfloat16`` and ``tf32``
            (the tensor cores run NHWC convolutions), else the network's own.
        winograd: compute eligible 3x3 convolutions with Winograd's algorithm.
        ctx: the graph pass context (printing, dumping, timing passes).
        precision: ``"float32"`` (default), ``"tf32"`` (float32 matrix products and
            convolutions with TF32 inputs, pass ``use_tf32``), ``"float16"`` or
            ``"bfloat16"`` (pass ``to_mixed_precision``: convolutions and matrix products
            in that dtype with float32 accumulation, softmax, norms and reductions in
            float32, weights converted here once; layer and RMS norms compute in float32
            from the data as it comes and store the 16-bit result, so a transformer's
            residual stream stays 16-bit: see ``keep_norms_float32``). Inputs and outputs
            keep their dtypes.
            The dtypes and the TF32 rounding are part of every workload key, so records of
            one precision never apply to another.
        pad_channels: the NHWC convolutions that run on tensor cores (16-bit inputs, or
            TF32) and read a number of channels that is not a multiple of this (a
            3-channel image) read their input padded with zero channels up to one, and
            their weights zero rows (graph pass ``pad_conv_channels``): the same result,
            with wide ``cp.async`` copies. None: 4 (8-byte copies of 16-bit inputs); 8:
            16-byte copies; 1: no padding. The padded convolutions have their own
            workload keys: tune with the same value (``extract_tasks(...,
            pad_channels=)``).
        fused_attention: True: run each ``nn.attention`` the fused tensor-core kernel can
            run (16-bit inputs, head dims multiples of 16, sm_80 or newer; see
            ``docs/attention.md``) as that one kernel, with the configuration of an AutoTVM
            record of ``attention.cuda``, an auto-scheduler record's ``fused_attention``
            step or the default chooser; the others are decomposed into batched products
            and a softmax. False: decompose every attention. None (default): the graph
            pass config ``{"fused_attention": ...}`` of ``ctx`` if it has one, else
            ``"auto"``: the fused kernel where an attention has at least 128 keys
            (``graph.opdefs.attention.AUTO_MIN_KEYS``; the kernel is twice as fast as
            the decomposed form at 128 keys, 19-39% faster from 512).
        keep_norms_float32: with a 16-bit ``precision``, True runs layer and RMS norms in
            float32 in and out (their readers, a residual add among them, then run in
            float32 too); False (the default) lets them store the 16-bit result (the
            residual stream 16-bit, as PyTorch's float16 model); None: the graph pass
            config ``{"to_mixed_precision.keep_norms_float32": ...}`` of ``ctx`` if it has
            one, else False. docs/precision.md compares the two.
        keep_gathers_float32: with a 16-bit ``precision``, True runs gathers of float32
            tables (embedding lookups: ``take``, ONNX ``Gather``) in float32, as operators
            without a 16-bit policy; False (the default) gathers a float32 constant table
            whose rows are read in 16 bits (by a product or a norm, through element-wise
            operators) from its 16-bit copy, which the other 16-bit readers of the same
            constant share (GPT-2's LM head), so the residual stream starts 16-bit; None:
            the config ``{"to_mixed_precision.keep_gathers_float32": ...}`` of ``ctx`` if it
            has one, else False. See docs/precision.md.
    """
    try:
        target = as_target(target)
    except TargetError as e:
        raise GraphError(str(e)) from None
    if schedule_fn is None:
        # inside ``with autosched.ApplyHistoryBest(log):`` the context supplies it
        from ..autosched.dispatch import current_schedule_fn

        schedule_fn = current_schedule_fn()
    fused = optimize(net, params, layout=layout, winograd=winograd, ctx=ctx,
                     precision=precision, pad_channels=pad_channels,
                     fused_attention=fused_attention, keep_norms_float32=keep_norms_float32,
                     keep_gathers_float32=keep_gathers_float32)
    consts = _constant_names(fused)
    plan = plan_memory(fused, consts)
    _, of_call = distinct_functions(fused, include_views=True)
    # the arguments that are weights at every call of a function: its kernels prefetch those
    # they read whole (weight_prefetch)
    constant_at: dict[str, set[int]] = {}
    for step in plan.steps:
        if not step.view:
            key = of_call[id(step.call)].workload_key
            here = {j for j, a in enumerate(step.call.args) if isinstance(a, Constant)}
            constant_at[key] = constant_at[key] & here if key in constant_at else here
    compiled: dict[str, CompiledFunction] = {}
    call_keys: list[str | None] = []
    for step in plan.steps:
        if step.view:
            call_keys.append(None)
            continue
        ff = of_call[id(step.call)]
        key = ff.workload_key
        if key not in compiled:
            # a gathered table (an embedding) is read a few rows at a time: no prefetch
            compiled[key] = compile_function(ff, target, schedule_fn,
                                             prefetched_params(ff.func, constant_at[key]))
        call_keys.append(key)
    weights = {}
    for n in fused.nodes():
        if isinstance(n, Constant):
            weights[consts(n)] = n.value
    return GraphLibrary(fused, target, compiled, call_keys, plan, weights)
