"""Random schedules for property tests: random but structured pass parameters (inlining,
multi-level tiling, thread bindings, vthreads, shared and local caches, compute_at points,
unrolling, vectorization) over small workloads with numpy references."""

from __future__ import annotations

import re

import numpy as np

from ptxforge import ops, te
from ptxforge.ir.te import ComputeOp
from ptxforge.ops import testing as ref

# workloads: (name, builder) where builder() -> (tensors, reference(np inputs) -> np output)


def w_conv2d():
    data = te.placeholder((1, 3, 6, 6), name="data")
    kernel = te.placeholder((4, 3, 3, 3), name="kernel")
    out = ops.nn.conv2d_nchw(data, kernel, 1, 1)
    return [data, kernel, out], lambda d, k: ref.conv2d_nchw_python(d, k, 1, 1)


def w_conv2d_relu():
    data = te.placeholder((1, 2, 5, 5), name="data")
    kernel = te.placeholder((3, 2, 3, 3), name="kernel")
    bias = te.placeholder((1, 3, 1, 1), name="bias")
    out = ops.nn.relu(ops.nn.conv2d_nchw(data, kernel, 2, 1) + bias)
    return [data, kernel, bias, out], lambda d, k, b: np.maximum(
        ref.conv2d_nchw_python(d, k, 2, 1) + b, 0)


def w_dense():
    a = te.placeholder((6, 10), name="A")
    w = te.placeholder((7, 10), name="W")
    out = ops.nn.dense(a, w)
    return [a, w, out], lambda x, y: ref.dense_python(x, y)


def w_pool():
    a = te.placeholder((1, 2, 7, 7), name="A")
    out = ops.nn.max_pool2d(a, (3, 3), (2, 2), (1, 1))
    return [a, out], lambda x: ref.pool2d_python(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1),
                                                 "max")


def w_avgpool():
    a = te.placeholder((1, 2, 6, 6), name="A")
    out = ops.nn.avg_pool2d(a, (2, 2), (2, 2), (0, 0))
    return [a, out], lambda x: ref.pool2d_python(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0),
                                                 "avg", count_include_pad=False)


def w_softmax():
    a = te.placeholder((3, 9), name="A")
    out = ops.nn.softmax(a)
    return [a, out], lambda x: ref.softmax_python(x)


def w_elemwise():
    a = te.placeholder((5, 7), name="A")
    b = te.placeholder((5, 7), name="B")
    c = te.placeholder((7,), name="C")
    t = te.compute((5, 7), lambda i, j: a[i, j] * b[i, j], name="mul")
    u = te.compute((5, 7), lambda i, j: t[i, j] + c[j], name="addc")
    out = te.compute((5, 7), lambda i, j: te.max(u[i, j], 0.0), name="relu")
    return [a, b, c, out], lambda x, y, z: np.maximum(x * y + z, 0)


WORKLOADS = {
    "conv2d": w_conv2d,
    "conv2d_relu": w_conv2d_relu,
    "dense": w_dense,
    "pool": w_pool,
    "avgpool": w_avgpool,
    "softmax": w_softmax,
    "elemwise": w_elemwise,
}


# more of the op library for the mutation fuzzer (WORKLOADS keeps the property test's seeds)


def w_depthwise():
    data = te.placeholder((1, 3, 6, 6), name="data")
    kernel = te.placeholder((3, 1, 3, 3), name="kernel")
    out = ops.nn.depthwise_conv2d_nchw(data, kernel, 1, 1)
    return [data, kernel, out], lambda d, k: ref.depthwise_conv2d_nchw_python(d, k, 1, 1)


def w_batch_matmul():
    x = te.placeholder((2, 5, 6), name="X")
    y = te.placeholder((2, 4, 6), name="Y")
    out = ops.nn.batch_matmul(x, y)
    return [x, y, out], lambda a, b: ref.batch_matmul_python(a, b)


def w_global_pool():
    a = te.placeholder((2, 3, 5, 5), name="A")
    out = ops.nn.global_pool2d(a, "avg")
    return [a, out], lambda x: ref.global_pool2d_python(x, "avg")


def w_row_sum():
    a = te.placeholder((6, 11), name="A")
    out = ops.sum(ops.exp(a), axis=1)
    return [a, out], lambda x: np.exp(x).sum(axis=1)


FUZZ_WORKLOADS = {
    **WORKLOADS,
    "depthwise": w_depthwise,
    "batch_matmul": w_batch_matmul,
    "global_pool": w_global_pool,
    "row_sum": w_row_sum,
}


def _pick(rng, xs):
    return xs[int(rng.integers(len(xs)))]


def _bind_injective(s, stage, rng):
    axes = list(stage.op.axis)
    if len(axes) > 1 and rng.random() < 0.3:
        perm = list(rng.permutation(len(axes)))
        axes = [axes[k] for k in perm]
        stage.reorder(*axes)
    f = stage.fuse(*axes)
    o, i = stage.split(f, factor=_pick(rng, [1, 2, 3, 4, 8, 16, 32]))
    stage.bind(o, te.thread_axis("blockIdx.x"))
    if rng.random() < 0.4:
        io, ii = stage.split(i, factor=_pick(rng, [1, 2, 4]))
        stage.bind(io, te.thread_axis("threadIdx.x"))
        if rng.random() < 0.5:
            stage.vectorize(ii)
        else:
            stage.unroll(ii)
    else:
        stage.bind(i, te.thread_axis("threadIdx.x"))


def _tile(s, stage, rng, spatial, reduce_, use_vthread):
    """Multi-level tiling: block, [vthread], thread, inner for spatial axes; outer, inner
    for reduce axes. Returns (thread loop, reduce outer loops, inner loops)."""
    levels = {"b": [], "v": [], "t": [], "i": []}
    for ax in spatial:
        fi = _pick(rng, [1, 1, 2])
        ft = _pick(rng, [1, 2, 3, 4])
        fv = _pick(rng, [1, 2]) if use_vthread else 1
        rest, inner = stage.split(ax, factor=fi)
        rest, thr = stage.split(rest, factor=ft)
        if use_vthread:
            rest, vt = stage.split(rest, factor=fv)
            levels["v"].append(vt)
        levels["b"].append(rest)
        levels["t"].append(thr)
        levels["i"].append(inner)
    r_outer, r_inner = [], []
    for ax in reduce_:
        o, i = stage.split(ax, factor=_pick(rng, [1, 2, 3, 4]))
        r_outer.append(o)
        r_inner.append(i)
    order = levels["b"] + levels["v"] + levels["t"] + r_outer + r_inner + levels["i"]
    stage.reorder(*order)
    b = stage.fuse(*levels["b"])
    stage.bind(b, te.thread_axis("blockIdx.x"))
    if use_vthread:
        v = stage.fuse(*levels["v"])
        stage.bind(v, te.thread_axis("vthread"))
    t = stage.fuse(*levels["t"])
    stage.bind(t, te.thread_axis("threadIdx.x"))
    if rng.random() < 0.3 and levels["i"]:
        stage.unroll(levels["i"][-1])
    return t, r_outer, levels


def random_schedule(tensors, rng, pipelines: bool = False):
    """A random valid-looking schedule of the computation of ``tensors[-1]``; the result
    may still be rejected by lowering (over a GPU limit), which callers count as invalid.

    ``pipelines`` also draws cp.async copies for the shared caches (some vectorized) and
    software pipelining of the loop they are loaded in (draws from ``rng`` only then, so
    the schedules drawn without it stay the same)."""
    out = tensors[-1]
    s = te.create_schedule(out.op)
    comp = [op for op in s.dag.ops if isinstance(op, ComputeOp)]
    handled = set()
    for op in comp:
        if op is out.op or op.reduce_axis:
            continue
        if rng.random() < 0.6:
            s[op].compute_inline()
            handled.add(id(op))
    for op in reversed(comp):
        if id(op) in handled:
            continue
        st = s[op]
        if op.reduce_axis:
            _schedule_reduction(s, op, rng, handled, out, pipelines)
        else:
            _bind_injective(s, st, rng)
        handled.add(id(op))
    return s


def _cross_thread(s, op, rng):
    """rfactor the last reduce axis and reduce it across threads (tree in shared memory)."""
    st = s[op]
    red = list(st.op.reduce_axis)
    ko, ki = st.split(red[-1], nparts=_pick(rng, [2, 3, 4, 8]))
    rf = s.rfactor(op.output(0), ko)
    st = s[op]
    tx = st.op.reduce_axis[0]
    st.bind(tx, te.thread_axis("threadIdx.x"))
    b = st.fuse(*st.op.axis)
    st.bind(b, te.thread_axis("blockIdx.x"))
    s[rf].compute_at(st, tx)


def _schedule_reduction(s, op, rng, handled, out, pipelines=False):
    if not pipelines and rng.random() < 0.2:
        _cross_thread(s, op, rng)
        return
    use_cw = rng.random() < 0.5
    use_vt = rng.random() < 0.4
    if use_cw:
        cl = s.cache_write(op.output(0), "local")
        stage = s[op]  # the copy stage
        thr, _, _ = _tile(s, stage, rng, list(stage.op.axis), [], use_vt)
        cst = s[cl]
        cst.compute_at(stage, thr)
        red = list(cst.op.reduce_axis)
        outer, inner = [], []
        for ax in red:
            o, i = cst.split(ax, factor=_pick(rng, [1, 2, 3]))
            outer.append(o)
            inner.append(i)
        cst.reorder(*(outer + inner + list(cst.op.axis)))
        reader, attach = cst, (outer[-1] if outer else None)
        nthreads = None
    else:
        stage = s[op]
        thr, r_outer, _ = _tile(s, stage, rng, list(stage.op.axis), list(stage.op.reduce_axis),
                                use_vt)
        reader, attach = stage, (r_outer[-1] if r_outer else None)
        nthreads = None
    # shared-memory caches of the inputs, fetched cooperatively
    cached_any = False
    if attach is not None and (pipelines or rng.random() < 0.5):
        for t in op.input_tensors:
            if pipelines or rng.random() < 0.6:
                cached = s.cache_read(t, "shared", [reader])
                cs = s[cached]
                cs.compute_at(reader, attach)
                f = cs.fuse(*cs.op.axis)
                nthreads = _threads_of(s, stage, op)
                vec = _pick(rng, [1, 2, 4]) if pipelines else 1
                if vec > 1:
                    f, v = cs.split(f, factor=vec)
                o, i = cs.split(f, factor=nthreads)
                cs.bind(i, te.thread_axis("threadIdx.x"))
                if vec > 1:
                    cs.vectorize(v)
                if pipelines and rng.random() < 0.8:
                    cs.async_copy()
                cached_any = True
    if pipelines and cached_any and rng.random() < 0.8:
        reader.pipeline(attach, stages=_pick(rng, [2, 3, 4]))
    if rng.random() < 0.3:
        stage.pragma(stage.leaf_iter_vars[0], "auto_unroll_max_step", _pick(rng, [4, 16, 64]))


def _threads_of(s, stage, op) -> int:
    from ptxforge.ir.traversal import block_paths

    paths = block_paths(s.module.main.body)
    for n in paths[stage.block]:
        if getattr(n, "thread", "") == "threadIdx.x":
            return n.extent
    return 1


# --- mutation: valid schedules changed at random, as a careless user or a buggy search would

_TAGS = ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y", "vthread")
_REF = re.compile(r"[A-Za-z_][\w]*(?:\.[\w]+)+")
MUTATIONS = ("retag", "duplicate_bind", "drop_bind", "split_factor", "move_compute_at",
             "bind_reduce", "bind_any", "swap_steps", "drop_step")


def loop_refs(steps: list, module) -> list:
    """Every ``stage.loop`` reference the steps name, plus every loop of the scheduled IR."""
    from ptxforge.ir.stmt import For
    from ptxforge.ir.traversal import block_paths

    refs = set()
    for step in steps:
        if not step.startswith(("cache_read", "cache_write", "compute_inline", "rfactor")):
            refs.update(_REF.findall(step))
    for name, path in block_paths(module.main.body).items():
        refs.update(f"{name}.{n.var.name}" for n in path if isinstance(n, For))
    return sorted(refs)


def reduce_refs(module) -> list:
    """Loops of reduction stages that feed a reduce index (``stage.loop``)."""
    from ptxforge.ir.expr import free_vars
    from ptxforge.ir.stmt import For
    from ptxforge.ir.traversal import block_paths

    out = []
    for name, path in block_paths(module.main.body).items():
        block = path[-1]
        rv: set = set()
        for iv, b in zip(block.iter_vars, block.bindings):
            if iv.kind == "R":
                free_vars(b, rv)
        out += [f"{name}.{n.var.name}" for n in path if isinstance(n, For) and n.var in rv]
    return sorted(out)


def mutate(steps: list, refs: list, reduce_loops: list, rng) -> tuple:
    """``(new steps, description)``: one or two random mutations of a valid pipeline."""
    steps = list(steps)
    done = []
    for _ in range(1 + int(rng.random() < 0.3)):
        kind = _pick(rng, MUTATIONS)
        binds = [k for k, s in enumerate(steps) if s.startswith("bind(")]
        splits = [k for k, s in enumerate(steps) if s.startswith("split(") and "factors" in s]
        cats = [k for k, s in enumerate(steps) if s.startswith("compute_at(")]
        if kind == "retag" and binds:
            k = _pick(rng, binds)
            steps[k] = re.sub(r'"[^"]+"\)$', f'"{_pick(rng, _TAGS)}")', steps[k])
        elif kind == "duplicate_bind" and binds:
            k = _pick(rng, binds)
            tag = re.search(r'"([^"]+)"\)$', steps[k]).group(1)
            stage = steps[k][5:].split(".")[0]
            mine = [r for r in refs if r.startswith(stage + ".")] or refs
            steps.insert(k + 1, f'bind({_pick(rng, mine)}, "{tag}")')
        elif kind == "drop_bind" and binds:
            del steps[_pick(rng, binds)]
        elif kind == "split_factor" and splits:
            k = _pick(rng, splits)
            steps[k] = re.sub(r"factors=\[\d+\]",
                              f"factors=[{_pick(rng, [1, 2, 3, 4, 5, 7, 8, 16, 32, 64])}]",
                              steps[k])
        elif kind == "move_compute_at" and cats:
            k = _pick(rng, cats)
            head, _, loop = steps[k][len("compute_at("):-1].partition(", ")
            stage = loop.split(".")[0]
            mine = [r for r in refs if r.startswith(stage + ".")] or refs
            steps[k] = f"compute_at({head}, {_pick(rng, mine)})"
        elif kind == "bind_reduce" and reduce_loops:
            steps.append(f'bind({_pick(rng, reduce_loops)}, "{_pick(rng, _TAGS)}")')
        elif kind == "bind_any" and refs:
            k = int(rng.integers(len(steps) + 1))
            steps.insert(k, f'bind({_pick(rng, refs)}, "{_pick(rng, _TAGS)}")')
        elif kind == "swap_steps" and len(steps) > 1:
            k = int(rng.integers(len(steps) - 1))
            steps[k], steps[k + 1] = steps[k + 1], steps[k]
        elif kind == "drop_step" and steps:
            del steps[int(rng.integers(len(steps)))]
        else:
            continue
        done.append(kind)
    return steps, "+".join(done) or "none"


def fuzz_one(name: str, rng) -> tuple:
    """Mutate a random valid schedule of workload ``name``, build it for the simulator and
    run it. Returns ``(outcome, detail)``: ``"built"`` (matches numpy), ``"rejected"`` (an
    :class:`IRError`, with its first line), ``"wrong"`` (built, but its output differs from
    numpy or the simulator faulted; the mutated pipeline)."""
    import ptxforge
    from ptxforge.backend_sim.errors import SimError
    from ptxforge.ir.expr import IRError
    from ptxforge.passes.pipeline import Pipeline

    tensors, reference = FUZZ_WORKLOADS[name]()
    s = random_schedule(tensors, rng)
    base = [p.text for p in s.pipeline.passes]
    steps, how = mutate(base, loop_refs(base, s.module), reduce_refs(s.module), rng)
    fresh = te.create_schedule(tensors[-1].op)
    text = ", ".join(steps)
    try:
        module = Pipeline.parse(text)(fresh.module)
        f = ptxforge.build(module, None, target="sim")
    except IRError as e:
        return "rejected", f"{how}: {str(e).splitlines()[0]}"
    data = np.random.default_rng(int(rng.integers(1 << 30)))
    by_tensor = {id(t): data.uniform(-1, 1, size=t.shape).astype("float32")
                 for t in tensors[:-1]}
    dev = ptxforge.sim()
    out_t = tensors[-1]
    out = ptxforge.nd.array(np.full(out_t.shape, np.nan, "float32"), dev)
    arrays = []
    for t in fresh.args:
        if t.op is out_t.op:
            arrays.append(out)
        else:
            arrays.append(ptxforge.nd.array(
                next(v for k, v in by_tensor.items() if _same(tensors, k, t)), dev))
    try:
        f(*arrays)
    except SimError as e:
        return "wrong", f"{how}: simulator: {e}; pipeline: {text}"
    want = reference(*[by_tensor[id(t)] for t in tensors[:-1]])
    got = out.numpy()
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        bad = int((~np.isclose(got, want, rtol=1e-4, atol=1e-5)).sum())
        return "wrong", f"{how}: {bad} of {got.size} elements differ; pipeline: {text}"
    return "built", how


def _same(tensors, key, t) -> bool:
    return any(id(x) == key and x.op is t.op for x in tensors)
