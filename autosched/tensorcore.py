"""The tensor-core sketch rules: matrix products and convolutions on sm_80+.

The sketches' steps share :class:`TensorCoreStep` (the product's extents and dtypes, the
slot names ``<stage>.tc.<knob>``) and run the tensor-core GEMM template
(:mod:`ptxforge.ops.schedules.gemm`) with the sampled knobs, so a state is recorded,
printed and replayed like any other.

A conv2d NHWC (not grouped or depthwise) of float16 / bfloat16 inputs summed in float32,
or of float32 inputs declared with ``precision="tf32"``, followed by element-wise stages
(bias, residual add, activation, cast), gets the sketch ``tensorcore_conv(conv)``: its
step, :class:`TensorCoreConvStep`, samples the same levels and runs the default
tensor-core conv schedule (:func:`~ptxforge.ops.schedules.gemm.schedule.
schedule_conv2d_nhwc_tensorcore`: the ``implicit_gemm`` pass gathers the windows of the
input into the A tile, ``M = N*OH*OW`` output pixels by ``K = KH*KW*C_in`` columns) with
the sampled configuration; M, N and K are padded to the block tile, so 49 output pixels or
3 input channels need no special case.

A product stage (dense, matmul, batch_matmul, or a user's stage of that form:
:func:`~ptxforge.ops.schedules.gemm.forms.gemm_form` with any tag; float16 / bfloat16, or
float32 declared with ``precision="tf32"``; any extents) gets ``tensorcore_gemm(C)``: its step,
:class:`TensorCoreGemmStep`, samples the same levels plus ``split_k`` (the reduction in
that many parts on ``blockIdx.z``, float32 partial sums that a second kernel adds up with
the epilogue: for products with few block tiles and a long reduction) and runs the default
tensor-core GEMM schedule with them (zero padding through ``implicit_gemm``, TF32 fragments
loaded with ldmatrix as the 16-bit ones). It took the place of the sketch
``tensorcore(C)`` (a second writer of the same kernels, for tiles that divide the
product): records of that sketch replay from their pipelines as ever, and their states
map onto ``tensorcore_gemm(C)`` (:func:`migrate_payload`).

On a target with wgmma (sm_90a), a dense / matmul / batch_matmul stage that wgmma runs
(fp16 / bf16, B read as ``[N, K]``, ``N >= 64``: :func:`~ptxforge.ops.schedules.
gemm.choice.wgmma_refusal`) also gets ``wgmma_gemm(C)``: its step,
:class:`WgmmaGemmStep`, samples ``block_n`` (64, 128, 256), ``warpgroups`` (1 or 2:
block tiles of 64 or 128 rows), ``stages``, ``in_flight`` (wgmma groups left running
across K steps), ``split_k`` and ``raster`` (the block order: groups of row blocks sharing
a B tile, offered where more than 128 rows make several row blocks), and runs the default
wgmma GEMM schedule
(:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_gemm_wgmma`) with them; it
competes with the mma.sync sketches, and :func:`wgmma_model` ranks its states with the
estimate the default chooser uses. A convolution that gets ``tensorcore_conv(C)`` in
16-bit inputs also gets ``wgmma_conv(C)`` there: :class:`WgmmaConvStep` samples the same
slots (the HWIO kernel, B read as ``[K, N]``, in 64-column panels of the shared tile) for
:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_conv2d_nhwc_wgmma`, split-K
included, ranked by the same estimate on the implicit GEMM.

Other shapes of computation, float32 products not declared TF32 (TF32 is never chosen
silently) or targets without mma.sync get no tensor-core sketch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ops.schedules.gemm.knobs import (
    MMA_SYNC_SPACE,
    TensorCoreConfig,
    mma_sync_choices,
    wgmma_choices,
)
from ..passes.schedule.names import slot_name
from .sketch import ChoiceSlot, Sketch

SPLIT_K_CHOICES = MMA_SYNC_SPACE.split_k  # the reduction over that many blocks (partial sums)


@dataclass(frozen=True)
class TensorCoreStep:
    """What the tensor-core steps share: the product ``stage`` (``batch`` products of
    ``M x N x K``) and its element-wise epilogue (ending in ``output``), their slots named
    ``<stage>.tc.<knob>``. ``b_kn``: B is read as ``[k, n]``. ``tensors``: the te tensors
    ``(C, output)``; ``inlined``: the epilogue stages to inline (neither is compared). The
    steps (:class:`TensorCoreGemmStep`, :class:`TensorCoreConvStep`) define the slots and
    the schedule."""

    stage: str
    output: str
    M: int
    N: int
    K: int
    in_dtype: str
    acc_dtype: str
    out_bytes: int
    b_kn: bool = False
    batch: int = 1                # products in the batch (batch_matmul), 1 for dense
    tensors: tuple = field(default=(), compare=False, hash=False)
    inlined: tuple = field(default=(), compare=False, hash=False)

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "tc", kind)

    def config(self, vals) -> TensorCoreParams:
        """The parameters of one state (``vals``: slot values by name)."""
        return TensorCoreParams(*(int(vals[self.slot(k)]) for k in (
            "block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "layout",
            "vec")))

@dataclass(frozen=True)
class TensorCoreParams:
    """One state of a :class:`TensorCoreStep`: the block tile, ``block_k``, the warp grid,
    the pipeline stages (1: no pipeline), the shared layout (``> 0``: rows padded by that
    many elements, ``0``: plain, ``< 0``: XOR swizzle of ``-layout`` bits) and the
    elements per cp.async."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    stages: int
    layout: int
    vec: int


def _padded_slots(step: TensorCoreStep, form, divide: bool = False) -> list:
    """The slots of a step whose product is padded to the block tile: the one knob space
    of ``form`` (:func:`~ptxforge.ops.schedules.gemm.knobs.mma_sync_choices`; ``divide``:
    tiles that divide the product, no split-K), the shared layout as elements of padding
    per row."""
    ch = mma_sync_choices(form, divide)
    eb = form.elem_bytes
    return ([ChoiceSlot(step.slot(k), ch[k]) for k in (
        "block_m", "block_n", "block_k", "warps_m", "warps_n", "stages")]
        + [ChoiceSlot(step.slot("layout"), tuple(b // eb for b in ch["pad_bytes"])),
           ChoiceSlot(step.slot("vec"), ch["vec"]),
           ChoiceSlot(step.slot("split_k"), ch["split_k"])])


def _padded_config(step: TensorCoreStep, vals, tf32: bool, **extra) -> TensorCoreConfig:
    """The :class:`TensorCoreConfig` of one state of such a step (fragments from ldmatrix,
    TF32's too; cp.async where a copy is 4, 8 or 16 bytes)."""
    p = step.config(vals)
    return TensorCoreConfig(p.block_m, p.block_n, p.block_k, p.warps_m, p.warps_n,
                            vec=p.vec, pad=p.layout, stages=p.stages,
                            async_copy=p.vec * step.elem_bytes in (4, 8, 16),
                            frag_load="ldmatrix", tf32=tf32, **extra)


@dataclass(frozen=True)
class TensorCoreConvStep(TensorCoreStep):
    """The conv2d NHWC ``stage`` (the product ``M x N x K`` of an implicit GEMM:
    ``M = N*OH*OW`` pixels, ``N`` output channels, ``K = KH*KW*C_in``) and its element-wise
    epilogue (ending in ``output``) on tensor cores. ``tf32``: float32 inputs multiplied in
    TF32 (the convolution asked for it). ``unique``: bytes the kernel must move at least
    (input, kernel, output). ``late``: the stages to inline after the schedule (the padding,
    which the A tile's copy computes); ``target``: the task's (not compared)."""

    C_in: int = 1
    tf32: bool = False
    unique: float = 0.0
    late: tuple = field(default=(), compare=False, hash=False)
    target: object = field(default=None, compare=False, hash=False)
    form: object = field(default=None, compare=False, hash=False)
    """The implicit GEMM's :class:`~ptxforge.ops.schedules.gemm.forms.GemmForm`."""

    @property
    def mma_k(self) -> int:
        return 8 if self.tf32 else 16

    @property
    def elem_bytes(self) -> int:
        return 4 if self.tf32 else 2

    def slots(self) -> list:
        from ..ops.schedules.gemm.forms import GemmForm

        return _padded_slots(self, GemmForm(1, self.M, self.N, self.K, self.in_dtype,
                                            "float32", self.b_kn, self.tf32, conv=True))

    def conv_config(self, vals) -> TensorCoreConfig:
        """The conv schedule's configuration of one state."""
        return _padded_config(self, vals, self.tf32, split_k=int(vals[self.slot("split_k")]))

    def emit(self, vals, out) -> None:
        s = schedule_tensorcore_conv(self, self.conv_config(vals), self.target)
        out["structure"].extend(s.pipeline)


def schedule_tensorcore_conv(step: TensorCoreConvStep, cfg: TensorCoreConfig,
                             target=None):
    """The te schedule of ``step``'s convolution with configuration ``cfg``: the default
    tensor-core conv schedule between the inlines of :func:`_schedule_product`."""
    from ..ops.schedules.gemm.schedule import schedule_conv2d_nhwc_tensorcore

    return _schedule_product(step, lambda s, c, epi: schedule_conv2d_nhwc_tensorcore(
        s, c.op, epi, target, cfg))


def _schedule_product(step: TensorCoreStep, schedule, consumers_first: bool = False):
    """A te schedule of a padded step's computation: the epilogue's element-wise producers
    inlined, ``schedule(s, product tensor, epilogue op or None)`` (a default tensor-core
    schedule with the state's configuration), then the stages the product reads (a
    convolution's padding) inlined into its copies. ``consumers_first``: each group
    inlined last stage first, as the operator library's default schedule inlines them, so
    that a state with the default's knobs prints the default's very pipeline text (the
    same kernel in either order)."""
    from .. import te

    def order(ts):
        return reversed(ts) if consumers_first else ts

    c, out = step.tensors
    s = te.create_schedule(out.op)
    for t in order(step.inlined):
        s[t].compute_inline()
    schedule(s, c, None if out is c else out.op)
    for t in order(step.late):
        s[t].compute_inline()
    return s


@dataclass(frozen=True)
class TensorCoreGemmStep(TensorCoreStep):
    """A dense / matmul / batch_matmul ``stage`` and its element-wise epilogue, on the
    default tensor-core GEMM schedule with the sampled configuration
    (:func:`~ptxforge.ops.schedules.gemm.schedule.schedule_gemm_tensorcore`: padding
    through ``implicit_gemm``, lane-by-lane TF32 fragments, split-K). ``form``: the
    product's :class:`~ptxforge.ops.schedules.gemm.forms.GemmForm`."""

    form: object = field(default=None, compare=False, hash=False)
    late: tuple = field(default=(), compare=False, hash=False)
    target: object = field(default=None, compare=False, hash=False)
    remapped: bool = field(default=False, compare=False, hash=False)
    """The output stores the product in another layout (no split-K there)."""

    @property
    def mma_k(self) -> int:
        return self.form.mma_k

    @property
    def elem_bytes(self) -> int:
        return self.form.elem_bytes

    def slots(self) -> list:
        # no split-K over a broadcast batch (implicit_gemm cannot pad it) nor into an
        # epilogue that stores the product in another layout, which also needs tiles that
        # divide the product
        return _padded_slots(self, self.form, self.remapped)

    def gemm_config(self, vals) -> TensorCoreConfig:
        """The GEMM schedule's configuration of one state."""
        return _padded_config(self, vals, self.form.tf32,
                              split_k=int(vals[self.slot("split_k")]))

    def emit(self, vals, out) -> None:
        s = schedule_tensorcore_gemm(self, self.gemm_config(vals), self.target)
        out["structure"].extend(s.pipeline)


def schedule_tensorcore_gemm(step: TensorCoreGemmStep, cfg: TensorCoreConfig, target=None):
    """The te schedule of ``step``'s product with configuration ``cfg``: the default
    tensor-core GEMM schedule between the inlines of :func:`_schedule_product`."""
    from ..ops.schedules.gemm.schedule import schedule_gemm_tensorcore

    return _schedule_product(step, lambda s, c, epi: schedule_gemm_tensorcore(
        s, c.op, epi, cfg, target, step.form))




WGMMA_SLOTS = ("block_n", "warpgroups", "stages", "in_flight", "split_k", "raster")
"""The knobs of :class:`~ptxforge.ops.schedules.gemm.knobs.WgmmaScheduleConfig` the wgmma
steps sample, each a slot of that name. ``raster`` (the block order) came last: records
written before it have no value for it and built the plain order
(:data:`ADDED_SLOTS`)."""


@dataclass(frozen=True)
class WgmmaGemmStep(TensorCoreStep):
    """A dense / matmul / batch_matmul ``stage`` and its element-wise epilogue on the
    default wgmma GEMM schedule (sm_90a) with the sampled ``block_n``, ``warpgroups``,
    ``stages``, ``in_flight``, ``split_k`` and ``raster`` (:data:`WGMMA_SLOTS`; the block
    order has the one choice 1 up to 128 rows and on a convolution). ``form``: the product's
    :class:`~ptxforge.ops.schedules.gemm.forms.GemmForm`; ``remapped``: the output
    stores the product in another layout (tiles that divide it, no split-K)."""

    form: object = field(default=None, compare=False, hash=False)
    late: tuple = field(default=(), compare=False, hash=False)
    target: object = field(default=None, compare=False, hash=False)
    remapped: bool = field(default=False, compare=False, hash=False)
    epilogue_tile: bool = field(default=True, compare=False, hash=False)
    """The epilogue does more than cast (the accumulators go through the shared C tile)."""

    def slot(self, kind: str) -> str:
        return slot_name(self.stage, "wg", kind)

    def slots(self) -> list:
        ch = wgmma_choices(self.form, self.remapped)  # the one knob space of the form
        return [ChoiceSlot(self.slot(k), ch[k]) for k in WGMMA_SLOTS]

    def wgmma_config(self, vals):
        """The wgmma schedule's configuration of one state (the C tile as the epilogue or
        padding needs it, never a persistent grid)."""
        from ..ops.schedules.gemm.knobs import WgmmaScheduleConfig

        return WgmmaScheduleConfig(**{k: int(vals[self.slot(k)]) for k in WGMMA_SLOTS})

    def schedule(self, cfg):
        """The te schedule of this step's product with wgmma configuration ``cfg``."""
        return schedule_wgmma_gemm(self, cfg, self.target)

    def emit(self, vals, out) -> None:
        out["structure"].extend(self.schedule(self.wgmma_config(vals)).pipeline)


def schedule_wgmma_gemm(step: WgmmaGemmStep, cfg, target=None):
    """The te schedule of ``step``'s product with wgmma configuration ``cfg``: the default
    wgmma GEMM schedule between the inlines of :func:`_schedule_product`, in the default's
    order (:func:`wgmma_default_state`)."""
    from ..ops.schedules.gemm.schedule import schedule_gemm_wgmma

    return _schedule_product(step, lambda s, c, epi: schedule_gemm_wgmma(
        s, c.op, epi, cfg, target, step.form), consumers_first=True)


def wgmma_gemm_step(task) -> WgmmaGemmStep | None:
    """The wgmma GEMM step for ``task``, or None: a target with wgmma and a task
    :func:`tensorcore_gemm_step` takes whose product wgmma runs
    (:func:`~ptxforge.ops.schedules.gemm.choice.wgmma_refusal`), with at least one
    configuration that schedules."""
    from ..ir.dtype import nbytes
    from ..ops.schedules.gemm.choice import wgmma_refusal
    from ..ops.schedules.gemm.chooser import choose_wgmma_config
    from ..ops.schedules.gemm.forms import direct_store, gemm_form

    if not task.target.has_wgmma:
        return None
    prod = _single_product(task)
    if prod is None:
        return None
    op, out, stage, output, inlined, late = prod
    form = gemm_form(op, task.target, tags=None)
    if form is None or wgmma_refusal(form, task.target) is not None:
        return None
    remapped = _remapped(op, out)
    epi_tile = out.op is not op and not (not inlined and direct_store(op, out.op, form))
    step = WgmmaGemmStep(stage, output, form.M, form.N, form.K, form.in_dtype,
                         form.acc_dtype, nbytes(out.dtype), b_kn=form.b_kn, batch=form.batch,
                         tensors=(op.output(0), out), inlined=inlined, form=form, late=late,
                         target=task.target, remapped=remapped, epilogue_tile=epi_tile)
    cfg = choose_wgmma_config(form, task.target, epi_tile, remap=remapped)
    if cfg is None or not all(sl.choices for sl in step.slots()):
        return None
    return step


def wgmma_default_state(task, k: int):
    """The state of ``task``'s wgmma GEMM sketch (index ``k``) whose schedule is the
    task's default, or None where the default is not one of the sketch's states.

    The configuration is the one ``graph.build``'s default takes for the product
    (``schedule_matmul``: :func:`~ptxforge.ops.schedules.gemm.chooser.wgmma_choice` over
    :func:`~ptxforge.ops.schedules.gemm.forms.gemm_form`, the measured rules included),
    under the task's target as the sketch schedules it. It is a state where it runs wgmma
    (not mma.sync), every knob is among the slots' choices (not the 192-wide tiles of the
    mid-size rule), it is not persistent, and its ``staged_epilogue`` changes nothing
    (the sketch never asks for the C tile: where nothing else needs it, the default's
    staged store is another kernel). The sketch and the default schedule the product
    through different callers (which stages they inline and in what order, what they
    take the epilogue to be), so the state's pipeline text is compared with the
    default's as well: a state that scheduled another kernel would take the default's
    place as a candidate, and the best record could then be slower than the build
    without records (:mod:`~ptxforge.autosched.default_candidate`)."""
    from dataclasses import replace

    from ..ops.schedules.gemm.chooser import wgmma_choice
    from ..ops.schedules.gemm.forms import gemm_form
    from ..ops.schedules.gemm.rules import needs_c_tile
    from .default_candidate import NoDefaultSchedule, task_default_schedule
    from .state import State

    sk = task.sketches[k]
    step = sk.steps[0]
    c, out = step.tensors
    epilogue = None if out is c else out.op
    target = task.target
    with target:
        form = gemm_form(c.op, target)
        cfg = wgmma_choice(c.op, epilogue, form, target) if form is not None else None
    if cfg is None or cfg.persistent:
        return None
    plain = replace(cfg, staged_epilogue=False)
    if cfg.staged_epilogue and not needs_c_tile(plain, form, step.epilogue_tile):
        return None
    try:
        state = State(k, sk.row_of({step.slot(x): getattr(plain, x) for x in WGMMA_SLOTS}))
    except ValueError:
        return None  # a knob the slots do not offer
    try:
        want = task_default_schedule(task, target)[0].pipeline.text
    except NoDefaultSchedule:
        return None
    return state if state.pipeline_text(task) == want else None


@dataclass(frozen=True)
class WgmmaConvStep(WgmmaGemmStep):
    """A conv2d NHWC ``stage`` and its element-wise epilogue on the wgmma conv schedule
    (sm_90a): the implicit GEMM ``[pixels, KH*KW*C_in] x [KH*KW*C_in, C_out]`` whose B (the
    HWIO kernel) is read MN-major in 64-column panels; it samples ``block_n``,
    ``warpgroups``, ``stages``, ``in_flight`` and ``split_k`` (float32 partial sums on
    blockIdx.z, summed by a second kernel with the epilogue) as the wgmma GEMM step does
    (its ``raster`` slot has the one choice 1: the output has no row blocks to group).
    ``form``: the implicit GEMM's
    :func:`~ptxforge.ops.schedules.gemm.forms.conv_gemm_form` (for the model)."""

    def schedule(self, cfg):
        return schedule_wgmma_conv(self, cfg, self.target)


def schedule_wgmma_conv(step: WgmmaConvStep, cfg, target=None):
    """The te schedule of ``step``'s convolution with wgmma configuration ``cfg``: the
    wgmma conv schedule between the inlines of :func:`_schedule_product`."""
    from ..ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma

    return _schedule_product(step, lambda s, c, epi: schedule_conv2d_nhwc_wgmma(
        s, c.op, epi, target, cfg))


def wgmma_conv_step(task) -> WgmmaConvStep | None:
    """The wgmma conv step for ``task``, or None: a target with wgmma and a task
    :func:`tensorcore_conv_step` takes, in 16-bit inputs, for whose implicit GEMM some
    wgmma tiles fit (:func:`~ptxforge.ops.schedules.gemm.chooser.wgmma_conv_config`)."""
    from ..ir.dtype import nbytes
    from ..ops.schedules.gemm.choice import wgmma_dtype_refusal
    from ..ops.schedules.gemm.chooser import wgmma_conv_config
    from ..ops.schedules.gemm.forms import conv_gemm_form

    if not task.target.has_wgmma:
        return None
    prod = _single_product(task, remap=False)
    if prod is None:
        return None
    conv_op, out, stage, output, inlined, late = prod
    in_dt = conv_op.input_tensors[0].dtype
    if wgmma_dtype_refusal(in_dt, "float32", task.target) is not None:
        return None
    if wgmma_conv_config(conv_op, task.target) is None:
        return None
    form = conv_gemm_form(conv_op)
    M, N, K = form.M, form.N, form.K
    step = WgmmaConvStep(stage, output, M, N, K, in_dt, "float32", nbytes(out.dtype),
                         b_kn=True, batch=1, tensors=(conv_op.output(0), out),
                         inlined=inlined, form=form, late=late, target=task.target,
                         epilogue_tile=True)
    return step


def tensorcore_gemm_step(task) -> TensorCoreGemmStep | None:
    """The tensor-core GEMM step for ``task``, or None when the rule does not apply: one
    output computed from a single product that the tensor-core GEMM template runs on the
    task's target (:func:`~ptxforge.ops.schedules.gemm.forms.gemm_form`, a stage of any
    tag: fp16 / bf16, or float32 declared TF32, accumulated in float32; padded when no
    tile divides it) by element-wise stages only."""
    from ..ir.dtype import nbytes
    from ..ops.schedules.gemm.forms import gemm_form

    prod = _single_product(task)
    if prod is None:
        return None
    op, out, stage, output, inlined, late = prod
    form = gemm_form(op, task.target, tags=None)
    if form is None:
        return None
    step = TensorCoreGemmStep(stage, output, form.M, form.N, form.K, form.in_dtype,
                              form.acc_dtype, nbytes(out.dtype), b_kn=form.b_kn,
                              batch=form.batch, tensors=(op.output(0), out),
                              inlined=inlined, form=form, late=late, target=task.target,
                              remapped=_remapped(op, out))
    return step


def _single_product(task, remap: bool = True):
    """``(product op, output tensor, product stage name, output stage name, epilogue
    stages to inline, stages the product reads)`` of a task with one output computed from
    one reduction by an epilogue the GEMM template takes
    (:func:`~ptxforge.ops.schedules.gemm.forms.epilogue_refusal`: element-wise stages, if
    any, or, where ``remap``, an output storing the product in another layout), else
    None."""
    from ..ops.schedules.gemm.forms import epilogue_refusal

    an = task.analysis
    outs = list(task.ir_dag.outputs)
    reds = [n for n, st in an.stages.items() if st.reduce]
    if len(outs) != 1 or len(reds) != 1:
        return None
    op, out = an.stages[reds[0]].op, outs[0]
    if epilogue_refusal(op, out.op, remap) is not None:
        return None
    late = tuple(t for t in op.input_tensors
                 if any(t.op is st.op for st in an.stages.values()))
    inlined = tuple(st.op.output(0) for st in an.stages.values()
                    if st.op is not op and st.op is not out.op
                    and not any(st.op is t.op for t in late))
    names = {id(st.op): n for n, st in an.stages.items()}
    return op, out, names[id(op)], names[id(out.op)], inlined, late


def _remapped(op, out) -> bool:
    """Whether output ``out`` stores product stage ``op`` in another layout (tiles that
    divide the product, no split-K)."""
    from ..ops.schedules.remap import epilogue_remap

    return out.op is not op and epilogue_remap(op, out.op) is not None


def tensorcore_conv_step(task) -> TensorCoreConvStep | None:
    """The tensor-core conv step for ``task``, or None when the rule does not apply: one
    output computed from a single conv2d NHWC stage that can run on tensor cores on the
    task's target (:func:`~ptxforge.ops.schedules.gemm.forms.
    tensorcore_conv_unsupported`) by element-wise stages only, its inputs read directly or
    through a padding stage."""
    from ..ir.dtype import nbytes
    from ..ops.schedules.gemm.forms import (
        conv_gemm_form,
        conv_gemm_shape,
        tensorcore_conv_unsupported,
    )

    prod = _single_product(task, remap=False)
    if prod is None:
        return None
    conv_op, out, stage, output, inlined, late = prod
    if tensorcore_conv_unsupported(conv_op, task.target) is not None:
        return None
    M, N, K, C_in = conv_gemm_shape(conv_op)
    in_dt = conv_op.input_tensors[0].dtype
    tf32 = in_dt == "float32"
    step = TensorCoreConvStep(stage, output, M, N, K, in_dt, "float32", nbytes(out.dtype),
                              b_kn=not tf32, batch=1, tensors=(conv_op.output(0), out),
                              inlined=inlined, C_in=C_in, tf32=tf32,
                              unique=task.analysis.io_bytes(out), late=late,
                              target=task.target, form=conv_gemm_form(conv_op))
    return step


def tensorcore_sketches(task) -> list:
    """The tensor-core sketches of ``task`` (empty when the rule does not apply): the
    GEMM sketch (split-K among its slots) and, on sm_90a, the wgmma GEMM sketch where
    each applies, in that order, else the conv sketch and, on sm_90a, the wgmma conv
    sketch."""
    out = []
    gemm = tensorcore_gemm_step(task)
    if gemm is not None:
        out.append(Sketch(f"tensorcore_gemm({gemm.stage})", [gemm]))
        wg = wgmma_gemm_step(task)
        if wg is not None:
            out.append(Sketch(f"wgmma_gemm({wg.stage})", [wg]))
    if out:
        return out
    conv = tensorcore_conv_step(task)
    if conv is not None:
        out.append(Sketch(f"tensorcore_conv({conv.stage})", [conv]))
        wg = wgmma_conv_step(task)
        if wg is not None:
            out.append(Sketch(f"wgmma_conv({wg.stage})", [wg]))
    return out


def bank_conflict(row_bytes) -> np.ndarray:
    """The ways an ldmatrix phase (8 rows of 16 bytes at a stride of ``row_bytes``) is
    serialized over the 32 four-byte banks: 1 when the rows fall on distinct 16-byte bank
    groups, 8 when they all hit the same one."""
    rb = np.asarray(row_bytes, dtype=np.int64)
    distinct = np.minimum(8, 128 // np.gcd(rb, 128))
    return 8 // np.maximum(distinct, 1)


def tensorcore_model(step: TensorCoreStep, V, hw, n: int) -> dict:
    """Validity, resource use and the analytical time of mma.sync tensor-core states
    (vectorized): the rules of the GEMM template (:func:`~ptxforge.ops.schedules.gemm.
    rules.gemm_rules`, a convolution's :func:`~ptxforge.ops.schedules.gemm.rules.
    conv_rules`) over the population, no more accumulators per thread than the search
    allows (``hw.max_accumulators_per_thread``: a register budget, not a rule), and the
    default chooser's estimate (:func:`~ptxforge.ops.schedules.gemm.estimate.
    gemm_estimate`), in the statistics' names the features read."""
    from types import SimpleNamespace

    from ..ops.schedules.gemm.estimate import gemm_estimate
    from ..ops.schedules.gemm.rules import (
        conv_rules,
        conv_shared_bytes,
        gemm_rules,
        holds,
        shared_bytes,
    )
    from .kernel_model import _occupancy

    if isinstance(step, WgmmaGemmStep):
        return wgmma_model(step, V, hw, n)
    k = SimpleNamespace(**{x: V[step.slot(x)] for x in (
        "block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "vec", "split_k")},
        pad=V[step.slot("layout")], tf32=step.form.tf32, async_copy=False,
        frag_load="ldmatrix")
    bm, bn, bk, split = k.block_m, k.block_n, k.block_k, k.split_k
    f = step.form
    conv = isinstance(step, TensorCoreConvStep)
    if conv:
        valid = holds(conv_rules(k, f.M, f.N, f.K, f.tf32, step.target), n)
        shared = conv_shared_bytes(k, f.elem_bytes)
    else:
        valid = holds(gemm_rules(k, f, step.target), n)
        shared = shared_bytes(bm, bn, bk, k.stages, k.pad, f)
    M, N = ((-(-x // b) * b for x, b in ((f.M, bm), (f.N, bn))) if f.paddable
            else (f.M, f.N))
    K = -(-f.K // (bk * split)) * bk if f.paddable else f.K  # per split-K part
    warps = k.warps_m * k.warps_n
    wm, wn = bm // k.warps_m, bn // k.warps_n
    accum = (wm * wn) // 32               # fp32 accumulators per lane
    valid &= accum <= hw.max_accumulators_per_thread
    blocks = f.batch * split * (M // np.maximum(bm, 1)) * (N // np.maximum(bn, 1))
    regs = 32 + accum + (wm // 16) * 4 + (wn // 8) * 2
    occ = _occupancy(warps * 32, regs, shared, blocks, hw)
    mmas_per_warp_k = (wm // 16) * (wn // 8) * (16 // f.mma_k)   # per k step of 16
    bytes_per_mma = ((wm // 16) * 512 + (wn // 8) * 256) / np.maximum(mmas_per_warp_k, 1)
    conflict = bank_conflict((bk + k.pad) * f.elem_bytes)
    unique = step.unique if conv else (f.input_bytes + f.batch * f.M * f.N * step.out_bytes)
    est = gemm_estimate(bm, bn, bk, k.warps_m, k.warps_n, k.stages, split, k.pad, f,
                        step.target)
    flop = 2.0 * f.batch * f.M * f.N * f.K
    return {"valid": valid, "blocks": blocks, "threads": warps * 32, "accum": accum,
            "shared_bytes": shared, "global_bytes": blocks * (bm + bn) * K * f.elem_bytes,
            "unique_bytes": np.full(n, float(unique)), "conflict": conflict,
            "regs": regs, "r0": K // np.maximum(bk, 1), "est": est,
            "tc_mma_k": np.full(n, f.mma_k), "tc_warps": warps, "tc_stages": k.stages,
            "tc_bytes_per_mma": bytes_per_mma, "tc_flop": np.full(n, flop), **occ}


def wgmma_model(step: WgmmaGemmStep, V, hw, n: int) -> dict:
    """Validity, resource use and the analytical time of wgmma GEMM states (vectorized):
    the rules of :func:`~ptxforge.ops.schedules.gemm.rules.wgmma_rules` (with the C tile
    where the epilogue, padding or split-K needs it; tiles that divide the product where
    the output stores another layout) and the estimate of
    :func:`~ptxforge.ops.schedules.gemm.estimate.wgmma_estimate`, in the statistics' names
    the features read (a warpgroup is 4 warps; wgmma reads its tiles from shared memory
    itself: no fragment loads, no bank conflicts). The block order (``raster``) enters
    through the rules (it must divide the row blocks) and the estimate (a B larger than
    the L2 read once per group of row blocks): the features have no column of their own
    for it, so saved cost models keep their width."""
    from types import SimpleNamespace

    from ..ir.intrin.wgmma import WARPGROUP
    from ..ops.schedules.gemm.estimate import wgmma_estimate
    from ..ops.schedules.gemm.rules import block_k, holds, wgmma_rules, wgmma_shared_bytes
    from .kernel_model import _occupancy

    f = step.form
    k = SimpleNamespace(**{x: V[step.slot(x)] for x in WGMMA_SLOTS})
    bn, wgs, split = k.block_n, k.warpgroups, k.split_k
    k.block_m = bm = 64 * wgs
    bk = block_k(f)
    pad = f.paddable and not step.remapped
    Mp = -(-f.M // bm) * bm if pad else np.full(n, f.M)
    Np = -(-f.N // bn) * bn if pad else np.full(n, f.N)
    Kp = -(-f.K // (bk * split)) * bk * split
    c_tile = step.epilogue_tile | (split > 1) | (Mp != f.M) | (Np != f.N) | (Kp != f.K)
    valid = holds(wgmma_rules(k, f, step.target, c_tile), n)
    if step.remapped:  # the epilogue runs over the product's own loops: whole tiles
        valid &= (f.M % bm == 0) & (f.N % bn == 0) & (f.K % bk == 0)
    shared = wgmma_shared_bytes(k, c_tile)
    threads = WARPGROUP * wgs
    blocks = f.batch * split * (Mp // bm) * (Np // bn)
    accum = bn // 2
    regs = np.minimum(255, 48 + accum)
    occ = _occupancy(threads, regs, shared, blocks, hw)
    est = wgmma_estimate(bn, wgs, k.stages, split, f, step.target, c_tile,
                         in_flight=k.in_flight, raster=k.raster)
    flop = 2.0 * f.batch * f.M * f.N * f.K
    unique = f.input_bytes + f.batch * f.M * f.N * step.out_bytes
    return {"valid": valid, "blocks": blocks, "threads": threads,
            "accum": np.broadcast_to(accum, (n,)), "shared_bytes": shared,
            "global_bytes": blocks * (bm + bn) * Kp // split * f.elem_bytes,
            "unique_bytes": np.full(n, float(unique)), "conflict": np.ones(n),
            "regs": regs, "r0": Kp // (bk * split), "est": est,
            "tc_mma_k": np.full(n, f.mma_k), "tc_warps": 4 * wgs, "tc_stages": k.stages,
            "tc_bytes_per_mma": np.zeros(n), "tc_flop": np.full(n, flop), "split_k": split,
            **occ}


RETIRED_SKETCHES = {"tensorcore": "tensorcore_gemm"}
"""Sketches this version no longer makes, by the sketch whose states take their records'
values: ``tensorcore(C)`` (tiles dividing the product, no split-K) wrote the kernels of
``tensorcore_gemm(C)``'s states of the same slot values and ``split_k`` 1."""


ADDED_SLOTS = {"wgmma_gemm": {"raster": 1}, "wgmma_conv": {"raster": 1}}
"""Slots added to a sketch after records of it were written, by sketch kind, with the value
those records built: the wgmma steps' block order (``raster``) ran the plain order, 1."""


def complete_payload(name: str, state: dict) -> dict:
    """The slot values ``state`` of a record of sketch ``name`` with the slots added since
    (:data:`ADDED_SLOTS`) filled in where it has none, so a record written before a slot
    existed maps to the state of the kernel it built; ``state`` unchanged for other
    sketches (or when it is not a dict: :func:`~ptxforge.autosched.state.
    state_from_payload` refuses it)."""
    kind, _, rest = name.partition("(")
    added = ADDED_SLOTS.get(kind)
    if not added or not rest.endswith(")") or not isinstance(state, dict):
        return state
    stage = rest[:-1]
    return {**{slot_name(stage, "wg", k): v for k, v in added.items()}, **state}


def migrate_payload(name: str, state: dict) -> tuple[str, dict] | None:
    """``(sketch name, slot values)`` that a record of retired sketch ``name`` maps to
    (:data:`RETIRED_SKETCHES`), or None when ``name`` is not a retired sketch. A record of
    ``tensorcore(C)`` becomes a state of ``tensorcore_gemm(C)``: the same block tile,
    ``block_k``, warp grid, stages, shared layout and copy width (its slots have the same
    names) and ``split_k`` 1. Only the state is mapped (to train the cost model and to
    resume a search); the record's kernel is replayed from its stored pipeline, unchanged
    (the dispatch contexts apply ``pipeline_text``, not the state)."""
    kind, _, rest = name.partition("(")
    new = RETIRED_SKETCHES.get(kind)
    if new is None or not rest.endswith(")") or not isinstance(state, dict):
        return None
    stage = rest[:-1]
    return f"{new}({stage})", {**state, slot_name(stage, "tc", "split_k"): 1}
