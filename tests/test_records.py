"""Record files under abuse: durable appends, one writer per log, loaders that skip any bad
line with a warning naming file and line, and one rule for the best record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from ptxforge import te
from ptxforge.measure import (
    MeasureInput,
    MeasureResult,
    RecordWriter,
    TaskSpec,
    best_records,
    distill,
    load_records,
    save_records,
)
from ptxforge.measure import record as rec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _task() -> TaskSpec:
    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] + 1.0, name="B")
    return TaskSpec.from_tensors([a, b], "add16")


def _pair(pipe: str, cost: float = 1e-3, estimated: bool = False, error_no: int = 0):
    return (MeasureInput(_task(), pipe, {"k": pipe}),
            MeasureResult((cost,), error_no, "", 1.0, 10.0, estimated=estimated))


def _line(pipe: str, **kw) -> str:
    return rec.encode(*_pair(pipe, **kw))


# -- durable appends --------------------------------------------------------------------------


def test_each_result_is_on_disk_as_it_arrives_and_the_round_call_does_not_repeat_it(
        tmp_path, monkeypatch):
    path = tmp_path / "t.log"
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    w = RecordWriter(path)
    pairs = [_pair(f"p{i}") for i in range(3)]
    w.on_result(*pairs[0])
    assert len(path.read_text().splitlines()) == 1  # on disk before the round ends
    w.on_result(*pairs[1])
    assert len(path.read_text().splitlines()) == 2
    w([p[0] for p in pairs], [p[1] for p in pairs])  # the round: writes only what is new
    assert [i.pipeline_text for i, _ in load_records(path)] == ["p0", "p1", "p2"]
    assert synced, "a round must end with an fsync"
    w.close()


def test_a_truncated_last_line_is_terminated_before_appending(tmp_path):
    path = tmp_path / "t.log"
    path.write_text(_line("p0") + "\n" + _line("p1")[:40])  # the disk filled up mid-line
    with pytest.warns(RuntimeWarning, match="truncated"):
        save_records(path, *zip(*[_pair("p2")]))
    with pytest.warns(RuntimeWarning, match=r"t\.log:2: skipping"):
        loaded = load_records(path)
    assert [i.pipeline_text for i, _ in loaded] == ["p0", "p2"]


def test_a_second_process_writing_the_same_log_is_refused(tmp_path):
    path = tmp_path / "t.log"
    w = RecordWriter(path)
    w.on_result(*_pair("p0"))
    code = textwrap.dedent(f"""
        from ptxforge.measure import RecordWriter
        from ptxforge.measure.record import RecordFileBusy
        try:
            RecordWriter({str(path)!r})
        except RecordFileBusy as e:
            print("BUSY", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert "BUSY" in out.stdout and str(path) in out.stdout, out.stdout + out.stderr
    # the same process may hold several writers of one log; closing them frees it
    w2 = RecordWriter(path)
    w2.on_result(*_pair("p1"))
    w.close()
    w2.close()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert "BUSY" not in out.stdout and out.returncode == 0, out.stdout + out.stderr
    assert len(load_records(path)) == 2


# -- loaders ----------------------------------------------------------------------------------


def _bad_lines() -> list[bytes]:
    good = json.loads(_line("x"))

    def variant(**change) -> bytes:
        d = json.loads(json.dumps(good))
        for k, v in change.items():
            cur = d
            parts = k.split("__")
            for p in parts[:-1]:
                cur = cur[p]
            cur[parts[-1]] = v
        return json.dumps(d).encode()

    return [
        b'{"v": 1, "pipeline": "\xff\xfe"}',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # deeper than any parser recursion
        variant(result__costs="123"),  # a string is not a list of costs
        variant(result__costs=[0.0]),
        variant(result__costs=[-1e-3]),
        variant(result__costs=[]),
        b'{"v":1,"task":{"key":"k","target":"cuda"},"pipeline":"p","result":{"costs":[NaN],'
        b'"error_no":0}}',
        variant(result__costs=[1e-3, "fast"]),
        variant(task=["not", "an", "object"]),
        variant(task__key=5),
        variant(task__flop="many"),
        variant(pipeline=42),
        variant(payload=[1, 2]),
        variant(result__error_no="0"),
        variant(result__estimated="yes"),
        variant(result=[1]),
        b"null",
        b"7",
    ]


def test_loaders_skip_every_bad_line_with_a_warning_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.log"
    bad = _bad_lines()
    with open(path, "wb") as f:
        f.write(_line("first").encode() + b"\n")
        for b in bad:
            f.write(b + b"\n")
        f.write(_line("last").encode() + b"\n")
    with pytest.warns(RuntimeWarning) as caught:
        loaded = load_records(path)
    assert [i.pipeline_text for i, _ in loaded] == ["first", "last"]
    messages = [str(w.message) for w in caught]
    for n in range(2, 2 + len(bad)):
        assert any(m.startswith(f"{path}:{n}: skipping") for m in messages), (n, messages)
    from ptxforge.autosched.records import load_best_record
    from ptxforge.autotvm.record import load_from_file

    with pytest.warns(RuntimeWarning):
        assert load_best_record(str(path))[0].pipeline_text in ("first", "last")
        assert list(load_from_file(path)) == []


def test_one_best_rule_a_measurement_beats_an_estimate_everywhere(tmp_path):
    from ptxforge.autosched import ApplyHistoryBest
    from ptxforge.autosched.records import load_best_record

    path = tmp_path / "t.log"
    save_records(path, *zip(_pair("estimated", 1e-6, estimated=True), _pair("measured", 1e-3),
                            _pair("failed", 1e-9, error_no=4)))
    assert load_best_record(str(path))[0].pipeline_text == "measured"
    assert best_records(path)[("add16", "cuda")][0].pipeline_text == "measured"
    assert ApplyHistoryBest(str(path)).query("add16")[0].pipeline_text == "measured"
    ranked = rec.ranked_records(load_records(path))
    assert [i.pipeline_text for i, _ in ranked[("add16", "cuda")]] == ["measured", "estimated"]


def test_distill_refuses_to_overwrite_its_input(tmp_path):
    path = tmp_path / "t.log"
    save_records(path, *zip(_pair("a", 1e-3), _pair("b", 2e-3)))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="overwrite"):
        distill(path, path)
    link = tmp_path / "link.log"
    os.symlink(path, link)
    with pytest.raises(ValueError, match="overwrite"):
        distill(path, link)
    assert path.read_bytes() == before


def test_a_cost_model_reading_an_absurd_workload_skips_it_in_bounded_time(tmp_path):
    import time

    import ptxforge.cli.tune  # noqa: F401 - registers dense_bias
    from ptxforge import autosched
    from ptxforge.autosched.state import PAYLOAD_KIND

    path = tmp_path / "t.log"
    key = json.dumps(["dense_bias", 1, 3_000_000_000, 3_000_000_000])
    task = TaskSpec(key, "cuda", "", 1.0, "dense_bias")
    save_records(path, [MeasureInput(task, "p", {"kind": PAYLOAD_KIND, "sketch": "s",
                                                 "state": {}})],
                 [MeasureResult((1e-3,), 0, "", 1.0, 1.0)])
    t0 = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="tilings"):
        autosched.XGBModel().update_from_file(str(path))
    assert time.perf_counter() - t0 < 5.0


def _autotvm_line(autotvm) -> str:
    d = json.loads(_line("p"))
    d["payload"] = {"autotvm": autotvm}
    return json.dumps(d)


def test_malformed_autotvm_payloads_are_skipped_with_a_warning(tmp_path):
    from ptxforge.autotvm.record import load_from_file

    good_cfg = {"index": 0, "code_hash": None, "entity": []}
    bad = [
        {"args": [], "config": good_cfg},  # no template
        {"template": "t", "config": good_cfg},  # no args
        {"template": "t", "args": 5, "config": good_cfg},
        {"template": 7, "args": [], "config": good_cfg},
        {"template": "t", "args": [], "config": {"index": 0}},  # no entity
        {"template": "t", "args": [], "config": {"index": "x", "entity": []}},
        {"template": "t", "args": [], "config": {"index": 0, "entity": [["a", "zz", 1]]}},
        {"template": "t", "args": [], "config": {"index": 0, "entity": [5]}},
        {"template": "t", "args": [], "config": []},
        "not an object",
    ]
    path = tmp_path / "t.log"
    lines = [_autotvm_line({"template": "t", "args": [1], "config": good_cfg})]
    lines += [_autotvm_line(b) for b in bad]
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(RuntimeWarning) as caught:
        got = list(load_from_file(path))
    assert len(got) == 1 and got[0][0].task.name == "t"
    messages = [str(w.message) for w in caught]
    for n in range(2, 2 + len(bad)):
        assert any(m.startswith(f"{path}:{n}: skipping") for m in messages), (n, messages)


def test_autotvm_falls_back_to_the_next_best_config_when_the_best_no_longer_fits(tmp_path):
    from ptxforge import autotvm

    @autotvm.template("test/records_fallback")
    def knob_value(n):
        cfg = autotvm.get_config()
        return n * cfg["x"].val  # a config without knob "x" no longer fits

    def line(entity, cost, estimated=False):
        d = json.loads(_line("p", cost=cost, estimated=estimated))
        d["payload"] = {"autotvm": {"template": "test/records_fallback", "args": [3],
                                    "config": {"index": 0, "code_hash": None,
                                               "entity": entity}}}
        return json.dumps(d)

    path = tmp_path / "t.log"
    path.write_text("\n".join([line([["y", "ot", 9]], 1e-6),  # best, no longer fits
                               line([["x", "ot", 5]], 2e-3),
                               line([["x", "ot", 7]], 1e-3),
                               line([["x", "ot", 11]], 1e-9, estimated=True)]) + "\n")
    with autotvm.apply_history_best(str(path)):
        with pytest.warns(RuntimeWarning, match="next best"):
            assert knob_value(3) == 21
    with autotvm.task.ApplyConfig(autotvm.space.ConfigEntity.from_json_dict(
            {"index": 0, "entity": [["y", "ot", 1]]})):
        with pytest.raises(KeyError):  # while tuning a config that does not fit is an error
            knob_value(3)


def test_autosched_falls_back_to_the_next_best_record_when_the_best_no_longer_applies(
        tmp_path):
    from ptxforge import autosched

    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="B")

    class Func:
        workload_key = "fallback64"
        name = "fallback64"

        @staticmethod
        def build_tensors():
            return [a, b]

    task = TaskSpec.from_tensors([a, b], "fallback64")
    good = ('split(B.i, factors=[32]), bind(B.i.outer, "blockIdx.x"), '
            'bind(B.i.inner, "threadIdx.x")')
    pairs = [(MeasureInput(task, "split(B.nosuchloop, factors=[8])"),
              MeasureResult((1e-6,), 0, "", 1.0, 1.0)),
             (MeasureInput(task, good), MeasureResult((1e-3,), 0, "", 1.0, 1.0))]
    path = tmp_path / "t.log"
    save_records(path, *zip(*pairs))
    ctx = autosched.ApplyHistoryBest(str(path))
    with pytest.warns(RuntimeWarning, match="next best"):
        got = ctx.schedule_fn(Func)
    assert got is not None and ctx.applied["fallback64"] == good


def test_a_writer_of_a_log_deleted_meanwhile_writes_the_new_file(tmp_path):
    path = tmp_path / "t.log"
    old = RecordWriter(path)
    old.on_result(*_pair("p0"))
    path.unlink()
    new = RecordWriter(path)
    new.on_result(*_pair("p1"))
    assert [i.pipeline_text for i, _ in load_records(path)] == ["p1"]
    old.close()
    new.close()


def test_apply_best_falls_back_to_the_next_best_record(tmp_path):
    from ptxforge import autosched

    @autosched.register_workload(override=True)
    def records_add64():
        a = te.placeholder((64,), name="A")
        return [a, te.compute((64,), lambda i: a[i] + 1.0, name="B")]

    task = autosched.SearchTask(func=records_add64, args=())
    spec = TaskSpec.from_tensors(task.tensors, task.workload_key)
    good = ('split(B.i, factors=[32]), bind(B.i.outer, "blockIdx.x"), '
            'bind(B.i.inner, "threadIdx.x")')
    path = tmp_path / "t.log"
    save_records(path, [MeasureInput(spec, "split(B.gone, factors=[8])"),
                        MeasureInput(spec, good)],
                 [MeasureResult((1e-6,), 0, "", 1.0, 1.0),
                  MeasureResult((1e-3,), 0, "", 1.0, 1.0)])
    with pytest.warns(RuntimeWarning, match="next best"):
        sch, args = task.apply_best(str(path))
    assert len(args) == 2 and "blockIdx.x" in str(sch.pipeline)


def test_a_file_system_without_locks_appends_with_a_warning(tmp_path, monkeypatch):
    import errno

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(rec.fcntl, "flock", no_locks)
    path = tmp_path / "t.log"
    with pytest.warns(RuntimeWarning, match="cannot lock"):
        save_records(path, *zip(_pair("p0")))
    assert len(load_records(path)) == 1


def test_the_measure_stream_hands_each_result_to_on_result_as_it_arrives():
    from ptxforge.measure.stream import MeasureStream

    from .test_autotvm_resume import _Builder, _Runner

    seen = []
    inputs = [_pair(f"p{i}")[0] for i in range(5)]
    with MeasureStream(_Builder(), _Runner()) as stream:
        results = stream.submit(inputs, lambda i, r: seen.append((i.pipeline_text, r))).result()
    assert sorted(p for p, _ in seen) == [f"p{i}" for i in range(5)]
    assert {id(r) for _, r in seen} == {id(r) for r in results}
