"""The replay of ViT-B/16's and BERT-base's tuning records (an H200, batch 1, fp16) against
today's default product and attention choosers: every function's default is a measured
configuration within 5% of the records' fastest (``bench/transformer_records_replay.py``)."""

from __future__ import annotations

import json

from .bench_scripts import load_bench


def _replay_module():
    return load_bench("transformer_records_replay")


def test_the_defaults_are_measured_within_5_percent_of_the_best(capsys):
    replay = _replay_module()
    with open(replay.RECORDS) as f:
        rows = [json.loads(line) for line in f]
    summary = replay.replay(rows)
    out = capsys.readouterr().out
    assert set(summary) == {"vit", "bert"}
    for net, s in summary.items():
        assert s["unjudged"] == 0, out
        assert max(s["ratios"]) <= 1.05, (net, out)
    # ViT: 1.178 before the row-block depth and the short-key attention rules
    assert summary["vit"]["default"] <= 1.02 * summary["vit"]["best"], out
    assert summary["bert"]["default"] <= 1.005 * summary["bert"]["best"], out


def test_distill_reads_a_tuning_log(tmp_path):
    replay = _replay_module()
    log = tmp_path / "log.json"
    rec = {"task": {"name": "vm_mod_fused_nn_dense_nn_bias_add",
                    "key": '["h", [197, 768], [2304, 768], [2304], [197, 2304]]'},
           "pipeline": "", "payload": {"kind": "autosched", "sketch": "wgmma_gemm(T)",
                                       "state": {f"T.wg.{k}": v for k, v in zip(
                                           replay.WG_KNOBS, (128, 1, 4, 1, 1))}},
           "result": {"costs": [5.24e-6], "error_no": 0}}
    skipped = dict(rec, payload={"kind": "autosched", "sketch": "simple", "state": {}})
    log.write_text(json.dumps(rec) + "\n" + json.dumps(skipped) + "\n")
    (row,) = replay.distill(str(log), "vit")
    assert row["config"] == {"block_n": 128, "warpgroups": 1, "stages": 4, "in_flight": 1,
                             "split_k": 1}
    assert row["us"] == 5.24 and row["shapes"][1] == [2304, 768]

