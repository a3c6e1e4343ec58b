"""The builder's assembler: ptxas by default, nvJitLink in the builder's own process when asked
(every kernel of a candidate in one link, the ptxas flags passed through ``-Xptxas``). Without
libnvJitLink the in-process path runs against a stand-in module that records its calls; with
it, against the library (``LD_LIBRARY_PATH`` naming a folder with libnvJitLink.so)."""

from __future__ import annotations

import sys
import types

import pytest

import ptxforge
from ptxforge.backend_ptx import assemble as asm_mod
from ptxforge.backend_ptx import samples
from ptxforge.backend_ptx.compile import compile_kernels
from ptxforge.measure.build import BuildOptions, build_assembler

REPORT = """info    : 0 bytes gmem
info    : Function properties for {name}
info    : 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
info    : Used {regs} registers, used 0 barriers, 368 bytes cmem[0]
"""


class FakeNvJitLink(types.ModuleType):
    """What ``cuda.bindings.nvjitlink`` offers, recording the options and inputs of each
    link and answering with a cubin that names every kernel and a report like the
    library's."""

    class nvJitLinkError(RuntimeError):  # noqa: N801 - the binding's name
        pass

    class InputType:
        PTX = 1

    def __init__(self):
        super().__init__("cuda.bindings.nvjitlink")
        self.links: list = []

    def version(self):
        return (13, 5)

    def create(self, n, opts):
        assert n == len(opts)
        self.links.append({"options": list(opts), "inputs": []})
        return len(self.links) - 1

    def add_data(self, handle, kind, data, size, name):
        assert kind == self.InputType.PTX and size == len(data)
        self.links[handle]["inputs"].append((name, data.decode()))

    def complete(self, handle):
        names = []
        for _, ptx in self.links[handle]["inputs"]:
            names += asm_mod.re.findall(r"\.entry\s+(\w+)", ptx)
        self.links[handle]["cubin"] = ("CUBIN:" + ",".join(names)).encode()
        self.links[handle]["log"] = "".join(REPORT.format(name=n, regs=10 + i)
                                            for i, n in enumerate(names))

    def get_linked_cubin_size(self, handle):
        return len(self.links[handle]["cubin"])

    def get_linked_cubin(self, handle, buf):
        buf[:] = self.links[handle]["cubin"]

    def get_info_log_size(self, handle):
        return len(self.links[handle]["log"]) + 1

    def get_info_log(self, handle, buf):
        buf[:] = self.links[handle]["log"].encode() + b"\0"

    def get_error_log_size(self, handle):
        return 1

    def get_error_log(self, handle, buf):
        buf[:] = b"\0"

    def destroy(self, handle):
        self.links[handle]["destroyed"] = True


@pytest.fixture
def fake_nvjitlink(monkeypatch):
    import cuda.bindings

    fake = FakeNvJitLink()
    monkeypatch.setattr(cuda.bindings, "nvjitlink", fake, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvjitlink", fake)
    return fake


def test_build_options_name_the_assemblers():
    assert BuildOptions().assembler == "ptxas"
    with pytest.raises(ValueError, match="assembler must be one of"):
        BuildOptions(assembler="nvcc")


def test_nvjitlink_options_pass_ptxas_flags_through():
    assert asm_mod.nvjitlink_options("sm_90a", ("-maxrregcount=64",)) == [
        "-arch=sm_90a", "-O3", "-verbose", "-Xptxas=-maxrregcount=64"]


def test_every_kernel_of_a_candidate_is_assembled_in_one_link(fake_nvjitlink):
    mod, _ = samples.two_stage(1024, 256)
    funcs = list(mod.kernels())
    out = compile_kernels(funcs, "sm_80", stop_after="cubin", assembler="nvjitlink",
                          ptxas_flags=("-maxrregcount=64",), cache=None)
    assert len(fake_nvjitlink.links) == 1
    link = fake_nvjitlink.links[0]
    assert link["options"] == ["-arch=sm_80", "-O3", "-verbose", "-Xptxas=-maxrregcount=64"]
    assert len(link["inputs"]) == 2 and link["destroyed"]
    regs = {}
    for f in funcs:
        k = out[f.name]
        assert k.assembler == "nvjitlink" and k.cubin == link["cubin"]
        assert k.symbol.encode() in k.cubin
        assert k.resources.source == "nvjitlink"
        regs[f.name] = k.resources.registers
    assert sorted(regs.values()) == [10, 11]


def test_the_builder_assembles_with_nvjitlink_when_asked(fake_nvjitlink, monkeypatch):
    monkeypatch.setattr(asm_mod, "nvjitlink_available", lambda: True)
    assert build_assembler("nvjitlink") == "nvjitlink"
    from ptxforge import ops, te
    from ptxforge.measure import MeasureInput
    from ptxforge.measure.build import build_candidate
    from ptxforge.measure.result import TaskSpec
    from ptxforge.ops.schedules import default_schedule

    x = te.placeholder((8, 64), name="x")
    y = ops.nn.softmax(x, axis=-1)  # three kernels
    task = TaskSpec.from_tensors([x, y], target="cuda -arch=sm_80")
    pipe = default_schedule(y).pipeline.text
    res = build_candidate(MeasureInput(task, pipe), BuildOptions(
        target_sm="sm_80", compile_to="cubin", assembler="nvjitlink", ptxas_flags=("-O3",)))
    assert res.error_no == 0, res.error_msg
    assert len(fake_nvjitlink.links) == 1  # one link for the candidate's kernels
    assert len(fake_nvjitlink.links[0]["inputs"]) == len(res.artifact.kernels) == 3
    assert all(k.assembler == "nvjitlink" for k in res.artifact.kernels.values())
    assert res.stage_seconds["ptxas"] > 0  # the assembly stage, whichever assembler


def test_a_missing_nvjitlink_is_a_device_compile_error(monkeypatch):
    monkeypatch.setattr(asm_mod, "nvjitlink_available", lambda: False)
    from ptxforge.measure import MeasureErrorNo, MeasureInput
    from ptxforge.measure.build import build_candidate

    mod_task, pipe = _add_one()
    res = build_candidate(MeasureInput(mod_task, pipe), BuildOptions(
        target_sm="sm_80", compile_to="cubin", assembler="nvjitlink"))
    assert res.error_no == MeasureErrorNo.COMPILE_DEVICE
    assert "nvJitLink cannot be loaded" in res.error_msg


def _add_one():
    from ptxforge import te
    from ptxforge.measure.result import TaskSpec

    a = te.placeholder((256,), name="a")
    b = te.compute((256,), lambda i: a[i] + 1.0, name="b")
    task = TaskSpec.from_tensors([a, b], target="cuda -arch=sm_80")
    return task, ('split(b.i, factors=[64]), bind(b.i.outer, "blockIdx.x"), '
                  'bind(b.i.inner, "threadIdx.x")')


def test_the_library_assembles_a_module_when_it_is_here():
    if not asm_mod.nvjitlink_available():
        pytest.skip("libnvJitLink is not here (LD_LIBRARY_PATH)")
    mod, _ = samples.two_stage(1024, 256)
    out = compile_kernels(list(mod.kernels()), "sm_90a", stop_after="cubin",
                          assembler="nvjitlink", cache=None)
    for k in out.values():
        assert k.cubin[:4] == b"\x7fELF" and k.resources.registers > 0
    if asm_mod.find_ptxas() is not None:
        ref = compile_kernels(list(mod.kernels()), "sm_90a", stop_after="cubin",
                              assembler="ptxas", cache=None)
        for name in out:
            assert ref[name].cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
def test_nvjitlink_and_ptxas_cubins_compute_the_same(tmp_path):
    """On a GPU with both assemblers: a candidate assembled either way loads and computes
    the same result."""
    import numpy as np

    if not asm_mod.nvjitlink_available() or asm_mod.find_ptxas() is None:
        pytest.skip("needs both nvJitLink and ptxas")
    dev = ptxforge.cuda(0)
    mod, ref = samples.two_stage(4096, 256)
    a = np.random.default_rng(0).random(4096, dtype=np.float32)
    b = np.random.default_rng(1).random(4096, dtype=np.float32)
    got = {}
    for asm in ("ptxas", "nvjitlink"):
        from ptxforge.backend_ptx import array, compile_module, empty

        loaded = compile_module(mod, dev.sm, assembler=asm, cache=False).load(dev)
        c = empty(4096, "float32", dev)
        loaded(array(a, dev), array(b, dev), c)
        got[asm] = c.numpy()
    np.testing.assert_allclose(got["ptxas"], ref(a, b), rtol=1e-5)
    np.testing.assert_allclose(got["nvjitlink"], got["ptxas"], rtol=1e-6)
