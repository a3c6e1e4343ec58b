"""Record logs under abuse, round two: a log replaced while a tuner writes it, temporary
files created exclusively, a full disk, records too large to read back, devices given as
logs, terminal escapes in task names, and TVM's ``auto_scheduler.ComputeDAG``."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from ptxforge import te
from ptxforge.measure import (
    MeasureInput,
    MeasureResult,
    RecordWriter,
    TaskSpec,
    distill,
    load_records,
    save_records,
)
from ptxforge.measure import record as rec
from ptxforge.measure.record import RecordFileBusy, RecordTooLarge, RecordWriteError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _task(name: str = "add16") -> TaskSpec:
    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] + 1.0, name="B")
    return TaskSpec.from_tensors([a, b], "add16", name=name)


def _pair(pipe: str, cost: float = 1e-3, name: str = "add16", msg: str = ""):
    return (MeasureInput(_task(name), pipe, {"k": pipe}),
            MeasureResult((cost,), 0, msg, 1.0, 10.0))


# -- 7. a log replaced while a tuner writes it -----------------------------------------------


def test_a_log_replaced_by_distill_and_mv_gets_the_later_records_and_stays_locked(tmp_path):
    path = tmp_path / "t.log"
    best = tmp_path / "t.log.best"
    w = RecordWriter(path)
    w.on_result(*_pair("p0", 2e-3))
    w.on_result(*_pair("p1", 1e-3))
    distill(path, best)
    os.replace(best, path)  # records distill LOG -o LOG.best && mv LOG.best LOG
    with pytest.warns(RuntimeWarning, match="replaced or deleted"):
        w.on_result(*_pair("p2", 3e-3))
    w(*zip(_pair("p3", 4e-3)))
    assert [i.pipeline_text for i, _ in load_records(path)] == ["p1", "p2", "p3"]
    # the new file is locked: a second process is refused
    code = textwrap.dedent(f"""
        from ptxforge.measure import RecordWriter
        from ptxforge.measure.record import RecordFileBusy
        try:
            RecordWriter({str(path)!r})
        except RecordFileBusy as e:
            print("BUSY")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert "BUSY" in out.stdout, out.stdout + out.stderr
    w.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # closing gave the lock up
    finally:
        os.close(fd)


def test_a_replaced_log_another_process_took_stops_the_writer(tmp_path):
    path = tmp_path / "t.log"
    w = RecordWriter(path)
    w.on_result(*_pair("p0"))
    new = tmp_path / "new.log"
    new.write_text("")
    os.replace(new, path)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "a second tuner" holds the new file
    try:
        with pytest.raises(RecordFileBusy):
            w.on_result(*_pair("p1"))
    finally:
        os.close(fd)
    w.close()


def test_a_deleted_log_is_created_again(tmp_path):
    path = tmp_path / "t.log"
    with RecordWriter(path) as w:
        w.on_result(*_pair("p0"))
        path.unlink()
        with pytest.warns(RuntimeWarning, match="replaced or deleted"):
            w.on_result(*_pair("p1"))
    assert [i.pipeline_text for i, _ in load_records(path)] == ["p1"]


# -- 9. temporary files ------------------------------------------------------------------------


def test_distill_does_not_follow_a_symlink_at_a_fixed_temporary_name(tmp_path):
    path = tmp_path / "t.log"
    save_records(path, *zip(_pair("a", 1e-3), _pair("b", 2e-3)))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "best.log"
    os.symlink(victim, str(out) + ".tmp")
    assert distill(path, out) == 1
    assert victim.read_text() == "keep"
    assert [i.pipeline_text for i, _ in load_records(out)] == ["a"]
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["best.log", "best.log.tmp", "t.log", "victim"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)


def test_distill_to_a_folder_is_refused_and_leaves_nothing(tmp_path):
    path = tmp_path / "t.log"
    save_records(path, *zip(_pair("a")))
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        distill(path, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.log"]
    assert list(folder.iterdir()) == []


def test_export_library_does_not_follow_a_symlink_at_a_fixed_temporary_name(tmp_path):
    import ptxforge

    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] + 1.0, name="B")
    s = te.create_schedule(b.op)
    s[b].bind(s[b].op.axis[0], te.thread_axis("threadIdx.x"))
    f = ptxforge.build(s, [a, b], target="sim")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "f.ptxf"
    os.symlink(victim, str(out) + ".tmp")
    f.export_library(str(out))
    assert victim.read_text() == "keep"
    assert ptxforge.runtime.load_module(str(out)).entry_name == f.entry_name
    with pytest.raises(IsADirectoryError):
        f.export_library(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.ptxf", "f.ptxf.tmp", "victim"]


# -- 10. smaller ones --------------------------------------------------------------------------


def test_a_full_disk_is_an_os_error_saying_how_many_records_are_saved(tmp_path, monkeypatch):
    path = tmp_path / "t.log"
    w = RecordWriter(path)
    w.on_result(*_pair("p0"))
    w.on_result(*_pair("p1"))

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rec._Log, "write", full)
    with pytest.raises(RecordWriteError, match="2 records of this run are saved") as e:
        w.on_result(*_pair("p2"))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    from ptxforge.cli.main import error_line

    line = error_line(e.value)
    assert line.startswith("error: ") and "No space left" in line and str(path) in line
    monkeypatch.undo()
    w.close()


def test_a_failed_record_write_reaches_the_tuner_as_that_error(tmp_path, monkeypatch):
    from ptxforge.measure.stream import MeasureStream

    from .test_autosched_search import FakeBuilder
    from .test_measure_stream import TimedRunner, inputs

    w = RecordWriter(tmp_path / "t.log")

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rec._Log, "write", full)
    with MeasureStream(FakeBuilder(), TimedRunner()) as stream:
        fut = stream.submit(inputs([1e-3, 2e-3]), on_result=w.on_result)
        with pytest.raises(RecordWriteError, match="0 records of this run are saved"):
            fut.result(timeout=60)
    monkeypatch.undo()
    w.close()


def test_a_record_too_large_to_read_back_is_not_written(tmp_path):
    path = tmp_path / "t.log"
    huge = _pair("p1", msg="x" * rec.MAX_LINE_BYTES)
    with pytest.raises(RecordTooLarge, match="over the"):
        rec.encode(*huge)
    with RecordWriter(path) as w:
        w.on_result(*_pair("p0"))
        with pytest.warns(RuntimeWarning, match="not writing a record"):
            w.on_result(*huge)
        w(*zip(huge))  # streamed already (and refused): the round does not repeat it
        with pytest.warns(RuntimeWarning, match="not writing a record"):
            w(*zip(_pair("p1", msg="x" * rec.MAX_LINE_BYTES)))
        w.on_result(*_pair("p2"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no line is skipped: none was written
        assert [i.pipeline_text for i, _ in load_records(path)] == ["p0", "p2"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_not_read_as_a_log():
    with pytest.raises(ValueError, match="not a record file"):
        load_records("/dev/zero")
    from ptxforge.cli.main import main

    assert main(["records", "list", "/dev/zero"]) == 1


def test_records_list_and_best_escape_control_characters(tmp_path, capsys):
    from ptxforge.cli.main import main

    path = tmp_path / "t.log"
    evil = "conv\x1b[2J\x1b]0;owned\x07\r\u202eevil"
    save_records(path, *zip(_pair("split(B.i, factors=[4])\x1b[31m", name=evil)))
    for action in ("list", "best"):
        assert main(["records", action, str(path)]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
        assert "\u202e" not in out and "\\x1b[2J" in out


def test_plot_names_the_file_it_writes_and_refuses_a_folder(tmp_path):
    from ptxforge.cli.plot import plot_path

    assert plot_path(str(tmp_path / "curve")) == str(tmp_path / "curve") + ".png"
    assert plot_path(str(tmp_path / "c.svg")) == str(tmp_path / "c.svg")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        plot_path(str(tmp_path))


def test_tvm_auto_scheduler_compute_dag_from_tensors_and_from_a_schedule():
    from ptxforge.tvm import auto_scheduler
    from ptxforge.tvm import te as tte

    A = tte.placeholder((64, 32), name="A")
    k = tte.reduce_axis((0, 32), name="k")
    B = tte.compute((64,), lambda i: tte.sum(A[i, k] * 2.0, axis=k), name="B")
    dag = auto_scheduler.ComputeDAG([A, B])
    assert dag.flop_ct == 64 * 32 * 2
    assert "B(i)" in str(dag)
    s = tte.create_schedule(B.op)
    assert auto_scheduler.ComputeDAG(s).workload_key() == dag.workload_key()
    sch, args = dag.apply_steps_from_state(
        'split(B.i, factors=[32]), bind(B.i.outer, "blockIdx.x"), '
        'bind(B.i.inner, "threadIdx.x")')
    assert len(args) == 2 and "threadIdx.x" in sch.pipeline.text
    json.dumps(dag.workload_key())


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_opt_reads_a_bounded_amount_of_ir_text(tmp_path, monkeypatch, capsys):
    from ptxforge.cli import opt
    from ptxforge.cli.main import main

    monkeypatch.setattr(opt, "MAX_IR_BYTES", 1 << 20)
    assert main(["opt", "/dev/zero", "-p", "simplify()"]) == 1
    assert "more than 1048576 bytes of IR text" in capsys.readouterr().err
    bad = tmp_path / "bad.ir"
    bad.write_bytes(b"\xff\xfe")
    assert main(["opt", str(bad), "-p", "simplify()"]) == 1
    assert f"{bad}: not UTF-8 text" in capsys.readouterr().err
