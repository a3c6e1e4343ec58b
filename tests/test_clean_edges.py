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
import textwrap
import time

import pytest
from ptxforge.backend_ptx import KernelCache, compile_kernel, find_ptxas, samples
from ptxforge.backend_ptx.compile import forget_compiled

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
    # the process reuses what it compiled by LLVM IR: the disk entries are what this test
    # plants, so the process forgets before each compile (forget_compiled)
    forget_compiled()
    with pytest.warns(RuntimeWarning, match="do not match"):
        again = compile_kernel(small, cache=KernelCache(str(tmp_path)))
    assert not again.cache_hit and again.launch == a.launch
    # the rebuilt entry replaced the bad one
    forget_compiled()
    assert compile_kernel(small, cache=KernelCache(str(tmp_path))).cache_hit
    # a flipped byte of the cubin, and an entry of the wrong shape
    data = json.load(open(by_block[128]))
    c, mid = data["cubin"], len(data["cubin"]) // 2
    data["cubin"] = c[:mid] + ("B" if c[mid] == "A" else "A") + c[mid + 1:]
    json.dump(data, open(by_block[128], "w"))
    forget_compiled()
    with pytest.warns(RuntimeWarning, match="do not match"):
        assert not compile_kernel(big, cache=KernelCache(str(tmp_path))).cache_hit
    from ptxforge.backend_ptx import cache as kc

    key = os.path.basename(by_block[128])[:-5]
    bad = {"format": kc.FORMAT_VERSION, "key": key, "launch": 5}
    json.dump({**bad, "digest": kc._digest(bad)}, open(by_block[128], "w"))
    forget_compiled()
    with pytest.warns(RuntimeWarning, match="malformed"):
        got = compile_kernel(big, cache=KernelCache(str(tmp_path)))
    assert not got.cache_hit and got.cubin == b.cubin


# -- signals ----------------------------------------------------------------------------------

# A signal ignored or blocked in the test process (a library of an earlier test in the same
# worker may have left it so) is inherited across exec: the child would never see the
# SIGINT these tests send and would run on. The children start with both signals unblocked
# and Ctrl-C raising KeyboardInterrupt, whatever the test process's state.
_CLEAN_SIGNALS = ("import signal; "
                  "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); "
                  "signal.signal(signal.SIGINT, signal.default_int_handler)\n")


def _cli_child(*args) -> list:
    """The command line of ``python -m ptxforge ARGS`` started with clean signals."""
    code = (_CLEAN_SIGNALS + "import runpy\n"
            "runpy.run_module('ptxforge', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", code, *args]


def _signal_state(pid: int) -> str:
    """What a child that did not stop looked like: its signal masks and threads (from
    /proc), and its children, for the failure message."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = [ln.strip() for ln in f if ln.startswith(("Sig", "ShdPnd", "Threads",
                                                             "State"))]
    except OSError as e:
        return f"no /proc status: {e}"
    kids = subprocess.run(["ps", "-o", "pid,stat,wchan:24,etime,args", "--ppid", str(pid)],
                          capture_output=True, text=True).stdout
    return "; ".join(lines) + "\nchildren:\n" + kids


def test_children_start_with_sigint_unblocked_and_handled(tmp_path):
    # the launcher undoes an inherited block and an inherited SIG_IGN
    code = ("import signal, os; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); "
            "signal.signal(signal.SIGINT, signal.SIG_IGN); import subprocess, sys; "
            f"print(subprocess.run([sys.executable, '-c', {_CLEAN_SIGNALS!r} + "
            "'import signal; print(signal.getsignal(signal.SIGINT) is "
            "signal.default_int_handler, signal.SIGINT in signal.pthread_sigmask("
            "signal.SIG_BLOCK, []))'], capture_output=True, text=True).stdout.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "True False", out.stdout + out.stderr


def test_the_cli_unblocks_sigint_it_inherited():
    code = ("import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); "
            "from ptxforge.cli.main import unblock_stop_signals; "
            "print(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])); "
            "unblock_stop_signals(); "
            "print(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr


# -- temp folders -----------------------------------------------------------------------------

_BUILD_FOREVER = _CLEAN_SIGNALS + textwrap.dedent("""
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
    except subprocess.TimeoutExpired:
        pytest.fail(f"the builder went on after signal {int(sig)}: {_signal_state(p.pid)}")
    finally:
        p.kill()
    left = [x for x in os.listdir(tmp_path) if x.startswith("ptxforge-")]
    assert p.returncode != 0 and not left, left


# -- the CLI ----------------------------------------------------------------------------------


def _cli(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT,
                                                       **(env or {})}, **kw)


def test_cli_user_errors_are_one_clear_line_and_debug_shows_the_traceback(tmp_path):
    missing = tmp_path / "missing.log"
    p = _cli("records", "list", str(missing))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "--debug" in lines[0], p.stderr
    p = _cli("--debug", "records", "list", str(missing))
    assert p.returncode != 0 and "Traceback" in p.stderr and "FileNotFoundError" in p.stderr
    # distill onto its own input is refused, the log left as it was
    from ptxforge.measure import save_records

    from .test_records import _pair

    log = tmp_path / "t.log"
    save_records(log, *zip(_pair("a", 1e-3), _pair("b", 2e-3)))
    before = log.read_bytes()
    p = _cli("records", "distill", str(log), "-o", str(log))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "overwrite" in p.stderr
    assert log.read_bytes() == before


def test_cli_two_runs_on_one_log_are_refused(tmp_path):
    log = tmp_path / "t.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ptxforge.measure import RecordWriter; "
         f"w = RecordWriter({str(log)!r}); print('holding', flush=True); time.sleep(60)"],
        env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().startswith("holding")
        p = _cli("tune-op", "dense", "--trials", "4", "--per-round", "2", "--runner", "sim",
                 "--model", "random", "--log", str(log))
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "another process" in p.stderr and str(log) in p.stderr


@pytest.mark.slow
def test_cli_ctrl_c_says_how_many_records_are_saved_where(tmp_path):
    from ptxforge.measure import load_records

    log = tmp_path / "t.json"
    p = subprocess.Popen(_cli_child("tune-op", "dense", "--trials", "2000", "--per-round", "4",
                                    "--runner", "sim", "--model", "random", "--log", str(log)),
                         env={**os.environ, "PYTHONPATH": ROOT},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not (log.exists() and len(log.read_text().splitlines()) >= 4):
        if p.poll() is not None or time.monotonic() >= deadline:
            state = _signal_state(p.pid)
            p.kill()
            pytest.fail(f"no 4 records within 90 s: {state}\n{p.communicate()}")
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        state = _signal_state(p.pid)
        p.kill()
        pytest.fail(f"the tuner went on after SIGINT: {state}\n{p.communicate()}")
    n = len(load_records(log))
    assert p.returncode == 130 and "Traceback" not in err, err
    assert f"{n} records of this run are saved in {log}" in out + err, out + err


@pytest.mark.slow
def test_sigterm_stops_the_tuner_and_leaves_no_temp_folders(tmp_path):
    # the builder's folders are made from the tuner's measure thread, where no handler can
    # be installed: the builder installs it when it is made, in the main thread
    log = tmp_path / "t.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen(_cli_child("tune-op", "dense", "--trials", "2000", "--per-round", "4",
                                    "--runner", "sim", "--model", "random", "--log", str(log)),
                         env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not (log.exists() and len(log.read_text().splitlines()) >= 4):
        if p.poll() is not None or time.monotonic() >= deadline:
            p.kill()
            pytest.fail(f"no 4 records within 90 s: {p.communicate()}")
        time.sleep(0.1)
    assert [x for x in os.listdir(tmp) if x.startswith("ptxforge-")]  # the builder's scratch
    p.send_signal(signal.SIGTERM)
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        state = _signal_state(p.pid)
        p.kill()
        pytest.fail(f"the tuner went on after SIGTERM: {state}")
    left = [x for x in os.listdir(tmp) if x.startswith("ptxforge-")]
    assert p.returncode == -signal.SIGTERM and not left, (p.returncode, left)
