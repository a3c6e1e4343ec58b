"""Clean edges: kernel-cache entries checked against their key, temp folders removed on
SIGINT and SIGTERM, one clear CLI line per user error, ONNX import failures as
``OnnxImportError`` naming file and node."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from ptxforge.backend_ptx import KernelCache, compile_kernel, find_ptxas, samples

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_ptxas = pytest.mark.skipif(find_ptxas() is None,
                                 reason="ptxas (CUDA toolkit) is not installed here")


# -- kernel cache -----------------------------------------------------------------------------


@needs_ptxas
def test_a_cache_entry_that_does_not_match_its_key_is_rebuilt(tmp_path):
    small = samples.vector_add(512, 64)[0].kernels()[0]
    big = samples.vector_add(512, 128)[0].kernels()[0]
    cache = KernelCache(str(tmp_path))
    a = compile_kernel(small, cache=cache)
    b = compile_kernel(big, cache=cache)
    files = sorted(glob.glob(str(tmp_path / "*" / "*.json")))
    assert len(files) == 2
    by_block = {json.load(open(f))["launch"]["block"][0]: f for f in files}
    # the entry of one kernel copied over the other's: a stale or planted file
    shutil.copy(by_block[128], by_block[64])
    with pytest.warns(RuntimeWarning, match="do not match"):
        again = compile_kernel(small, cache=KernelCache(str(tmp_path)))
    assert not again.cache_hit and again.launch == a.launch
    # the rebuilt entry replaced the bad one
    assert compile_kernel(small, cache=KernelCache(str(tmp_path))).cache_hit
    # a flipped byte of the cubin, and an entry of the wrong shape
    data = json.load(open(by_block[128]))
    c, mid = data["cubin"], len(data["cubin"]) // 2
    data["cubin"] = c[:mid] + ("B" if c[mid] == "A" else "A") + c[mid + 1:]
    json.dump(data, open(by_block[128], "w"))
    with pytest.warns(RuntimeWarning, match="do not match"):
        assert not compile_kernel(big, cache=KernelCache(str(tmp_path))).cache_hit
    from ptxforge.backend_ptx import cache as kc

    key = os.path.basename(by_block[128])[:-5]
    bad = {"format": kc.FORMAT_VERSION, "key": key, "launch": 5}
    json.dump({**bad, "digest": kc._digest(bad)}, open(by_block[128], "w"))
    with pytest.warns(RuntimeWarning, match="malformed"):
        got = compile_kernel(big, cache=KernelCache(str(tmp_path)))
    assert not got.cache_hit and got.cubin == b.cubin


# -- temp folders -----------------------------------------------------------------------------

_BUILD_FOREVER = textwrap.dedent("""
    import sys
    from ptxforge import te
    from ptxforge.measure import LocalBuilder, MeasureInput, TaskSpec
    a = te.placeholder((256,), name="A")
    b = te.compute((256,), lambda i: a[i] + 1.0, name="B")
    task = TaskSpec.from_tensors([a, b], "add_one")
    pipes = ['split(B.i, factors=[%d]), bind(B.i.outer, "blockIdx.x"), '
             'bind(B.i.inner, "threadIdx.x")' % f for f in (32, 64, 128, 256)]
    builder = LocalBuilder(n_parallel=2)
    n = 0
    while True:
        builder.build([MeasureInput(task, p) for p in pipes])
        n += 1
        print("built", n, flush=True)
""")


@needs_ptxas
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_temp_folders_are_removed_on_sigint_and_sigterm(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path),
           "PTXFORGE_KERNEL_CACHE": ""}
    p = subprocess.Popen([sys.executable, "-c", _BUILD_FOREVER], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("built"), p.stderr.read()
    time.sleep(0.3)  # builds in flight: the workers hold assembler temp folders
    p.send_signal(sig)
    try:
        p.wait(timeout=30)
    finally:
        p.kill()
    left = [x for x in os.listdir(tmp_path) if x.startswith("ptxforge-")]
    assert p.returncode != 0 and not left, left
