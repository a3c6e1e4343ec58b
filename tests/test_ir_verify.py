"""The IR verifier: valid IR passes; each invariant, broken on purpose, is reported."""

from __future__ import annotations

import pytest
from ptxforge.ir.expr import IRError, Var, const
from ptxforge.ir.parser import parse_func, parse_module
from ptxforge.ir.stmt import Alloc, Buffer, For, If, Module, PrimFunc, Seq, Store
from ptxforge.ir.te import placeholder
from ptxforge.ir.verify import IRVerifyError, verify
from ptxforge.target import as_target, replace

TENSOR = """@main(A: float32[16, 16], B: float32[16, 16], C: float32[16, 16])
    attrs {"kind": "prim"} {
  alloc T: float32[16, 16] global {
    for i in 16 {
      for j in 16 {
        block T(vi: S[16] = i, vj: S[16] = j) where (i < 16) {
          T[vi, vj] = select((vi < 15), A[vi, vj], 0f32)
        }
      }
    }
    for i_1 in 16 thread(blockIdx.x) {
      for j_1 in 16 vthread(vthread) {
        for j_2 in 1 vthread(vthread) {
          for k in 16 unroll {
            block C(vi_1: S[16] = i_1, vj_1: S[16] = (j_1 + j_2), vk: R[16] = k) {
              init {
                C[vi_1, vj_1] = 0f32
              }
              let s: float32 = (T[vi_1, vk] * B[vk, vj_1]) {
                C[vi_1, vj_1] = (C[vi_1, vj_1] + s)
              }
            }
          }
        }
      }
    }
  }
}"""

KERNEL1 = """@k1(t: float32[256], b: float32[256], c: float32[256])
    attrs {"kind": "kernel", "grid": [16, 1, 1], "block": [16, 1, 1]} {
  for bx in 16 thread(blockIdx.x) {
    for tx in 16 thread(threadIdx.x) {
      alloc acc: float32[1] local {
        alloc ts: float32[16] shared {
          ts[tx] = t[((bx * 16) + tx)]
          barrier
          acc[0] = 0f32
          for k in 16 unroll {
            acc[0] = (acc[0] + (ts[k] * b[((k * 16) + tx)]))
          }
          if (tx < 8) {
            c[((bx * 16) + tx)] = acc[0]
          } else {
            c[((bx * 16) + tx)] = 0f32
          }
        }
      }
    }
  }
}"""

DEVICE = """@main(A: float32[16, 16], B: float32[16, 16], C: float32[16, 16])
    attrs {"kind": "host"} {
  alloc T: float32[16, 16] global {
    launch k0(A, T)
    launch k1(T, B, C)
  }
}

@k0(a: float32[256], t: float32[256])
    attrs {"kind": "kernel", "grid": [2, 1, 1], "block": [128, 1, 1]} {
  for bx in 2 thread(blockIdx.x) {
    for tx in 128 thread(threadIdx.x) {
      t[((bx * 128) + tx)] = a[((bx * 128) + tx)]
    }
  }
}

""" + KERNEL1


def broken(text: str, old: str, new: str) -> Module:
    assert old in text, old
    return parse_module(text.replace(old, new))


def expect(ir, *fragments, pass_name=None, target=None) -> IRVerifyError:
    with pytest.raises(IRVerifyError) as info:
        verify(ir, pass_name, target)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in:\n{msg}"
    return info.value


def test_valid_ir_at_every_level_passes():
    verify(parse_module(TENSOR))
    verify(parse_module(DEVICE))
    verify(parse_module(DEVICE)["k1"])  # a lone function, too
    verify(parse_func(TENSOR), pass_name="inline")


def test_error_names_the_pass_and_shows_the_ir_around_the_fault():
    m = broken(TENSOR, "T[vi, vj] = select((vi < 15), A[vi, vj]",
               "T[vi, vj] = select((vi < 15), A[vi]")
    err = expect(m, "IR verification failed after pass 'split': in function @main: ",
                 "load from A: 1 indices for a 2-d buffer", pass_name="split")
    assert err.pass_name == "split" and err.function == "main"
    lines = str(err).splitlines()
    arrow = [ln for ln in lines if "-->" in ln]
    assert len(arrow) == 1 and "T[vi, vj] = select((vi < 15), A[vi], 0f32)" in arrow[0]
    # the enclosing block's header is shown with it, with line numbers of the function text
    assert any("block T(vi: S[16] = i" in ln and "|" in ln for ln in lines)
    assert issubclass(IRVerifyError, IRError)
    assert "after pass" not in str(expect(m, "IR verification failed: in function @main"))


# ---------------------------------------------------------------------------------------
# scoping and SSA


def test_loop_var_used_outside_its_loop():
    m = broken(TENSOR, "vi_1: S[16] = i_1,", "vi_1: S[16] = i,")
    expect(m, "var i is used outside the for, block or let that defines it")


def test_block_var_used_outside_its_block():
    m = broken(TENSOR, "vk: R[16] = k)", "vk: R[16] = vj)")
    expect(m, "var vj is used outside")


def test_let_var_used_outside_its_body():
    text = TENSOR.replace("C[vi_1, vj_1] = (C[vi_1, vj_1] + s)\n              }",
                          "C[vi_1, vj_1] = C[vi_1, vj_1]\n              }\n"
                          "              C[vi_1, vj_1] = s")
    expect(parse_module(text), "var s is used outside")


def test_buffer_used_outside_its_alloc():
    text = KERNEL1.replace("      }\n    }\n  }\n}", "      }\n      t[0] = ts[0]\n    }\n  }\n}")
    m = parse_module(text)
    expect(m, "buffer ts is used where it is neither a parameter of @k1 nor allocated")


def test_buffer_that_is_no_param_or_alloc():
    a = Buffer("A", "float32", [4])
    stray = Buffer("stray", "float32", [4])
    i = Var("i")
    f = PrimFunc("f", [a], For(i, 4, Store(a, [i], stray[i])))
    expect(f, "buffer stray is used where it is neither a parameter of @f")


def test_var_defined_twice():
    # one name is one object, so reusing a loop name makes one var with two loops
    text = TENSOR.replace("i_1", "i")
    expect(parse_module(text), "var i is defined twice")


def test_buffer_defined_twice():
    a = Buffer("A", "float32", [4])
    f = PrimFunc("f", [a, a], Seq([]))
    expect(f, "buffer A is defined twice")
    t = Buffer("T", "float32", [4])
    g = PrimFunc("g", [a], Seq([Alloc(t, Seq([])), Alloc(t, Seq([]))]))
    expect(g, "buffer T is defined twice")


# ---------------------------------------------------------------------------------------
# types


def test_index_count_and_index_type():
    expect(broken(TENSOR, "A[vi, vj]", "A[vi, vj, vi]"), "3 indices for a 2-d buffer")
    expect(broken(TENSOR, "A[vi, vj]", "A[vi, float32(vj)]"),
           "index float32(vj) is float32; indices are integers")


def test_non_expression_index():
    a = Buffer("A", "float32", [4])
    s = Store(a, [const(0)], const(1.0))
    s.indices = (0,)  # a plain int where an expression belongs
    expect(PrimFunc("f", [a], s), "store to A: index 0 is a Python int, not an IR expression")


def test_store_value_dtype():
    a = Buffer("A", "float32", [4])
    s = Store(a, [const(0)], const(1.0))
    s.value = const(1.0, "float16")  # the constructor refuses this; a buggy pass may not
    expect(PrimFunc("f", [a], s), "store to A (float32) of a float16 value 1f16")


def test_if_and_predicate_conditions_are_bool():
    a = Buffer("A", "float32", [4])
    s = If(const(True), Store(a, [const(0)], const(1.0)))
    s.cond = const(1)
    expect(PrimFunc("f", [a], s), "if condition is int32, not bool: 1")
    expect(broken(TENSOR, "where (i < 16)", "where i"),
           "predicate of block T is int32, not bool: i")


def test_select_branches_agree():
    expect(broken(TENSOR, "A[vi, vj], 0f32)", "A[vi, vj], 0f64)"),
           "select branches have different dtypes (float32, float64)")


def test_binary_operands_agree():
    expect(broken(TENSOR, "A[vi, vj]", "A[vi, (vj + 1i64)]"),
           "operands of add have different dtypes (int32, int64): (vj + 1i64)")
    expect(broken(TENSOR, "(vi < 15)", "(vi < 15i64)"),
           "operands of lt have different dtypes")


def test_front_end_nodes_are_rejected():
    a = Buffer("A", "float32", [4])
    p = placeholder((4,), name="P")
    s = Store(a, [const(0)], p[const(0)])
    expect(PrimFunc("f", [a], s), "front-end node TensorRead in the IR: P[0]")


# ---------------------------------------------------------------------------------------
# thread loops and the device level


def test_nested_loops_with_the_same_thread_tag():
    m = broken(KERNEL1, "for k in 16 unroll {", "for k in 16 thread(threadIdx.x) {")
    expect(m, "thread loop k is bound to threadIdx.x inside loop tx, which is bound to "
              "threadIdx.x too")
    # scheduled IR nests them for cooperative fetching; lowering merges the loops
    verify(broken(TENSOR, "for k in 16 unroll {", "for k in 16 thread(blockIdx.x) {"))


def test_thread_loop_needs_a_hardware_tag():
    text = TENSOR.replace("for k in 16 unroll {", "for k in 16 thread(vthread) {")
    expect(parse_module(text), "thread loop k is bound to 'vthread'")


def test_kernel_has_no_blocks():
    text = KERNEL1.replace(
        "          barrier\n",
        "          block b(v: S[1] = 0) {\n            barrier\n          }\n")
    expect(parse_module(text), "block b in a kernel; device IR has no blocks")


def test_kernel_buffers_are_flat():
    expect(broken(KERNEL1, "b: float32[256]", "b: float32[16, 16]"),
           "kernel parameter b has shape [16, 16]; device IR buffers are flat")
    text = KERNEL1.replace("ts: float32[16] shared", "ts: float32[1, 16] shared")
    text = text.replace("ts[tx]", "ts[0, tx]").replace("ts[k]", "ts[0, k]")
    expect(parse_module(text), "buffer ts has shape [1, 16]; device IR buffers are flat")
    # a kernel split off before flattening says so, and keeps its n-D buffers until then
    verify(parse_module(text.replace('"kind": "kernel"', '"kind": "kernel", "flat": false')))


def test_kernel_has_no_vthreads_and_no_global_allocs():
    expect(broken(KERNEL1, "for k in 16 unroll {", "for k in 16 vthread(vthread) {"),
           "vthread loop k in a kernel")
    expect(broken(KERNEL1, "acc: float32[1] local", "acc: float32[1] global"),
           "kernel allocates global buffer acc")


@pytest.mark.parametrize("launch, fragment", [
    ('"grid": [16, 1, 1], "block": [2048, 1, 1]',
     "2048 threads per block (block = (2048, 1, 1)); the limit is 1024"),
    ('"grid": [16, 1, 1], "block": [1, 2, 128]', "blockDim.z = 128; the limit is 64"),
    ('"grid": [16, 70000, 1], "block": [16, 1, 1]', "gridDim.y = 70000; the limit is 65535"),
    ('"grid": [16, 1, 65536], "block": [16, 1, 1]', "gridDim.z = 65536; the limit is 65535"),
    ('"grid": [2147483648, 1, 1], "block": [16, 1, 1]',
     "gridDim.x = 2147483648; the limit is 2147483647"),
])
def test_launch_limits(launch, fragment):
    err = expect(broken(KERNEL1, '"grid": [16, 1, 1], "block": [16, 1, 1]', launch), fragment)
    assert "-->    1 | @k1(" in str(err)  # function-level faults point at the header


@pytest.mark.parametrize("launch, fragment", [
    ('"grid": [16, 1], "block": [16, 1, 1]', "kernel grid must be three ints (x, y, z)"),
    ('"grid": [16, 0, 1], "block": [16, 1, 1]', "kernel grid (16, 0, 1) has an extent below 1"),
])
def test_malformed_launch_extents_are_refused_when_read(launch, fragment):
    with pytest.raises(IRError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        broken(KERNEL1, '"grid": [16, 1, 1], "block": [16, 1, 1]', launch)


def test_shared_memory_limit():
    k1 = parse_func(KERNEL1)  # its own shared buffer ts holds 16 floats (64 bytes)
    # over the 48 KiB static limit is legal IR until plan_dynamic_shared places the buffers
    verify(k1.replace(body=Alloc(Buffer("big", "float32", [16384], "shared"), k1.body)))
    over = k1.replace(body=Alloc(Buffer("big", "float32", [58096], "shared"), k1.body))
    expect(over, "shared memory per block reaches 232448 bytes with ts; sm_90 allows at most "
                 "232384 (static plus dynamic, with the opt-in)",
           target=replace(as_target("cuda -arch=sm_90"),
                          max_shared_memory_per_block_optin=232384))
    expect(over, "sm_86 allows at most 101376", target="cuda -arch=sm_86")
    verify(over, target="cuda -arch=sm_90")


def _dynamic(k1, placements, dynamic_bytes):
    body = k1.body
    for name, size, offset in placements:
        body = Alloc(Buffer(name, "float32", [size], "shared"), body, dyn_offset=offset)
    return k1.replace(body=body, attrs=k1.attrs.with_launch(dynamic_shared_bytes=dynamic_bytes))


def test_dynamic_shared_memory_placement_and_opt_in_limit():
    k1 = parse_func(KERNEL1)
    verify(_dynamic(k1, [("sa", 16384, 0), ("sb", 16384, 65536)], 131072))  # 128 KiB: fine
    expect(_dynamic(k1, [("a", 16384, 8)], 65600), "buffer a sits at dynamic shared offset 8, "
                                                   "which is not a multiple of 16 bytes")
    expect(_dynamic(k1, [("a", 16384, 0)], 32768), "buffer a (65536 bytes at dynamic shared "
                                                   "offset 0) ends past the kernel's "
                                                   "dynamic_shared_bytes = 32768")
    expect(_dynamic(k1, [("sa", 16384, 0), ("sb", 16, 65520)], 131072),
           "buffer sa (dynamic shared bytes 0..65536) overlaps sb")
    # sm_90 opts in to 227 KiB per block, sm_86 to 99 KiB
    big = _dynamic(k1, [("a", 32768, 0)], 131072)
    verify(big, target="cuda -arch=sm_90")
    expect(big, "sm_86 allows at most 101376", target="cuda -arch=sm_86")
    expect(_dynamic(k1, [("a", 16, 0)], 300 * 1024),
           "307200 bytes of dynamic shared memory per block; sm_90 allows at most 232448")
    with pytest.raises(IRError, match="only kernels have shared memory"):
        verify(parse_func(TENSOR.split("\n\n")[0]).replace(body=Alloc(
            Buffer("s", "float32", [4], "shared"), Seq([]), dyn_offset=0)))


def test_thread_loop_extent_within_launch_extent():
    m = broken(KERNEL1, "for tx in 16 thread(threadIdx.x)", "for tx in 32 thread(threadIdx.x)")
    expect(m, "thread loop tx over threadIdx.x has extent 32, above the launch extent 16 "
              "(launch.block[0])")
    m = broken(KERNEL1, "for bx in 16 thread(blockIdx.x)", "for bx in 17 thread(blockIdx.x)")
    expect(m, "above the launch extent 16 (launch.grid[0])")


# ---------------------------------------------------------------------------------------
# host level


def test_host_holds_only_allocs_and_launches():
    m = broken(DEVICE, "    launch k0(A, T)\n", "    launch k0(A, T)\n    barrier\n")
    expect(m, "a host function holds only alloc, launch and sequences of them; found Barrier")
    m = broken(DEVICE, "alloc T: float32[16, 16] global", "alloc T: float32[16, 16] local")
    expect(m, "host function allocates local buffer T")


def test_launch_must_name_a_kernel_with_matching_args():
    expect(broken(DEVICE, "launch k0(A, T)", "launch k9(A, T)"),
           "launch of 'k9', but the module has no such function (it has main, k0, k1)")
    expect(broken(DEVICE, "launch k0(A, T)", "launch main(A, T)"),
           "launch of 'main', which is a host function, not a kernel")
    expect(broken(DEVICE, "launch k1(T, B, C)", "launch k1(T, B)"),
           "launch of k1 passes 2 args; the kernel takes 3")
    expect(broken(DEVICE, "t: float32[256])\n    attrs {\"kind\": \"kernel\", \"grid\": [2",
                  "t: float32[255])\n    attrs {\"kind\": \"kernel\", \"grid\": [2"),
           "launch of k0: arg 1 (T: float32, 256 elements) does not match kernel param 1 "
           "(t: float32, 255 elements)")


def test_launch_only_in_host_functions():
    m = broken(DEVICE, "          barrier\n", "          launch k0(t, b)\n")
    expect(m, "launch of k0 in a kernel function")


def test_unknown_function_kind_and_bad_argument():
    with pytest.raises(IRError, match="unknown function level 'device'; expected one of "
                                      "prim, kernel, host"):
        broken(TENSOR, '"kind": "prim"', '"kind": "device"')
    with pytest.raises(IRVerifyError, match="verify takes a Module or a PrimFunc"):
        verify("not ir")
