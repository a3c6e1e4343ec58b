"""Exported module files under abuse: a loaded memory plan is checked for consistency,
declared sizes are checked before anything is read (zip bombs, huge ``.npy`` headers), the
device IR is verified against the target at load, and every kind of damage is a
``ModuleFormatError`` at load, never a raw exception or a wrong kernel later."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

import ptxforge
from ptxforge import graph, runtime, te
from ptxforge.runtime import ModuleFormatError
from ptxforge.runtime.archive import Archive


def _kernel_module():
    A = te.placeholder((32, 16), name="A")
    B = te.placeholder((16, 32), name="B")
    r = te.reduce_axis((0, 16), name="r")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((32, 32), lambda i, j: te.max(C[i, j], te.const(0.0, "float32")), name="D")
    s = te.create_schedule(D.op)
    for t in (C, D):
        i, j = s[t].op.axis
        s[t].bind(i, te.thread_axis("blockIdx.x"))
        s[t].bind(j, te.thread_axis("threadIdx.x"))
    return ptxforge.build(s, [A, B, D], target="sim")


def _network():
    x = graph.var("data", (1, 8, 8, 4))
    w = graph.const(np.random.default_rng(5).standard_normal((3, 3, 4, 8)).astype("float32"),
                    "w")
    y = graph.nn.relu(graph.nn.conv2d(x, w, padding=(1, 1), data_layout="NHWC",
                                      kernel_layout="HWIO"))
    z = graph.nn.dense(graph.reshape(y, (1, 512)), graph.const(
        np.random.default_rng(6).standard_normal((10, 512)).astype("float32"), "fc"))
    return graph.function(z)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("archives")
    kernel = _kernel_module().export_library(str(d / "k.ptxf"))
    net = graph.build(_network(), "sim").export_library(str(d / "n.ptxf"))
    return {"kernel": kernel, "network": net}


def _contents(path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _write(dst, contents: dict, compression=zipfile.ZIP_DEFLATED) -> str:
    with zipfile.ZipFile(dst, "w", compression=compression) as zf:
        for name, data in contents.items():
            zf.writestr(name, data)
    return str(dst)


def _rewrite(src, dst, edit=None, members=None, raw_manifest=None) -> str:
    """A copy of ``src`` with its manifest edited and members replaced, the digests of
    every member recomputed (so only the consistency checks can find the fault)."""
    contents = _contents(src)
    contents.update(members or {})
    manifest = json.loads(contents["manifest.json"])
    if edit:
        edit(manifest)
    manifest["sha256"] = {n: hashlib.sha256(d).hexdigest() for n, d in contents.items()
                          if n != "manifest.json"}
    contents["manifest.json"] = (raw_manifest if raw_manifest is not None
                                 else json.dumps(manifest).encode())
    return _write(dst, contents)


def _refused(path, match):
    with pytest.raises(ModuleFormatError, match=match):
        runtime.load_module(path)


# -- 2. the memory plan -----------------------------------------------------------------------


def test_a_storage_smaller_than_its_slots_is_refused(files, tmp_path):
    def shrink(m):
        for s in m["plan"]["storages"]:
            s["nbytes"] = 16

    _refused(_rewrite(files["network"], tmp_path / "a", shrink), "does not fit storage")

    def shrink_all(m):  # slots and storages agree, but not with the slots' shapes
        for s in m["plan"]["slots"]:
            s["nbytes"] = 16
        for s in m["plan"]["storages"]:
            s["nbytes"] = 16

    _refused(_rewrite(files["network"], tmp_path / "b", shrink_all),
             r"slot 0 states 16 bytes, but \[1, 8, 8, 4\] float32 takes 1024")


@pytest.mark.parametrize("edit,match", [
    (lambda p: p["slots"][0].update(dtype="float64"), "slot 0 states 1024 bytes"),
    (lambda p: p["slots"][0].update(shape=[1, 8, 8, 8]), "slot 0 states 1024 bytes"),
    (lambda p: p["steps"][0].update(out=1), "writes storage 1, which holds an input or a weight"),
    (lambda p: p["steps"][1].update(view=False), "step 1 calls no function"),
    (lambda p: p["steps"][1].update(args=[0]), "step 1 is a view whose result"),
    (lambda p: p["inputs"].update(data=1), "input 'data' is slot 1, a slot of kind 'param'"),
    (lambda p: p["outputs"].append(99), r"a slot index is outside \[0, 6\)"),
    (lambda p: p["slots"][3].update(storage=9), "slot 3 is in storage 9 of 5"),
])
def test_each_inconsistency_of_the_plan_is_refused(files, tmp_path, edit, match):
    _refused(_rewrite(files["network"], tmp_path / "n", lambda m: edit(m["plan"])), match)


def test_an_intact_network_still_loads_and_runs(files):
    lib = runtime.load_module(files["network"])
    m = graph.GraphModule(lib, ptxforge.sim())
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype("float32")
    m.set_input("data", x)
    m.run()
    ref = graph.build(_network(), "sim")
    r = graph.GraphModule(ref, ptxforge.sim())
    r.set_input("data", x)
    r.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), r.get_output(0).numpy())


# -- 3. declared sizes before reading ---------------------------------------------------------


def test_a_member_that_would_inflate_a_hundredfold_is_refused_before_it_is_read(files,
                                                                                tmp_path):
    import tracemalloc

    bomb = b" " * (64 << 20)  # deflates about a thousand times
    path = _rewrite(files["kernel"], tmp_path / "bomb", members={"device_ir.txt": bomb})
    tracemalloc.start()
    try:
        _refused(path, "zip bomb")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def _npy(shape, dtype="<f4", data=b"") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue() + data


def test_a_tiny_npy_declaring_2_to_the_40_elements_is_refused_before_allocation(files,
                                                                               tmp_path):
    huge = _npy((1 << 40,), data=b"\0" * 64)
    name = "params/0.npy"
    # the header disagrees with the manifest
    _refused(_rewrite(files["network"], tmp_path / "a", members={name: huge}),
             r"weight w has shape \[1099511627776\], the manifest says \[3, 3, 4, 8\]")
    # the header and the entry agree, but the member holds 64 bytes
    path = _rewrite(files["network"], tmp_path / "b", members={name: huge})
    with Archive(path) as ar, pytest.raises(ModuleFormatError, match="holds 64 bytes of data"):
        ar.array({"member": name, "dtype": "float32", "shape": [1 << 40]}, "weight w")


@pytest.mark.parametrize("member,match", [
    (_npy((3, 3, 4, 8), "<f8", b"\0" * 2304), "holds float64, the manifest says float32"),
    (_npy((3, 3, 4, 8), ">f4", b"\0" * 1152), "holds >f4"),
    (_npy((3, 3, 4, 8), "<f4", b"\0" * 1000), "holds 1000 bytes of data"),
    (b"\x93NUMPY\x01\x00" + b"\xff\xff" + b"{" * 64, "is damaged"),
    (b"not an npy", "is damaged"),
])
def test_weight_headers_are_checked_against_the_manifest(files, tmp_path, member, match):
    _refused(_rewrite(files["network"], tmp_path / "w", members={"params/0.npy": member}),
             match)


# -- 4. the device IR -------------------------------------------------------------------------


def _edit_ir(files, tmp_path, edit) -> str:
    text = _contents(files["kernel"])["device_ir.txt"].decode()
    edited = edit(text)
    assert edited != text
    return _rewrite(files["kernel"], tmp_path / "ir", members={
        "device_ir.txt": edited.encode()})


@pytest.mark.parametrize("edit,match", [
    (lambda t: t.replace("B[((r * 32) + j)]", "B[0.5f32]"), "indices are integers"),
    (lambda t: t.replace("max(C[cse0], 0f32)", "select((i_1 && j_1), C[cse0], 0f32)"),
     "logical and on int32 operands"),
    (lambda t: t.replace("alloc C: float32[32, 32] global",
                         "alloc C: float32[1099511627776, 32] global"),
     "does not match kernel param 2"),
    (lambda t: t.replace('"block": [32, 1, 1], "stages": ["D"]',
                         '"block": [2048, 1, 1], "stages": ["D"]'), "launch limit exceeded"),
])
def test_device_ir_that_fails_the_verifier_is_refused_at_load(files, tmp_path, edit, match):
    _refused(_edit_ir(files, tmp_path, edit), match)


def test_a_huge_local_buffer_is_refused_at_load(files, tmp_path):
    def local(t):
        head, kernel1 = t.split("@main_kernel1", 1)
        sig, body = kernel1.split("{\n", 1)
        body = body.rstrip().removesuffix("}")
        return (f"{head}@main_kernel1{sig}{{\n  alloc L: float32[1099511627776] local {{\n"
                f"{body}}}\n}}\n")

    _refused(_edit_ir(files, tmp_path, local), "bytes of local memory per thread")


# -- 6. damaged files -------------------------------------------------------------------------


def test_every_single_byte_flip_is_refused_or_loads_the_same_module(files):
    data = open(files["kernel"], "rb").read()
    want = str(runtime.load_module(files["kernel"]).device_module)
    loaded = refused = 0
    # every 7th byte of the whole file (the deflate streams, headers, central directory)
    for k in range(0, len(data), 7):
        flipped = bytearray(data)
        flipped[k] ^= 0x55
        path = files["kernel"] + ".flip"
        with open(path, "wb") as f:
            f.write(flipped)
        try:
            got = runtime.load_module(path)
        except ModuleFormatError:
            refused += 1
            continue
        assert str(got.device_module) == want, f"byte {k}"
        loaded += 1
    assert refused > len(data) // 7 // 2


def test_an_unsupported_compression_method_is_refused(files, tmp_path):
    path = _write(tmp_path / "bz", _contents(files["kernel"]), zipfile.ZIP_BZIP2)
    _refused(path, "compression method 12")
    # an unknown method number in both headers
    data = bytearray(open(files["kernel"], "rb").read())
    for sig, at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        k = data.find(sig)
        while k >= 0:
            data[k + at:k + at + 2] = (99).to_bytes(2, "little")
            k = data.find(sig, k + 4)
    (tmp_path / "m99").write_bytes(bytes(data))
    _refused(str(tmp_path / "m99"), "compression method 99")


@pytest.mark.parametrize("raw,match", [
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b"{" * 200_000, "nested too deeply|no readable"),
    (b"\xff\xfe", "no readable"),
])
def test_unreadable_manifests_are_refused(files, tmp_path, raw, match):
    _refused(_rewrite(files["kernel"], tmp_path / "m", raw_manifest=raw), match)


def _launch(m):
    return next(iter(next(iter(m["code"]["builds"].values())).values()))["launch"]


@pytest.mark.parametrize("edit,match", [
    (lambda m: m["plan"]["storages"][0].update(nbytes=float("1e400")),
     r"plan.storages\[0\].nbytes: expected an integer"),
    (lambda m: m["plan"]["storages"][0].update(nbytes=True), "expected an integer"),
    (lambda m: m["plan"]["slots"][0].update(shape=[1, -8, 8, 4]), "expected an integer"),
    (lambda m: m["plan"]["slots"][0].update(dtype="float128"), "is not a dtype"),
    (lambda m: m["plan"]["steps"][0].pop("out"), r"plan.steps\[0\]: has no 'out'"),
    (lambda m: m["params"]["w"].update(member="../../etc/passwd"), "not a valid value"),
    (lambda m: m.update(is_sim="yes"), "is_sim: expected true or false"),
    (lambda m: m.update(extra=1), "unexpected key 'extra'"),
])
def test_malformed_network_manifests_are_refused(files, tmp_path, edit, match):
    _refused(_rewrite(files["network"], tmp_path / "m", edit), match)


@pytest.mark.parametrize("edit,match", [
    (lambda m: m["params"][0].pop("name"), r"params\[0\]: has no 'name'"),
    (lambda m: m["params"][0].update(shape=[32, 16.0]), "expected an integer"),
    (lambda m: m.update(entry_name=7), "entry_name"),
    (lambda m: m.update(kind=["kernel"]), "unknown kind"),
    (lambda m: m.update(version=2.0), "format version 2.0"),
])
def test_malformed_kernel_manifests_are_refused(files, tmp_path, edit, match):
    _refused(_rewrite(files["kernel"], tmp_path / "m", edit), match)


@pytest.fixture(scope="module")
def cuda_kernel(tmp_path_factory):
    d = tmp_path_factory.mktemp("cuda")
    built = _kernel_module()
    return built.export_library(str(d / "k.ptxf"), archs=["sm_80"])


@pytest.mark.parametrize("edit,match", [
    (lambda m: _launch(m).update(grid=[0, 1, 1]), r"grid\[0\]: expected an integer in \[1,"),
    (lambda m: _launch(m).update(block=[4096, 1, 1]), "block"),
    (lambda m: _launch(m).update(grid=[32, 1]), "grid: expected a list of 3 entries"),
    (lambda m: _launch(m).update(arch="sm_90"), "says it was compiled for sm_90"),
    (lambda m: _launch(m).update(name="other"), "does not match its device IR"),
    (lambda m: _launch(m)["params"][0].update(name="B"), "does not match its device IR"),
    (lambda m: _launch(m).update(static_shared_bytes=1 << 30), "bytes of shared memory"),
    (lambda m: _launch(m)["params"][0].update(readonly="no"), "expected true or false"),
])
def test_bad_launch_fields_are_refused_at_load(cuda_kernel, tmp_path, edit, match):
    runtime.load_module(cuda_kernel)  # the intact file loads
    _refused(_rewrite(cuda_kernel, tmp_path / "l", edit), match)
