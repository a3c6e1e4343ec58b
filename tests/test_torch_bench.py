"""The CPU side of bench/bench_torch_backend.py: its arguments, the fresh log, and a dry run
of tiny BERT and GPT-2 through the backend on the simulator (tuning left out), each with
one attention kept whole per layer and compiled as the fused kernel."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch_frontend

PATH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bench_torch_backend.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_torch_backend", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_arguments(bench):
    args = bench.parse(["--models", "bert", "resnet50", "gpt2", "vit", "--trials", "7",
                        "--fused-attention", "off"])
    assert args.models == ["bert", "resnet50", "gpt2", "vit"]
    assert args.trials == 7 and not args.dry_run and not args.resume
    assert bench.fused_settings(args.fused_attention) == [False]
    assert bench.fused_settings("both") == [True, False]
    with pytest.raises(SystemExit):
        bench.parse(["--models", "llama"])
    assert bench.variant(True) == "ptxforge (fused attention on)"
    assert bench.variant(True, attention=False) == "ptxforge"


def test_workloads_are_the_four_models(bench):
    pytest.importorskip("transformers")
    works = {n: bench.build(n, tiny=True) for n in bench.MODELS}
    assert [n for n, w in works.items() if not w.attention] == ["resnet50"]
    assert "attention_mask" in works["bert"].kwargs
    assert works["gpt2"].model.config.use_cache is False
    assert works["vit"].model.config._attn_implementation == "sdpa"
    for w in works.values():
        with torch.no_grad():
            assert bench.first(w.model(*w.args, **w.kwargs)).isfinite().all()


def test_tuning_starts_from_an_empty_log(bench, tmp_path):
    log = tmp_path / "bert_fp16.json"
    log.write_text("old\n")
    bench.fresh_log(str(log), resume=True)
    assert log.read_text() == "old\n"
    bench.fresh_log(str(log), resume=False)
    assert not log.exists() and (tmp_path / "bert_fp16.json.prev").read_text() == "old\n"


def test_dry_run_of_bert_and_gpt2(bench, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "rows.json"
    assert bench.main(["--dry-run", "--models", "bert", "gpt2", "--trials", "0",
                       "--fused-attention", "on", "--logdir", str(tmp_path),
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["bert", "gpt2"]
    for row in rows:
        (label,) = row["errors"]
        assert "fused attention on" in label
        assert row["errors"][label] < 3e-2
        assert row["times_ms"] == {}
        compiled = row["compiled"][label]
        assert compiled["attentions"] == 2, compiled  # one per layer, kept whole
        assert compiled["fused_attention_kernels"] == 1, compiled
        assert compiled["partitions"] == 1 and compiled["tuned"] == 0


def test_dry_run_compares_the_backend_with_from_torch_for_the_same_log(bench, tmp_path):
    """ResNet-50's layout, tiny, tuned on the simulator: the backend applies a record to
    every function tuning made a task of, and ``--from-torch`` builds the same functions."""
    pytest.importorskip("transformers")
    out = tmp_path / "rows.json"
    assert bench.main(["--dry-run", "--models", "resnet50", "--trials", "24", "--from-torch",
                       "--logdir", str(tmp_path), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    ours, theirs = row["compiled"]["ptxforge"], row["compiled"]["graph.from_torch, same log"]
    from ptxforge.measure import load_records

    (log,) = tmp_path.glob("resnet50_fp16*.json")
    recorded = {inp.task.workload_key for inp, res in load_records(str(log))
                if int(res.error_no) == 0}
    # a record for every task but those whose trials failed (a loaded machine's time limit)
    assert ours["tuned"] == len(recorded & set(ours["keys"])) > 0
    assert ours["tuned"] + len(ours["fallbacks"]) == ours["tunable"]
    assert ours["cuda_graph"] == ["simulator"]
    assert theirs["same_functions_as_backend"] and theirs["keys"] == ours["keys"]
    assert theirs["tuned"] == ours["tuned"] and theirs["launches"] == ours["launches"]
    assert row["errors"]["graph.from_torch, same log"] < 3e-2
