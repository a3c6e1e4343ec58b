"""The one recognizer of GEMM forms: :func:`gemm_form` reads a dense, matmul or
batch_matmul stage and :func:`conv_gemm_form` a conv2d NHWC stage (as its implicit GEMM)
into a :class:`GemmForm`. The rules under it (:func:`product_kind`, :func:`layout_ok`,
:func:`whole_tiles`) are shared with the graph's fusion pass, which decides on graph calls
before any te stage exists."""

from __future__ import annotations

from dataclasses import dataclass

from ....ir.dtype import nbytes
from ....ir.expr import Bin, Call, Cast, Reduce, TensorRead, Var, children, free_vars
from ....ir.intrin.kinds import MMA_SYNC, MMA_SYNC_TF32, WGMMA_FP8, TensorCoreKind
from ....ir.te import ComputeOp, PlaceholderOp
from ....target import Target, as_target
from ... import tag as _tag

MIN_TILE = 16
"""The smallest block tile's rows and columns."""


def product_kind(in_dtype: str, precision: str | None = None) -> TensorCoreKind | None:
    """The kind that multiplies ``in_dtype`` inputs: fp16/bf16 on mma.sync (or wgmma), fp8
    on wgmma only, float32 on TF32 only at ``precision="tf32"``; else None."""
    if in_dtype in MMA_SYNC.inputs:
        return MMA_SYNC
    if in_dtype in WGMMA_FP8.inputs:
        return WGMMA_FP8
    if in_dtype == "float32" and precision == "tf32":
        return MMA_SYNC_TF32
    return None


def layout_ok(kind: TensorCoreKind, transpose_a: bool, b_kn: bool) -> bool:
    """Whether ``kind`` takes the operands: A as ``[M, K]``, B as ``[N, K]`` or, where the
    kind allows it, ``[K, N]``."""
    return not transpose_a and (kind.b_kn or not b_kn)


def whole_tiles(kind: TensorCoreKind, M: int, N: int, K: int) -> bool:
    """Whether the smallest tile (16 x 16 x the mma's k) divides the product."""
    return M % MIN_TILE == 0 and N % MIN_TILE == 0 and K % kind.k == 0


GEMM_TAGS = ("dense", "matmul", "batch_matmul")
MIN_N = 16
"""The fewest output columns a (padded) product needs to run on the tensor cores."""


@dataclass(frozen=True)
class GemmForm:
    """A matrix-product stage the tensor cores can run (see :func:`gemm_form`)."""

    batch: int
    M: int
    N: int
    K: int
    in_dtype: str
    acc_dtype: str
    b_kn: bool
    tf32: bool
    batched: bool = False  # a batch_matmul stage (axes b, i, j)
    broadcast: bool = False  # a batch of more than one over an operand of batch 1
    unique_bytes: int = 0
    """The bytes of input read at least (0: the two operands); an implicit GEMM's are the
    conv's input and kernel, not the window matrix."""
    conv: bool = False
    """The implicit GEMM of a conv2d NHWC stage (:func:`conv_gemm_form`)."""

    @property
    def input_bytes(self) -> int:
        """What the estimates' DRAM floor reads (:attr:`unique_bytes`, else the operands)."""
        return self.unique_bytes or self.batch * (self.M + self.N) * self.K * self.elem_bytes

    @property
    def paddable(self) -> bool:
        """Whether ``implicit_gemm`` can pad the product (not across a broadcast batch)."""
        return not self.broadcast

    @property
    def fp8(self) -> bool:
        """Whether the inputs are 8-bit floats (which only wgmma multiplies)."""
        return self.in_dtype.startswith("float8")

    @property
    def mma_k(self) -> int:
        return 32 if self.fp8 else 8 if self.tf32 else 16

    @property
    def elem_bytes(self) -> int:
        return nbytes(self.in_dtype)


def _operand_read(x):
    """The tensor read of one factor: ``A[..]``, a cast of it or ``round_tf32`` of it."""
    while True:
        if isinstance(x, TensorRead):
            return x
        if isinstance(x, Cast):
            x = x.value
        elif isinstance(x, Call) and x.op == "round_tf32" and len(x.args) == 1:
            x = x.args[0]
        else:
            return None


def gemm_form(op: ComputeOp, target: Target | str | None = None,
              tags: tuple | None = GEMM_TAGS) -> GemmForm | None:
    """The :class:`GemmForm` of stage ``op`` when the tensor cores of ``target`` run it,
    else None. ``tags``: the operator tags taken (None: any stage whose body is a product,
    for the auto-scheduler's sketches)."""
    target = as_target(target)
    if not isinstance(op, ComputeOp) or len(op.reduce_axis) != 1:
        return None
    if tags is not None and op.tag not in tags:
        return None
    if len(op.axis) not in (2, 3) or not isinstance(op.body, Reduce):
        return None
    body = op.body
    if body.combiner != "sum" or body.where is not None:
        return None
    src = body.source
    if not isinstance(src, Bin) or src.op != "mul":
        return None
    ra, rb = _operand_read(src.a), _operand_read(src.b)
    if ra is None or rb is None or ra.tensor.dtype != rb.tensor.dtype:
        return None
    if ra.tensor is rb.tensor:
        return None  # x x^T: one tensor cannot be staged as both operands
    ab, acc = ra.tensor.dtype, op.dtype
    kind = product_kind(ab, (op.attrs or {}).get("precision"))
    if kind is None or acc != "float32":
        return None
    tf32 = kind is MMA_SYNC_TF32
    if kind is WGMMA_FP8:
        if not target.has_wgmma:
            return None
    elif not target.has_mma(f"m{kind.m}n8k{kind.k}", "tf32" if tf32 else ab):
        return None
    if not target.has_ldmatrix or target.sm < 80:
        return None
    k = op.reduce_axis[0].var
    axes = [a.var for a in op.axis]
    i, j = axes[-2], axes[-1]
    bvar = axes[0] if len(axes) == 3 else None

    def lead_ok(r) -> bool:  # the batch index: b, or 0 for a broadcast batch of one
        if bvar is None:
            return len(r.indices) == 2
        if len(r.indices) != 3:
            return False
        lead = r.indices[0]
        return lead is bvar or (r.tensor.shape[0] == 1 and not _has_var(lead))

    if not (lead_ok(ra) and lead_ok(rb)):
        return None
    if not (ra.indices[-2] is i and ra.indices[-1] is k):
        return None  # A read as [k, i] (transpose_a): no ldmatrix of that layout here
    if rb.indices[-2] is j and rb.indices[-1] is k:
        kn = False
    elif rb.indices[-2] is k and rb.indices[-1] is j:
        kn = True
    else:
        return None
    if not layout_ok(kind, False, kn):
        return None  # the TF32 fragment loads take B as [N, K]
    shape = [int(x) for x in op.shape]
    K = int(op.reduce_axis[0].extent)
    # a batch one operand broadcasts (read at 0 by it, b by the other) is no batch axis
    # of implicit_gemm: such a product is not padded
    bcast = bvar is not None and shape[0] > 1 and not (ra.indices[0] is bvar
                                                       and rb.indices[0] is bvar)
    form = GemmForm(shape[0] if bvar is not None else 1, shape[-2], shape[-1], K, ab, acc,
                    kn, tf32, bvar is not None, bcast)
    if bcast:
        if not whole_tiles(kind, form.M, form.N, K):
            return None  # not padded: the smallest tile (16x16) must divide it
    elif form.N < MIN_N or K < form.mma_k:
        return None  # a sliver of a product: padded mmas would mostly multiply zeros
    return form


def copies_from_memory(t) -> bool:
    """Whether the shared copy of operand ``t`` only moves input elements (a placeholder,
    or stages each reading one element of the next: a fused slice, reshape or transpose),
    so that it can be a ``cp.async``."""
    while isinstance(t.op, ComputeOp):
        op = t.op
        if op.reduce_axis or op.num_outputs != 1 or not isinstance(op.body, TensorRead):
            return False
        if op.body.tensor.dtype != t.dtype:
            return False
        t = op.body.tensor
    return isinstance(t.op, PlaceholderOp)


def _has_var(e) -> bool:
    if isinstance(e, Var):
        return True
    return any(_has_var(c) for c in children(e))


def _inputs(op: ComputeOp):
    """The tensors of the two factors (A, B) of product stage ``op``."""
    src = op.body.source
    return _operand_read(src.a).tensor, _operand_read(src.b).tensor


# -- convolutions as implicit GEMMs ----------------------------------------------------------


def conv_gemm_shape(op: ComputeOp) -> tuple[int, int, int, int]:
    """``(M, N, K, C_in)`` of a conv2d NHWC stage as a matrix product."""
    n, oh, ow, co = (int(x) for x in op.shape)
    kh, kw, ci = (int(a.extent) for a in op.reduce_axis)
    return n * oh * ow, co, kh * kw * ci, ci


def tensorcore_conv_unsupported(op: ComputeOp, target: Target | str | None = None
                                ) -> str | None:
    """Why conv stage ``op`` cannot run on tensor cores on ``target``, or None: a plain
    conv2d NHWC of fp16/bf16 (or TF32-declared float32) inputs summed in float32, sm_80+."""
    target = as_target(target)
    if op.tag != _tag.CONV2D_NHWC or len(op.reduce_axis) != 3 or len(op.shape) != 4:
        return f"stage {op.name} (tag {op.tag!r}) is not a conv2d NHWC"
    ins = op.input_tensors
    if len(ins) != 2 or ins[0].dtype != ins[1].dtype:
        return f"conv {op.name} does not read two inputs of one dtype"
    dt = ins[0].dtype
    if op.dtype != "float32":
        return f"conv {op.name} accumulates in {op.dtype}; the tensor-core path needs float32"
    if dt in ("float16", "bfloat16"):
        if not target.has_mma("m16n8k16", dt):
            return f"target {target.arch} has no mma.sync m16n8k16 for {dt} (needs sm_80+)"
        return None
    if dt == "float32":
        if (op.attrs or {}).get("precision") != "tf32":
            return (f"conv {op.name} is float32; tensor cores multiply float32 only in TF32, "
                    "which must be asked for (precision='tf32')")
        if not target.has_mma("m16n8k8", "tf32"):
            return f"target {target.arch} has no TF32 mma.sync (needs sm_80+)"
        return None
    return f"conv {op.name} has {dt} inputs; tensor cores take float16, bfloat16 or TF32"


def conv_gemm_form(op: ComputeOp) -> GemmForm:
    """The :class:`GemmForm` of conv stage ``op``'s implicit GEMM (pixels x output channels
    x ``KH*KW*C_in``, B the HWIO kernel as ``[K, N]``; DRAM floor: input and kernel)."""
    M, N, K, _ = conv_gemm_shape(op)
    data, kernel = op.input_tensors
    dt = data.dtype
    unique = sum(_numel(t.op.input_tensors[0] if _is_pad(t) else t) for t in (data, kernel))
    return GemmForm(1, M, N, K, dt, op.dtype, b_kn=True, tf32=dt == "float32",
                    unique_bytes=unique * nbytes(dt), conv=True)


def _is_pad(t) -> bool:
    return isinstance(t.op, ComputeOp) and not t.op.reduce_axis and len(t.op.input_tensors) == 1


def _numel(t) -> int:
    n = 1
    for x in t.shape:
        n *= int(x)
    return n


# -- epilogues -------------------------------------------------------------------------------


def epilogue_refusal(op: ComputeOp, epilogue: ComputeOp | None, remap: bool = True
                     ) -> str | None:
    """Why the template cannot fuse stage ``epilogue`` into product stage ``op``, or None
    where it can: none; an element-wise one (every read of the product at the epilogue's
    own index: bias, residual, activation, cast, scale); or, where ``remap`` (not for
    convolutions), one storing another layout (:func:`~..remap.epilogue_remap`)."""
    if epilogue is None or epilogue is op:
        return None
    from ..analysis import is_epilogue_of
    from ..remap import _stages_between, output_remap

    between = _stages_between(op, epilogue)
    if is_epilogue_of(epilogue, op, between):
        return None
    if remap and output_remap(epilogue, op, between) is not None:
        return None
    how = "" if remap else " (a convolution's epilogue stores no other layout)"
    return (f"stage {epilogue.name} is no element-wise epilogue of {op.name}: it reads "
            f"{op.name} elsewhere than at its own index, or reduces over it{how}")


def _is_cast_of(epilogue: ComputeOp, op: ComputeOp) -> bool:
    """Whether ``epilogue`` only casts ``op``'s output (``T_cast`` of a 16-bit output)."""
    body = epilogue.body
    if not isinstance(body, Cast) or not isinstance(body.value, TensorRead):
        return False
    r = body.value
    return r.tensor.op is op and all(x is a.var for x, a in zip(r.indices, epilogue.axis))


def accumulator_scale(op: ComputeOp, epilogue: ComputeOp | None):
    """The float32 scalar ``s`` where ``epilogue`` is ``op``'s output times ``s`` (maybe
    cast), ``s`` reading no axis (``scaled_mm``'s ``scale_a[0] * scale_b[0]``); else None."""
    if epilogue is None or epilogue.reduce_axis or epilogue.num_outputs != 1:
        return None
    body = epilogue.body
    if isinstance(body, Cast):
        body = body.value
    if not isinstance(body, Bin) or body.op != "mul":
        return None
    axes = [a.var for a in epilogue.axis]
    for x, s in ((body.a, body.b), (body.b, body.a)):
        if (isinstance(x, TensorRead) and x.tensor.op is op and len(x.indices) == len(axes)
                and all(i is v for i, v in zip(x.indices, axes)) and s.dtype == "float32"
                and not (free_vars(s) & set(axes)) and not _reads(s, op)):
            return s
    return None


def _reads(e, op) -> bool:
    if isinstance(e, TensorRead) and e.tensor.op is op:
        return True
    return any(_reads(c, op) for c in children(e))


def direct_store(op: ComputeOp, epilogue: ComputeOp | None, form: GemmForm) -> bool:
    """Whether ``op``'s accumulators reach the output through the kind's own store, not the
    C tile: no epilogue, only a cast, or for fp8 the per-tensor scales and the cast
    (:func:`accumulator_scale`; a 16-bit product's scale keeps the C tile)."""
    if epilogue is None or _is_cast_of(epilogue, op):
        return True
    return form.fp8 and accumulator_scale(op, epilogue) is not None
