"""The IR's text form: printing, parsing, and the print -> parse -> print fixed point."""

from __future__ import annotations

import math

import pytest
from ptxforge.ir import dtype as dt
from ptxforge.ir.attrs import FuncAttrs, Level
from ptxforge.ir.expr import (
    BIN_OPS,
    Bin,
    Call,
    Cast,
    Cmp,
    FloatImm,
    IRError,
    Load,
    Not,
    Select,
    Var,
    call,
    const,
    expr_key,
    logical_and,
    select,
)
from ptxforge.ir.exprprint import expr_str
from ptxforge.ir.parser import (
    IRParseError,
    parse_expr,
    parse_func,
    parse_module,
    parse_stmt,
    roundtrip_check,
)
from ptxforge.ir.printer import print_func, print_module, print_stmt
from ptxforge.ir.stmt import (
    Alloc,
    Barrier,
    Block,
    BlockVar,
    Buffer,
    For,
    If,
    Launch,
    Let,
    Module,
    PrimFunc,
    Seq,
    Store,
    shared_memory,
    walk,
)

# ---------------------------------------------------------------------------------------
# hand-built IR at the three levels


def nest(loop_vars, extents, body, kinds=None):
    for k in reversed(range(len(loop_vars))):
        kind = kinds[k] if kinds else "serial"
        body = For(loop_vars[k], extents[k], body, kind)
    return body


def tensor_ir() -> Module:
    """A padded 3x3 conv, as to_ir makes it: a pad stage and a reduction stage."""
    data = Buffer("data", "float32", [1, 4, 5, 5])
    kernel = Buffer("kernel", "float32", [4, 4, 3, 3])
    out = Buffer("compute", "float32", [1, 4, 5, 5])
    pad = Buffer("pad_temp", "float32", [1, 4, 7, 7])
    loops = [Var(f"i{k}") for k in range(4)]
    bv = [Var(f"v{k}") for k in range(4)]
    v0, v1, v2, v3 = bv
    inside = logical_and(logical_and(v2 >= 1, v2 < 6), logical_and(v3 >= 1, v3 < 6))
    pad_body = Store(pad, bv, select(inside, data[v0, v1, v2 - 1, v3 - 1], 0.0))
    pad_block = Block("pad_temp", [BlockVar(v, e, "S") for v, e in zip(bv, pad.shape)],
                      loops, pad_body)
    names = ("nn", "ff", "yy", "xx", "rc", "ry", "rx")
    extents = (1, 4, 5, 5, 4, 3, 3)
    lv = [Var(n) for n in names]
    cv = [Var(n) for n in names]
    n, f, y, x, rc, ry, rx = cv
    update = Store(out, [n, f, y, x],
                   out[n, f, y, x] + pad[n, rc, y + ry, x + rx] * kernel[f, rc, ry, rx])
    conv = Block("compute", [BlockVar(v, e, "S" if k < 4 else "R")
                             for k, (v, e) in enumerate(zip(cv, extents))],
                 lv, update, init=Store(out, [n, f, y, x], const(0.0)))
    body = Alloc(pad, Seq([nest(loops, pad.shape, pad_block), nest(lv, extents, conv)]))
    return Module([PrimFunc("main", [data, kernel, out], body)])


def scheduled_ir() -> Module:
    """Every loop kind, cache buffers with padded strides, predicates, if/else, let."""
    A = Buffer("A", "float32", [64])
    B = Buffer("B", "float32", [60])
    As = Buffer("A.shared", "float32", [4, 16], "shared", strides=[17, 1])
    Bl = Buffer("B.local", "float32", [2], "local")
    bx, vx, tx, ty, i, j, u, vec = (Var(n) for n in (
        "ff.outer.outer", "vx", "threadIdx.x", "threadIdx.y", "i", "j", "u", "vec"))
    vb = Var("v")
    load = Store(As, [i, j], A[i * 16 + j])
    load_loops = For(i, 4, For(j, 16, load, "vectorize"), "unroll",
                     annotations={"pragma_auto_unroll_max_step": 512, "pragma_unroll_explicit": 0})
    scale = Var("scale", "float32")
    pos = bx * 32 + vx * 16 + tx * 2 + u
    block = Block("B", [BlockVar(vb, 60, "S")], [pos],
                  Let(scale, As[0, vec] * 2.0, Store(Bl, [vec], B[vb] * scale + As[1, vec])),
                  predicate=pos < 60, annotations={"meta": {"tile": (2, 16), "tag": "x"}})
    guarded = If(tx < 7, Seq([Barrier(), For(vec, 2, block)]),
                 Store(Bl, [const(0)], call("exp", Bl[1])))
    body = For(bx, 2, For(vx, 2, For(tx, 8, For(ty, 1, For(u, 2, guarded, "unroll"), "thread",
                                                 "threadIdx.y"),
                                     "thread", "threadIdx.x"), "vthread", "vthread"),
               "thread", "blockIdx.x")
    body = Alloc(As, Alloc(Bl, Seq([load_loops, body])))
    return Module([PrimFunc("main", [A, B], body,
                             FuncAttrs(storage_align={"A.shared": [(0, 16, 1)]}))])


def device_ir() -> Module:
    """Two kernels and the host function that launches them."""
    A = Buffer("A", "float32", [16, 16])
    C = Buffer("C", "float32", [16, 16])
    T = Buffer("T", "float32", [16, 16])
    a, t = Buffer("A", "float32", [256]), Buffer("T", "float32", [256])
    bx, tx = Var("blockIdx.x"), Var("threadIdx.x")
    copy = PrimFunc("main_kernel0", [a, t],
                    For(bx, 2, For(tx, 128, Store(t, [bx * 128 + tx], a[bx * 128 + tx]),
                                   "thread", "threadIdx.x"), "thread", "blockIdx.x"),
                    FuncAttrs.kernel((2, 1, 1), (128, 1, 1)))
    t2, c = Buffer("T", "float32", [256]), Buffer("C", "float32", [256])
    bx2, tx2, k = Var("blockIdx.x"), Var("threadIdx.x"), Var("k")
    acc = Buffer("acc", "float32", [1], "local")
    sh = Buffer("T.shared", "float32", [16], "shared")
    body = Alloc(acc, Alloc(sh, Seq([
        Store(sh, [tx2], t2[bx2 * 16 + tx2]),
        Barrier(),
        Store(acc, [const(0)], const(0.0)),
        For(k, 16, Store(acc, [const(0)], acc[0] + sh[k]), "unroll"),
        Store(c, [bx2 * 16 + tx2], acc[0]),
    ])))
    reduce_k = PrimFunc("main_kernel1", [t2, c],
                        For(bx2, 16, For(tx2, 16, body, "thread", "threadIdx.x"),
                            "thread", "blockIdx.x"),
                        FuncAttrs.kernel((16, 1, 1), (16, 1, 1), stages=("C",),
                                         min_blocks_per_sm=2))
    host = PrimFunc("main", [A, C],
                    Alloc(T, Seq([Launch("main_kernel0", [A, T]),
                                  Launch("main_kernel1", [T, C])])),
                    FuncAttrs.host())
    return Module([host, copy, reduce_k], {"target": "sm_90"})


LEVELS = {"tensor": tensor_ir, "scheduled": scheduled_ir, "device": device_ir}


# ---------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("level", list(LEVELS))
def test_roundtrip_is_a_fixed_point(level):
    module = LEVELS[level]()
    parsed = roundtrip_check(module)
    assert isinstance(parsed, Module)
    assert list(parsed.functions) == list(module.functions)
    # the parse rebuilds the same tree: same node types in the same order
    for name, f in module.functions.items():
        g = parsed[name]
        assert [type(s) for s in walk(f.body)] == [type(s) for s in walk(g.body)]
        assert g.attrs == f.attrs


def test_tensor_ir_text_reads_like_nested_loops():
    text = print_module(tensor_ir())
    lines = text.splitlines()
    assert lines[0] == ('@main(data: float32[1, 4, 5, 5], kernel: float32[4, 4, 3, 3], '
                        'compute: float32[1, 4, 5, 5]) attrs {"kind": "prim"} {')
    assert lines[1] == "  alloc pad_temp: float32[1, 4, 7, 7] global {"
    assert lines[2] == "    for i0 in 1 {"
    assert ("block pad_temp(v0: S[1] = i0, v1: S[4] = i1, v2: S[7] = i2, v3: S[7] = i3) {"
            in text)
    assert "data[v0, v1, (v2 - 1), (v3 - 1)], 0f32)" in text
    # block iteration vars of the second stage share hints with its loops: made unique
    assert "block compute(nn_1: S[1] = nn, ff_1: S[4] = ff" in text
    assert "rc_1: R[4] = rc" in text
    init = lines.index("                    init {")
    assert lines[init + 1].strip() == "compute[nn_1, ff_1, yy_1, xx_1] = 0f32"


def test_scheduled_ir_text_shows_kinds_tags_and_annotations():
    text = print_module(scheduled_ir())
    assert "for ff.outer.outer in 2 thread(blockIdx.x) {" in text
    assert "for vx in 2 vthread(vthread) {" in text
    assert "for threadIdx.x in 8 thread(threadIdx.x) {" in text
    assert "for u in 2 unroll {" in text
    assert "for j in 16 vectorize {" in text
    assert ('for i in 4 unroll attrs {"pragma_auto_unroll_max_step": 512, '
            '"pragma_unroll_explicit": 0} {') in text
    assert "alloc A.shared: float32[4, 16] shared strides[17, 1] {" in text
    assert "alloc B.local: float32[2] local {" in text
    assert 'attrs {"meta": {"tile": [2, 16], "tag": "x"}} {' in text
    assert "let scale: float32 = (A.shared[0, vec] * 2f32) {" in text
    assert "} else {" in text and "barrier" in text
    assert "where (((((ff.outer.outer * 32) + (vx * 16)) + (threadIdx.x * 2)) + u) < 60)" in text


def test_device_ir_text_and_launch_config():
    module = device_ir()
    text = print_module(module)
    assert text.startswith('module attrs {"target": "sm_90"}\n\n@main(A: float32[16, 16], ')
    assert "    launch main_kernel0(A, T)" in text
    assert '"grid": [2, 1, 1], "block": [128, 1, 1]' in text
    parsed = parse_module(text)
    assert parsed.attrs == {"target": "sm_90"}
    assert parsed["main_kernel0"].launch.grid == (2, 1, 1)  # lists come back as tuples
    assert parsed["main_kernel1"].launch.min_blocks_per_sm == 2
    assert parsed["main"].level is Level.HOST
    launches = [s for s in walk(parsed["main"].body) if isinstance(s, Launch)]
    assert [s.kernel for s in launches] == ["main_kernel0", "main_kernel1"]
    host_params = parsed["main"].params
    alloc = parsed["main"].body
    assert launches[0].args == (host_params[0], alloc.buffer)


def test_parsed_names_are_the_defining_objects():
    f = parse_module(print_module(tensor_ir())).main
    pad_alloc = f.body
    pad_loop = pad_alloc.body.stmts[0]
    loops = []
    s = pad_loop
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    block = s
    assert all(b is loop.var for b, loop in zip(block.bindings, loops))
    store = block.body
    assert store.buffer is pad_alloc.buffer
    assert all(i is iv.var for i, iv in zip(store.indices, block.iter_vars))
    load = store.value.t
    assert isinstance(load, Load) and load.buffer is f.params[0]
    conv = [x for x in walk(f.body) if isinstance(x, Block)][1]
    assert conv.init is not None and conv.init.buffer is f.params[2]
    assert [iv.kind for iv in conv.iter_vars] == ["S"] * 4 + ["R"] * 3


def test_every_for_kind_roundtrips():
    kinds = [("serial", ""), ("unroll", ""), ("vectorize", ""), ("vthread", "vthread")]
    kinds += [("thread", t) for t in ("blockIdx.x", "blockIdx.y", "blockIdx.z",
                                      "threadIdx.x", "threadIdx.y", "threadIdx.z")]
    buf = Buffer("out", "int32", [4])
    for kind, tag in kinds:
        v = Var("x")
        loop = For(v, 4, Store(buf, [v], v), kind, tag, {"k": [1, 2.5, None, True, "s"]})
        f = parse_func(print_func(PrimFunc("f", [buf], loop)))
        assert (f.body.kind, f.body.thread) == (kind, tag)
        assert f.body.annotations == {"k": (1, 2.5, None, True, "s")}
        assert f.body.body.value is f.body.var
        roundtrip_check(f)


def test_non_int32_vars_carry_their_dtype():
    buf = Buffer("o", "float32", [8])
    i = Var("i", "int64")
    bv = Var("b", "int64")
    x = Var("x", "float32")
    blk = Block("o", [BlockVar(bv, 8, "S")], [i],
                Let(x, Cast("float32", bv), Store(buf, [Cast("int32", bv)], x)))
    f = PrimFunc("f", [buf], For(i, 8, blk))
    text = print_func(f)
    assert "for i: int64 in 8 {" in text
    assert "block o(b: int64 S[8] = i) {" in text
    assert "let x: float32 = float32(b) {" in text
    g = roundtrip_check(f)
    loop = g.body
    assert loop.var.dtype == "int64"
    assert loop.body.iter_vars[0].var.dtype == "int64"
    assert loop.body.body.var.dtype == "float32"


def test_empty_regions_and_optional_parts_roundtrip():
    buf = Buffer("o", "float32", [1])
    v, b = Var("v"), Var("b")
    stmts = Seq([
        For(v, 3, Seq([])),
        If(const(True), Seq([]), Seq([])),
        If(const(False), Store(buf, [const(0)], const(1.0))),
        Block("empty", [BlockVar(b, 1, "S")], [const(0)], Seq([]), init=Seq([])),
        Block("noinit", [], [], Store(buf, [const(0)], const(2.0))),
    ])
    f = roundtrip_check(PrimFunc("f", [buf], stmts))
    parts = f.body.stmts
    assert isinstance(parts[0].body, Seq) and parts[0].body.stmts == ()
    assert parts[1].else_ is not None and parts[2].else_ is None
    assert parts[3].init is not None and parts[4].init is None
    roundtrip_check(PrimFunc("nothing", [], Seq([])))
    assert print_module(parse_module("")) == ""


def test_zero_dim_buffers_and_strides_roundtrip():
    s = Buffer("s", "float64", [])
    p = Buffer("p", "int8", [3, 3], strides=[4, 1])
    f = PrimFunc("f", [s, p], Store(p, [const(1), const(2)], Cast("int8", s[()])))
    text = print_func(f)
    assert "s: float64[], p: int8[3, 3] strides[4, 1]" in text
    assert "p[1, 2] = int8(s[])" in text
    g = roundtrip_check(f)
    assert g.params[1].strides == (4, 1) and g.params[0].shape == ()


def test_deeply_nested_expression_roundtrips():
    out = Buffer("o", "float32", [1])
    x = Var("x", "float32")
    e = x
    for k in range(300):
        e = e * 1.5 + float(k)
    f = PrimFunc("f", [out], Let(x, const(1.0), Store(out, [const(0)], e)))
    roundtrip_check(f)


# ---------------------------------------------------------------------------------------
# expressions


def _expr_cases():
    a, b = Var("a"), Var("b")
    f, g = Var("f", "float32"), Var("g", "float32")
    h = Var("h", "float16")
    q = Var("q", "int64")
    buf = Buffer("buf", "float32", [4, 4])
    env = {"a": a, "b": b, "f": f, "g": g, "h": h, "q": q, "buf": buf}
    cases = [Bin(op, a, b) for op in BIN_OPS if op not in ("and", "or")]
    cases += [Bin("div", f, g), Bin("and", a < b, a > b), Bin("or", a <= b, a >= b)]
    cases += [Cmp(op, f, g) for op in ("eq", "ne", "lt", "le", "gt", "ge")]
    cases += [Not(a < b), Not(Not(const(True))), Select(a < b, f, g), Cast("float16", f),
              Cast("bool", a), Cast("int64", a)]
    cases += [Call(op, (f,), "float32") for op in ("exp", "log", "sqrt", "rsqrt", "tanh",
                                                    "sigmoid", "erf", "fabs", "abs", "floor",
                                                    "ceil", "round", "sin", "cos")]
    cases += [Call("pow", (f, g), "float32"), Call("fma", (f, g, f), "float32"),
              Call("exp", (h,), "float32"), Bin("add", a, b, "int64")]
    cases += [buf[a, b + 1], buf[0, 0] * f, (a - (-5)) * (q - q).astype("int32")]
    cases += [Bin("sub", const(0), a), -f, Bin("mul", const(-3, "int64"), q)]
    return cases, env


def test_every_expression_node_parses_back_exactly():
    cases, env = _expr_cases()
    def name_of(o):
        return o.name

    for e in cases:
        text = expr_str(e, name_of=name_of, style="ir")
        back = parse_expr(text, env)
        assert expr_key(back) == expr_key(e), text
        assert back.dtype == e.dtype, text
        assert expr_str(back, name_of=name_of, style="ir") == text


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8",
                                   "uint16", "uint32", "uint64", "float16", "bfloat16",
                                   "float32", "float64"])
def test_constants_of_every_dtype_roundtrip(dtype):
    if dtype == "bool":
        values = [True, False]
    elif dt.is_float(dtype):
        values = [0.0, -0.0, 1.0, -2.5, 0.1, 1e-05, 3.4e38, 1e16, float("inf"),
                  float("-inf"), float("nan")]
    else:
        values = [0, 7, 100] + ([] if dt.is_uint(dtype) else [-1, -128])
    for v in values:
        c = const(v, dtype)
        text = expr_str(c, style="ir")
        back = parse_expr(text)
        assert back.dtype == dtype and type(back) is type(c), text
        if isinstance(c, FloatImm) and math.isnan(c.value):
            assert math.isnan(back.value)
        else:
            assert back.value == c.value, text
            assert math.copysign(1, back.value) == math.copysign(1, c.value), text


def test_explicit_result_dtypes_only_change_ir_style():
    a, b = Var("a"), Var("b")
    h = Var("h", "float16")
    assert expr_str(Bin("add", a, b, "int64"), style="ir") == "add(a, b, dtype=int64)"
    assert expr_str(Bin("add", a, b, "int64"), style="te") == "(a + b)"
    assert expr_str(Call("exp", (h,), "float32"), style="ir") == "exp(h, dtype=float32)"
    assert expr_str(Call("exp", (h,), "float32"), style="te") == "tir.exp(h)"
    # the te style stays TVM's ComputeDAG text
    f = Var("f", "float32")
    assert expr_str(select(a < b, f * f, 0.0)) == "tir.if_then_else((a < b), (f*f), 0f)"


# ---------------------------------------------------------------------------------------
# naming


def test_names_are_unique_and_deterministic():
    buf = Buffer("i", "float32", [4, 4])  # a buffer shares the namespace with vars
    i1, i2, i3 = Var("i"), Var("i"), Var("i_1")
    body = Seq([For(i1, 4, For(i2, 4, Store(buf, [i1, i2], const(0.0)))),
                For(i3, 4, Store(buf, [i3, i3], const(1.0)))])
    f = PrimFunc("f", [buf], body)
    text = print_func(f)
    assert text == print_func(f)
    assert "@f(i: float32[4, 4])" in text
    assert "for i_1 in 4 {" in text and "for i_2 in 4 {" in text
    assert "i[i_1, i_2] = 0f32" in text
    assert "for i_1_1 in 4 {" in text
    g = roundtrip_check(f)
    loops = [s for s in walk(g.body) if isinstance(s, For)]
    assert len({id(loop.var) for loop in loops}) == 3


def test_illegal_and_reserved_hints_are_renamed():
    buf = Buffer("out buf", "int32", [6])
    hints = ["for", "inff32", "True", "0abc", "a-b", "ff.outer.inner"]
    vs = [Var(h) for h in hints]
    body = Store(buf, [vs[0]], vs[0] + vs[1] + vs[2] + vs[3] + vs[4] + vs[5])
    for v in vs:
        body = For(v, 1, body)
    f = PrimFunc("my func", [buf], body)
    text = print_func(f)
    assert text.startswith('@"my func"(out_buf: int32[6])')
    for name in ("for_1", "inff32_1", "True_1", "_0abc", "a_b", "ff.outer.inner"):
        assert f"for {name} in 1" in text
    g = roundtrip_check(f)
    assert g.name == "my func"


def test_block_and_kernel_labels_that_are_not_names_are_quoted():
    buf = Buffer("o", "float32", [1])
    f = PrimFunc("f", [buf], Block("my block", [], [], Store(buf, [const(0)], const(0.0))))
    host = PrimFunc("h", [buf], Launch("odd kernel", [buf]), FuncAttrs.host())
    text = print_module(Module([f, host]))
    assert 'block "my block"() {' in text and 'launch "odd kernel"(o)' in text
    m = roundtrip_check(Module([f, host]))
    assert m["f"].body.name == "my block"


def test_print_stmt_and_repr():
    buf = Buffer("o", "float32", [2])
    v = Var("v")
    loop = For(v, 2, Store(buf, [v], const(1.0)), "unroll")
    assert repr(loop) == "for v in 2 unroll {\n  o[v] = 1f32\n}"
    assert str(Module([PrimFunc("f", [buf], loop)])).startswith("@f(o: float32[2])")
    back = parse_stmt(print_stmt(loop), env={"o": buf})
    assert back.body.buffer is buf and back.body.indices[0] is back.var
    assert roundtrip_check(Seq([Barrier(), Barrier()])).stmts[1].__class__ is Barrier


# ---------------------------------------------------------------------------------------
# attributes


def test_annotations_normalize_tuples_and_reject_non_json():
    buf = Buffer("o", "float32", [32])
    v = Var("v")
    ann = {"nested": {"a": [(1, 2), [3]], "b": None, "c": False, "d": -1.5,
                      "e": float("inf"), "f": 'q"uote\n'}}
    f = PrimFunc("k", [buf], For(v, 32, Store(buf, [v], const(0.0)), annotations=ann))
    g = roundtrip_check(f)
    assert g.body.annotations["nested"] == {"a": ((1, 2), (3,)), "b": None, "c": False,
                                            "d": -1.5, "e": float("inf"), "f": 'q"uote\n'}
    with pytest.raises(IRError, match="has no text form"):
        print_func(PrimFunc("k", [buf], For(v, 1, Barrier(), annotations={"x": Var("v")})))
    with pytest.raises(IRError, match="is not a string"):
        print_func(PrimFunc("k", [buf], For(v, 1, Barrier(), annotations={"x": {1: 2}})))


def test_function_attrs_are_typed_and_round_trip():
    buf = Buffer("o", "float32", [32])
    sh = Buffer("s", "float32", [16384], "shared")
    tx = Var("tx")
    body = For(tx, 32, Alloc(sh, Seq([Store(sh, [tx], const(1.0)), Barrier(),
                                      Store(buf, [tx], sh[tx])]), dyn_offset=0),
               "thread", "threadIdx.x")
    attrs = FuncAttrs.kernel((1, 1, 1), [32, 1, 1], stages=("o",),
                             dynamic_shared_bytes=65536, min_blocks_per_sm=1)
    f = PrimFunc("k", [buf], body, attrs)
    text = print_func(f)
    assert text.startswith('@k(o: float32[32]) attrs {"kind": "kernel", "grid": [1, 1, 1], '
                           '"block": [32, 1, 1], "stages": ["o"], "dynamic_shared_bytes": '
                           '65536, "min_blocks_per_sm": 1} {')
    assert "alloc s: float32[16384] shared dynamic(0) {" in text
    g = roundtrip_check(f)
    assert g.attrs == attrs and g.level is Level.KERNEL
    assert g.launch.block == (32, 1, 1) and g.launch.threads_per_block == 32
    assert g.body.body.dyn_offset == 0
    assert shared_memory(g) == (0, 65536) and g.shared_bytes == 65536
    # the protocol is the dataclass: a dict, an unknown key or a misplaced fact is an error
    with pytest.raises(IRError, match="attrs must be a FuncAttrs"):
        PrimFunc("k", [buf], body, {"kind": "kernel"})
    with pytest.raises(IRError, match="unknown attribute 'gird' of a kernel function; did "
                                      "you mean 'grid'"):
        parse_func(text.replace('"grid"', '"gird"'))
    with pytest.raises(IRError, match="unknown function level 'device'"):
        parse_func(text.replace('"kernel"', '"device"'))
    with pytest.raises(IRError, match="a kernel needs its 'grid' and 'block'"):
        FuncAttrs.from_json({"kind": "kernel"})
    with pytest.raises(IRError, match="function f is a prim .* not a kernel; it has no launch"):
        PrimFunc("f", [buf], body).launch  # noqa: B018
    with pytest.raises(IRError, match="only shared buffers live in dynamic shared memory"):
        Alloc(Buffer("l", "float32", [4], "local"), Barrier(), dyn_offset=0)


# ---------------------------------------------------------------------------------------
# parse errors

GOOD = """@main(A: float32[4]) attrs {"kind": "prim"} {
  for i in 4 {
    A[i] = 1f32
  }
}"""


@pytest.mark.parametrize("text, line, col, fragment", [
    (GOOD.replace("for i in 4 {", "for i in 4 ["), 2, 14,
     "expected '{' to open the loop body"),
    (GOOD.replace("A[i] = 1f32", "A[j] = 1f32"), 3, 7, "undefined name 'j'"),
    (GOOD.replace("float32[4]", "floaty[4]"), 1, 10, "expected the buffer's dtype"),
    (GOOD.replace("in 4 {", "in 4 sideways {"), 2, 14, "expected '{' to open the loop body"),
    (GOOD.replace("1f32", "1.5"), 3, 12, "needs a dtype suffix"),
    (GOOD.replace("1f32", "1q7"), 3, 12, "unknown constant suffix 'q7'"),
    (GOOD.replace("1f32", "frob(1f32)"), 3, 12, "unknown function 'frob'"),
    (GOOD.replace("1f32", "exp(1f32, 2f32)"), 3, 12, "exp takes 1 argument(s), got 2"),
    (GOOD.replace("A[i] = 1f32", "A[i, i] = 1f32"), 3, 5, "2 indices for a 1-d buffer"),
    (GOOD.replace("A[i] = 1f32", "A[i] = 1"), 3, 5, "store to A"),
    (GOOD.replace("A[i] = 1f32", "i[0] = 1f32"), 3, 5, "is a scalar var, not a buffer"),
    (GOOD.replace("A[i] = 1f32", "A[A] = 1f32"), 3, 7, "is a buffer, not a scalar"),
    (GOOD.replace("A[i] = 1f32", "A[i] := 1f32"), 3, 10, "expected '=' after the store"),
    (GOOD.replace("A[i] = 1f32", "A[i] = 1f32 $"), 3, 17, "unexpected character '$'"),
    (GOOD.replace('"prim"', '"prim'), 1, 37, "unterminated string"),
    (GOOD.replace('{"kind": "prim"}', '{kind: "prim"}'), 1, 29,
     "expected a quoted attribute name"),
    (GOOD.replace("in 4 {", "in 4 thread(warp.x) {"), 2, 21, "expected a thread tag"),
    (GOOD.replace("for i in", "for for in"), 2, 7, "expected a loop var name"),
    (GOOD[:-6], 3, 16, "expected '}' to close the region opened on line 2"),
    (GOOD + "\n@main(B: float32[1]) attrs {} {\n}", 6, 2, "a second function named 'main'"),
    (GOOD.replace("    A[i]", "    while A[i]"), 3, 5, "expected a statement"),
    (GOOD.replace("for i in 4", "for i in 4\n    attrs {} attrs"), 3, 14,
     "expected '{' to open the loop body"),
])
def test_parse_errors_name_line_column_and_expectation(text, line, col, fragment):
    with pytest.raises(IRParseError) as info:
        parse_module(text)
    err = info.value
    assert fragment in err.reason
    assert (err.line, err.col) == (line, col), str(err)
    assert str(err).startswith(f"line {line}, column {col}: ")
    assert "^" in str(err)  # the offending line is shown with a caret


def test_parse_error_is_an_ir_error_and_parse_func_wants_one_function():
    assert issubclass(IRParseError, IRError)
    with pytest.raises(IRParseError, match="expected the end of the text"):
        parse_func(GOOD + "\n" + GOOD.replace("@main", "@other"))
    with pytest.raises(IRParseError, match="undefined name 'x'"):
        parse_expr("(x + 1)")


def test_roundtrip_check_reports_unparseable_ir():
    buf = Buffer("o", "int32", [1])
    free = Var("free")  # used but never defined: the text cannot be read back
    with pytest.raises(IRParseError, match="undefined name 'free'"):
        roundtrip_check(PrimFunc("f", [buf], Store(buf, [const(0)], free)))


def test_absurdly_deep_nesting_is_a_parse_error():
    text = "(" * 30000 + "1" + ")" * 30000
    with pytest.raises(IRParseError, match="nested more than"):
        parse_expr(text)
