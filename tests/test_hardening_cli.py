"""The command line's error paths: a bad file is one line on stderr naming the file (never
wrapped twice, never a random temporary's name), exit status 1; ``inspect --pipeline``
reads a schedule pipeline, as records hold, so a lowering pass in it is refused, not
compiled into a kernel."""

from __future__ import annotations

import pytest

from ptxforge import autosched, te
from ptxforge.cli.main import _example_schedule, main
from ptxforge.measure import MeasureInput, MeasureResult, TaskSpec, save_records
from ptxforge.passes import LoweringPassInScheduleError, SchedulePipeline, parse_pass


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("ptxforge ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ptxforge {command}: error: "), err
    msg = lines[0][len(f"ptxforge {command}: error: "):]
    # wrapped once: the message does not repeat its own prefix
    head = msg.split(":")[0]
    assert msg.count(head + ":") == 1, msg
    return msg


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "log.json"
    task = TaskSpec(workload_key='["w"]', target="cuda", module_text="", flop=2e9,
                    name="conv")
    inputs = [MeasureInput(task, f"split(x.i, factors=[{k + 1}])", None) for k in range(3)]
    results = [MeasureResult((c,), 0, "", 0.1, 1000.0 + k)
               for k, c in enumerate((2e-3, 1e-3, 3e-3))]
    save_records(str(path), inputs, results)
    return path


# -- inspect --pipeline -----------------------------------------------------------------------


def seed_pipeline_with(tmp_path, tail: str):
    s, _ = _example_schedule("seed")
    path = tmp_path / "pipeline.txt"
    path.write_text(s.pipeline.text + tail)
    return path


def test_inspect_refuses_a_lowering_pass_in_the_pipeline(tmp_path, capsys):
    path = seed_pipeline_with(tmp_path, ", decompose_reduction()")
    rc, out, err = run(capsys, "inspect", "--pipeline", str(path), "--target", "ptx")
    assert rc == 1
    assert ";; IR after" not in out and ".entry" not in out  # no kernel was built
    msg = one_error_line(err, "inspect")
    assert msg.startswith(f"{path}: line 1, column ")
    assert "decompose_reduction() is a lowering pass" in msg


def test_inspect_reads_a_good_pipeline_file(tmp_path, capsys):
    path = seed_pipeline_with(tmp_path, "")
    rc, out, _ = run(capsys, "inspect", "--pipeline", str(path), "--print-after",
                     "insert_barriers")
    assert rc == 0 and ";; IR after insert_barriers()" in out


@pytest.mark.parametrize("content,says", [(None, "No such file or directory"),
                                          (b"\xff\xfe split(", "not UTF-8 text"),
                                          (b"split(", "line 1, column 7: expected a value"),
                                          ("folder", "Is a directory")])
def test_inspect_names_a_bad_pipeline_file(tmp_path, capsys, content, says):
    path = tmp_path / "pipeline.txt"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    rc, _, err = run(capsys, "inspect", "--pipeline", str(path))
    msg = one_error_line(err, "inspect")
    assert rc == 1 and msg.startswith(f"{path}: ") and says in msg


@autosched.register_workload(override=True)
def hardening_cli_rowsum():
    a = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    return [a, te.compute((8,), lambda i: te.sum(a[i, k], axis=k), name="B")]


def test_the_initial_state_is_a_schedule_pipeline():
    task = autosched.SearchTask(func=hardening_cli_rowsum, args=(), target="sim")
    state = task.compute_dag.get_init_state()
    assert isinstance(state, SchedulePipeline) and len(state) == 0
    with pytest.raises(LoweringPassInScheduleError, match="decompose_reduction"):
        state + parse_pass("decompose_reduction()")


# -- records, plot, tune-op: logs that are missing, folders, not JSON, truncated --------------


@pytest.mark.parametrize("argv", [("records", "list"), ("records", "best"),
                                  ("records", "distill", "-o", "OUT"), ("plot", "-o", "OUT")])
@pytest.mark.parametrize("kind,says", [("missing", "No such file or directory"),
                                       ("folder", "Is a directory")])
def test_a_log_that_cannot_be_read_is_named_once(tmp_path, capsys, argv, kind, says):
    path = tmp_path / "log.json"
    if kind == "folder":
        path.mkdir()
    cmd, *rest = argv
    rest = [str(tmp_path / "out.png") if a == "OUT" else a for a in rest]
    args = [cmd, *rest[:1], str(path), *rest[1:]] if cmd == "records" else [cmd, str(path),
                                                                           *rest]
    rc, _, err = run(capsys, *args)
    assert rc == 1
    assert one_error_line(err, cmd) == f"{path}: {says} (--debug shows the traceback)"


@pytest.mark.parametrize("data,says", [(b"\xff\xfe\x00 garbage\n", ":1: skipping a corrupt record"
                                        " (not UTF-8"),
                                       (b"not json\n", ":1: skipping a corrupt record "
                                        "(JSONDecodeError")])
def test_a_log_that_is_not_json_warns_naming_the_file_and_line(tmp_path, capsys, data, says):
    path = tmp_path / "log.json"
    path.write_bytes(data)
    with pytest.warns(RuntimeWarning, match=f"^{path}{says}".replace("(", r"\(")):
        rc, out, err = run(capsys, "records", "best", str(path))
    assert rc == 1 and out == "" and err == f"{path} holds no records\n"
    with pytest.warns(RuntimeWarning, match=str(path)):
        rc, out, err = run(capsys, "records", "list", str(path))
    assert rc == 0 and len(out.splitlines()) == 1 and err == f"{path} holds no records\n"
    with pytest.warns(RuntimeWarning, match=str(path)):
        with pytest.raises(SystemExit, match=f"{path} holds no records"):
            main(["plot", str(path), "-o", str(tmp_path / "o.png")])


def test_a_truncated_log_keeps_its_whole_records(log, capsys):
    with open(log, "a") as f:
        f.write('{"v": 1, "task": {"key": ')  # a crash mid-write
    with pytest.warns(RuntimeWarning, match=f"{log}:4: skipping a truncated record"):
        rc, out, _ = run(capsys, "records", "list", str(log))
    assert rc == 0 and len(out.splitlines()) == 1 + 3
    with pytest.warns(RuntimeWarning, match=f"{log}:4"):
        rc, out, _ = run(capsys, "records", "best", str(log))
    assert rc == 0 and "conv: 1.0000 ms" in out


def test_distill_into_a_missing_folder_names_the_output_not_a_temporary(log, tmp_path, capsys):
    out = tmp_path / "nope" / "best.json"
    rc, _, err = run(capsys, "records", "distill", str(log), "-o", str(out))
    msg = one_error_line(err, "records")
    assert rc == 1 and msg.startswith(f"{out}: cannot create a file in {out.parent} (No such")
    assert ".tmp" not in msg


def test_tune_op_with_a_log_that_is_a_folder(tmp_path, capsys):
    rc, _, err = run(capsys, "tune-op", "conv2d:1,4,4,4,4,3,3,1,1", "--trials", "2",
                     "--runner", "sim", "--log", str(tmp_path))
    assert rc == 1
    assert one_error_line(err, "tune-op") == \
        f"{tmp_path}: Is a directory (--debug shows the traceback)"


def test_records_best_of_a_log_of_failures_says_so(tmp_path, capsys):
    path = tmp_path / "log.json"
    task = TaskSpec(workload_key='["w"]', target="cuda", module_text="", flop=1e9, name="c")
    save_records(str(path), [MeasureInput(task, "split(x.i, factors=[2])", None)],
                 [MeasureResult((1e9,), 4, "launch failed", 0.1, 1000.0)])
    rc, out, err = run(capsys, "records", "best", str(path))
    assert rc == 1 and out == ""
    assert err == f"{path} holds no successful record (1 failed)\n"
