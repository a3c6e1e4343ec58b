"""export_library / runtime.load_module: one file of data, loaded and run in a process that
cannot import llvmlite and imports none of the compiler, with results equal to the built
module's, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import ptxforge
import ptxforge.tvm as tvm
from ptxforge import autosched, graph, measure, runtime
from ptxforge.autosched.state import State, state_payload
from ptxforge.tvm import te

from .test_network_tuning import _write_records, two_conv_net

HERE = os.path.dirname(os.path.abspath(__file__))

# the loading process: llvmlite cannot be imported there, and afterwards none of the
# compiler's modules may have been imported
CHILD = r"""
import sys
sys.modules["llvmlite"] = None
import numpy as np
from ptxforge import runtime
path, inputs, out, device = sys.argv[1:5]
f = runtime.load_module(path)
args = [np.load(p) for p in inputs.split(",")]
if device == "sim":
    from ptxforge.nd import array, sim
    arrays = [array(a, device=sim()) for a in args]
    f(*arrays)
    result = arrays[-1].numpy()
else:
    from ptxforge.backend_ptx import array, cuda
    arrays = [array(a, cuda(0)) for a in args]
    f(*arrays)
    result = arrays[-1].numpy()
np.save(out, result)
compiler = [m for m in sys.modules if m.startswith(("llvmlite", "ptxforge.passes",
            "ptxforge.autosched", "ptxforge.autotvm", "ptxforge.ops", "ptxforge.measure",
            "ptxforge.graph", "ptxforge.backend_ptx.codegen", "ptxforge.backend_ptx.nvptx",
            "ptxforge.backend_ptx.compile", "ptxforge.driver", "ptxforge.te", "ptxforge.ir.te",
            "ptxforge.ir.compute_dag"))
            and sys.modules[m] is not None]
assert not compiler, compiler
print("LOADED", f.entry_name)
"""


def _import_root() -> str:
    """The folder the child process imports ``ptxforge`` from: this one's (the checkout's
    folder may have another name than the package)."""
    import ptxforge

    parent = os.path.dirname(os.path.dirname(os.path.abspath(ptxforge.__file__)))
    return os.pathsep.join(filter(None, [parent, os.environ.get("PYTHONPATH", "")]))


def _matmul_relu(n=32, k=16):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((n, n), lambda i, j: te.max(C[i, j], te.const(0.0, "float32")), name="D")
    s = te.create_schedule(D.op)
    i, j = s[D].op.axis
    s[D].bind(i, te.thread_axis("blockIdx.x"))
    s[D].bind(j, te.thread_axis("threadIdx.x"))
    i, j = s[C].op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    s[C].bind(j, te.thread_axis("threadIdx.x"))
    return s, [A, B, D]


def _inputs(tmp_path, shapes):
    rng = np.random.default_rng(0)
    paths, arrays = [], []
    for k, shape in enumerate(shapes):
        a = rng.standard_normal(shape).astype("float32")
        p = str(tmp_path / f"in{k}.npy")
        np.save(p, a)
        paths.append(p)
        arrays.append(a)
    return paths, arrays


def _load_in_child(path, inputs, out, device):
    env = {**os.environ, "PYTHONPATH": _import_root()}
    p = subprocess.run([sys.executable, "-c", CHILD, path, ",".join(inputs), out, device],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "LOADED" in p.stdout, p.stdout + p.stderr
    return np.load(out)


@pytest.mark.parametrize("target", ["sim", "cuda"])
def test_exported_kernel_runs_without_the_compiler_and_matches(tmp_path, target):
    s, args = _matmul_relu()
    f = tvm.build(s, args, target, name="mm_relu")
    path = f.export_library(str(tmp_path / "mm.ptxf"))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["kind"] == "kernel" and manifest["entry_name"] == "mm_relu"
    assert "device_ir.txt" in names and not any(n.endswith((".pkl", ".pickle", ".py"))
                                                for n in names)
    # PTX and cubins for a cuda target's architecture only, by default
    assert list(manifest["code"]["builds"]) == (["sm_90"] if target == "cuda" else [])
    inputs, arrays = _inputs(tmp_path, [(32, 16), (16, 32)])
    dev = tvm.sim()
    out = tvm.nd.empty((32, 32), device=dev)
    f(*[tvm.nd.array(a, device=dev) for a in arrays], out)
    inputs.append(str(tmp_path / "out0.npy"))
    np.save(inputs[-1], np.zeros((32, 32), "float32"))
    got = _load_in_child(path, inputs, str(tmp_path / "got.npy"), "sim")
    assert np.array_equal(got, out.numpy())
    np.testing.assert_allclose(got, np.maximum(arrays[0] @ arrays[1], 0), rtol=1e-5, atol=1e-5)
    loaded = runtime.load_module(path)
    assert loaded.entry_name == "mm_relu" and "block" in loaded.get_source("ir")
    if target == "cuda":
        assert ".entry" in loaded.get_source("ptx")


def test_bad_files_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.ptxf"
    bad.write_bytes(b"not a zip")
    with pytest.raises(runtime.ModuleFormatError, match="not an exported ptxforge module"):
        runtime.load_module(str(bad))
    s, args = _matmul_relu()
    path = tvm.build(s, args, "sim").export_library(str(tmp_path / "ok.ptxf"))
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    manifest["version"] = 99
    with zipfile.ZipFile(tmp_path / "v99.ptxf", "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        zf.writestr("device_ir.txt", members["device_ir.txt"])
    with pytest.raises(runtime.ModuleFormatError, match="version 99"):
        tvm.runtime.load_module(str(tmp_path / "v99.ptxf"))
    with zipfile.ZipFile(tmp_path / "cut.ptxf", "w") as zf:
        zf.writestr("manifest.json", members["manifest.json"])
    with pytest.raises(runtime.ModuleFormatError, match="device_ir.txt is missing"):
        runtime.load_module(str(tmp_path / "cut.ptxf"))
    with pytest.raises(FileNotFoundError):
        runtime.load_module(str(tmp_path / "none.ptxf"))


@pytest.mark.gpu
def test_exported_kernel_runs_on_the_gpu_in_a_fresh_process(tmp_path):
    from ptxforge.backend_ptx import array, cuda, empty

    s, args = _matmul_relu()
    f = tvm.build(s, args, "cuda")
    path = f.export_library(str(tmp_path / "mm.ptxf"))
    inputs, arrays = _inputs(tmp_path, [(32, 16), (16, 32)])
    out = empty((32, 32), "float32", cuda(0))
    f(*[array(a, cuda(0)) for a in arrays], out)
    inputs.append(str(tmp_path / "out0.npy"))
    np.save(inputs[-1], np.zeros((32, 32), "float32"))
    got = _load_in_child(path, inputs, str(tmp_path / "got.npy"), "cuda")
    assert np.array_equal(got, out.numpy())


def _small_network():
    from ptxforge import graph

    x = graph.var("data", (1, 8, 8, 4))
    w = graph.const(np.random.default_rng(5).standard_normal((3, 3, 4, 8)).astype("float32"),
                    "w")
    y = graph.nn.relu(graph.nn.conv2d(x, w, padding=(1, 1), data_layout="NHWC",
                                      kernel_layout="HWIO"))
    z = graph.nn.dense(graph.reshape(y, (1, 512)), graph.const(
        np.random.default_rng(6).standard_normal((10, 512)).astype("float32"), "fc"))
    return graph.function(z)


NET_CHILD = r"""
import sys
sys.modules["llvmlite"] = None
import numpy as np
from ptxforge import runtime
from ptxforge.runtime.graph_executor import GraphModule
path, data, out = sys.argv[1:4]
lib = runtime.load_module(path)
m = lib["default"]()
m.set_input("data", np.load(data))
m.run()
np.save(out, m.get_output(0).numpy())
compiler = [k for k in sys.modules if k.startswith(("llvmlite", "ptxforge.passes",
            "ptxforge.autosched", "ptxforge.ops", "ptxforge.graph", "ptxforge.measure",
            "ptxforge.backend_ptx.codegen", "ptxforge.driver", "ptxforge.te", "ptxforge.ir.te",
            "ptxforge.ir.compute_dag"))
            and sys.modules[k] is not None]
assert not compiler, compiler
print("LOADED network")
"""


@pytest.mark.parametrize("target", ["sim", "cuda"])
def test_exported_network_runs_without_the_compiler_and_matches(tmp_path, target):
    from ptxforge import graph

    lib = graph.build(_small_network(), target)
    path = lib.export_library(str(tmp_path / "net.ptxf"))
    data = np.random.default_rng(7).standard_normal((1, 8, 8, 4)).astype("float32")
    m = graph.GraphModule(lib, tvm.sim())
    m.set_input("data", data)
    m.run()
    want = m.get_output(0).numpy()
    np.save(tmp_path / "data.npy", data)
    env = {**os.environ, "PYTHONPATH": _import_root()}
    p = subprocess.run([sys.executable, "-c", NET_CHILD, path, str(tmp_path / "data.npy"),
                        str(tmp_path / "got.npy")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "LOADED network" in p.stdout, p.stdout + p.stderr
    assert np.array_equal(np.load(tmp_path / "got.npy"), want)
    # in this process too, through the graph layer and TVM's names
    loaded = graph.load(path)
    assert loaded.input_names == lib.input_names and set(loaded.params) == set(lib.params)
    from ptxforge.tvm.contrib import graph_executor

    g = graph_executor.GraphModule(tvm.runtime.load_module(path)["default"](tvm.sim()))
    g.set_input("data", data)
    g.run()
    assert np.array_equal(g.get_output(0).numpy(), want)
    with pytest.raises(runtime.ModuleFormatError, match="not a network"):
        s, args = _matmul_relu()
        graph.load(tvm.build(s, args, "sim").export_library(str(tmp_path / "k.ptxf")))


@pytest.mark.gpu
def test_exported_network_runs_on_the_gpu_in_a_fresh_process(tmp_path):
    from ptxforge import graph
    from ptxforge.backend_ptx import cuda

    lib = graph.build(_small_network(), "cuda")
    path = lib.export_library(str(tmp_path / "net.ptxf"))
    data = np.random.default_rng(7).standard_normal((1, 8, 8, 4)).astype("float32")
    m = graph.GraphModule(lib, cuda(0))
    m.set_input("data", data)
    m.run()
    want = m.get_output(0).numpy()
    np.save(tmp_path / "data.npy", data)
    child = NET_CHILD.replace('lib["default"]()', 'lib["default"](__import__('
                              '"ptxforge.backend_ptx", fromlist=["cuda"]).cuda(0))')
    env = {**os.environ, "PYTHONPATH": _import_root()}
    p = subprocess.run([sys.executable, "-c", child, path, str(tmp_path / "data.npy"),
                        str(tmp_path / "got.npy")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "LOADED network" in p.stdout, p.stdout + p.stderr
    assert np.array_equal(np.load(tmp_path / "got.npy"), want)


# -- tuned modules, several architectures, weights of every dtype, damaged files -------------

@autosched.register_workload
def export_matmul_relu(N, M, K):
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((N, M), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return [A, B, D]


def _tuned_kernel(folder, target: str):
    """A matmul + relu built from the best record of a small log (sampled sketches with
    made-up costs), as ``apply_best`` gives it after tuning."""
    task = autosched.SearchTask(func=export_matmul_relu, args=(64, 64, 32), target="cuda")
    policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), seed=0)
    log = str(folder / "kernel_records.json")
    for i, row in enumerate(policy.sample_initial_population(4)):
        state = State.from_row(row, task)
        inp = measure.MeasureInput(task.task_spec, state.pipeline_text(task),
                                   state_payload(task, state))
        measure.save_records(log, [inp], [measure.MeasureResult((1e-5 * (i + 1),), 0, "",
                                                                0.1, 0.0)])
    sch, args = task.apply_best(log)
    return ptxforge.build(sch, args, target=target)


def _tuned_network(folder, target: str):
    """A two-convolution network compiled from records of every one of its tasks."""
    net, params, in_shape = two_conv_net()
    tasks, _ = autosched.extract_tasks(net, params)
    log = str(folder / "net_records.json")
    _write_records(tasks, log, skip_last=False)
    with autosched.ApplyHistoryBest(log):
        lib = graph.build(net, target, params)
    assert all(f.tuned for f in lib.functions.values())
    return lib, in_shape


@pytest.mark.parametrize("device", ["sim", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_tuned_kernel_and_network_run_without_the_compiler_and_match(tmp_path, device):
    from ptxforge.nd import array, cuda, empty, sim

    dev = sim() if device == "sim" else cuda(0)
    kernel = _tuned_kernel(tmp_path, "cuda")
    path = kernel.export_library(str(tmp_path / "kernel.ptxf"))
    inputs, arrays = _inputs(tmp_path, [(64, 32), (32, 64)])
    out = empty((64, 64), "float32", dev)
    kernel(*[array(a, dev) for a in arrays], out)
    inputs.append(str(tmp_path / "out0.npy"))
    np.save(inputs[-1], np.zeros((64, 64), "float32"))
    got = _load_in_child(path, inputs, str(tmp_path / "got.npy"), device)
    assert np.array_equal(got, out.numpy())

    lib, in_shape = _tuned_network(tmp_path, "cuda")
    path = lib.export_library(str(tmp_path / "net.ptxf"))
    data = np.random.default_rng(7).standard_normal(in_shape).astype("float32")
    m = graph.GraphModule(lib, dev)
    m.set_input("data", data)
    m.run()
    np.save(tmp_path / "data.npy", data)
    child = NET_CHILD if device == "sim" else NET_CHILD.replace(
        'lib["default"]()', 'lib["default"](__import__("ptxforge.backend_ptx", '
                            'fromlist=["cuda"]).cuda(0))')
    p = subprocess.run([sys.executable, "-c", child, path, str(tmp_path / "data.npy"),
                        str(tmp_path / "got.npy")], env={**os.environ,
                                                         "PYTHONPATH": _import_root()},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "LOADED network" in p.stdout, p.stdout + p.stderr
    assert np.array_equal(np.load(tmp_path / "got.npy"), m.get_output(0).numpy())


def test_several_architectures_and_the_build_a_gpu_runs(tmp_path):
    s, args = _matmul_relu()
    built = tvm.build(s, args, "sim")
    path = built.export_library(str(tmp_path / "two.ptxf"), archs=["sm_80", "sm_90"])
    loaded = runtime.load_module(path)
    assert loaded.archs == ["sm_80", "sm_90"]
    assert ".target sm_80" in loaded.get_source("ptx", "sm_80")
    assert ".target sm_90" in loaded.get_source("ptx", "sm_90")
    assert runtime.load_module(built.export_library(str(tmp_path / "none.ptxf"))).archs == []
    lib = graph.build(_small_network(), "sim")
    net = runtime.load_module(lib.export_library(str(tmp_path / "net.ptxf"), archs=["sm_86"]))
    assert net.archs == ["sm_86"] and not net.target.is_sim
    with pytest.raises(ValueError, match="'sm_9' is not an architecture name"):
        built.export_library(str(tmp_path / "bad.ptxf"), archs=["sm_9"])

    builds = {"sm_80": True, "sm_90": True}
    assert runtime.choose_build(builds, (9, 0)) == ("sm_90", True)
    assert runtime.choose_build(builds, (8, 6)) == ("sm_80", True)
    assert runtime.choose_build(builds, (12, 0)) == ("sm_90", False)  # the driver's JIT
    assert runtime.choose_build({"sm_90": False}, (9, 0)) == ("sm_90", False)
    assert runtime.choose_build({"sm_90a": True, "sm_80": True}, (9, 0)) == ("sm_90a", True)
    with pytest.raises(ValueError, match=r"compute capability 7\.5: the module's builds are for "
                                         r"sm_80, sm_90; export it with archs="):
        runtime.choose_build(builds, (7, 5))
    with pytest.raises(ValueError, match="builds are for sm_90a"):
        runtime.choose_build({"sm_90a": True}, (10, 0))


def test_bfloat16_weights_load_as_bfloat16(tmp_path):
    x = graph.var("data", (1, 16))
    w = graph.var("w", (8, 16))
    params = {"w": np.random.default_rng(0).standard_normal((8, 16)).astype("float32")}
    lib = graph.build(graph.function(graph.nn.relu(graph.nn.dense(x, w))), "sim", params,
                      precision="bfloat16")
    loaded = graph.load(lib.export_library(str(tmp_path / "bf16.ptxf")))
    assert loaded.params["w"].dtype == lib.params["w"].dtype
    assert np.array_equal(loaded.params["w"].view("u2"), lib.params["w"].view("u2"))
    data = np.random.default_rng(1).standard_normal((1, 16)).astype("float32")
    outs = []
    for library in (lib, loaded):
        m = graph.GraphModule(library, tvm.sim())
        m.run(data=data)
        outs.append(m.get_output(0).numpy())
    assert np.array_equal(*outs)


def _rewrite(src, dst, edit_manifest=None, members=None) -> str:
    """A copy of module file ``src`` with its manifest edited and members replaced."""
    with zipfile.ZipFile(src) as zf:
        contents = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(contents["manifest.json"])
    if edit_manifest:
        edit_manifest(manifest)
    contents["manifest.json"] = json.dumps(manifest).encode()
    contents.update(members or {})
    with zipfile.ZipFile(dst, "w") as zf:
        for name, data in contents.items():
            zf.writestr(name, data)
    return str(dst)


def test_changed_or_inconsistent_files_are_refused_with_the_reason(tmp_path):
    s, args = _matmul_relu()
    kernel = tvm.build(s, args, "cuda").export_library(str(tmp_path / "k.ptxf"))
    net = graph.build(_small_network(), "cuda").export_library(str(tmp_path / "n.ptxf"))

    def refused(path, match):
        with pytest.raises(runtime.ModuleFormatError, match=match):
            runtime.load_module(path)

    ptx = next(n for n in zipfile.ZipFile(kernel).namelist() if n.endswith(".ptx"))
    refused(_rewrite(kernel, tmp_path / "ptx", members={ptx: b"// edited\n"}),
            f"{ptx} does not match its digest")
    refused(_rewrite(kernel, tmp_path / "v3", lambda m: m.update(version=3)),
            "format version 3; this ptxforge reads version 2: upgrade ptxforge")

    def grid(m):
        next(iter(m["code"]["builds"]["sm_90"].values()))["launch"]["grid"] = [7, 1, 1]

    refused(_rewrite(kernel, tmp_path / "grid", grid), "launch of kernel .* does not match")

    def swap(m):
        step = m["plan"]["steps"][0]
        step["args"][0], step["out"] = step["out"], step["args"][0]

    refused(_rewrite(net, tmp_path / "plan", swap), "memory plan is inconsistent: step 0")

    def weight(m):
        next(iter(m["params"].values()))["shape"] = [1]

    refused(_rewrite(net, tmp_path / "weight", weight), "weight .* has shape")


@pytest.mark.gpu
def test_code_for_an_older_architecture_runs_through_the_drivers_jit(tmp_path):
    from ptxforge.backend_ptx import array, cuda, empty

    dev = cuda(0)
    s, args = _matmul_relu()
    built = tvm.build(s, args, "cuda")
    older = runtime.load_module(built.export_library(str(tmp_path / "old.ptxf"),
                                                     archs=["sm_80"]))
    inputs = [array(a, dev) for a in _inputs(tmp_path, [(32, 16), (16, 32)])[1]]
    want, got = empty((32, 32), "float32", dev), empty((32, 32), "float32", dev)
    built(*inputs, want)
    older(*inputs, got)
    assert np.array_equal(got.numpy(), want.numpy())
    major, minor = dev.compute_capability
    loaded = older._loaded[repr(dev)]
    # an sm_80 cubin does not run on another major version: the driver compiled the PTX
    assert all((k.compiled.cubin is None) == (major != 8) for k in loaded.kernels.values())
