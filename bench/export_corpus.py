"""Export the real-model corpus (``tests/real_models.py``) to ONNX with both of PyTorch's
exporters, run onnxruntime on fixed inputs, and store model, inputs and onnxruntime's
outputs as test data under ``tests/data/corpus/``:

    <model>-<exporter>.onnx    the export (weights inside; a few hundred KB at most)
    <model>-<exporter>.npz     input:<name> arrays and output:0, onnxruntime's result
    manifest.json              every model x exporter: exported or why not, versions

Exporters: ``torchscript`` (``torch.onnx.export(..., dynamo=False, opset_version=17)``) and
``dynamo`` (``dynamo=True, opset_version=18``). Runs wherever torch, transformers, onnx and
onnxruntime are installed (no GPU); the export is deterministic, so re-running it only
changes files when a library version changes what it writes.

    python3 bench/export_corpus.py [--only bert,resnet18] [--out tests/data/corpus]
    python3 bench/export_corpus.py --status [--doc docs/onnx_corpus.md]

``--status`` exports nothing: it imports every stored export with ``graph.from_onnx``, runs
it on the reference executor against onnxruntime's outputs, and writes the table of which
exports import today and why the others do not (no torch needed).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # the folder holding the ptxforge package

from ptxforge.tests.real_models import MODELS  # noqa: E402

EXPORTERS = {"torchscript": 17, "dynamo": 18}


def export(spec, exporter: str, opset: int) -> bytes:
    """The ONNX bytes of ``spec`` exported by ``exporter`` at ``opset`` (fixed input shapes:
    the corpus is imported at the shapes it was exported with)."""
    import torch

    model = spec.build()
    args = spec.torch_inputs(spec.inputs())
    names = [s.name for s in spec.inputs_spec]
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, buf, dynamo=False, opset_version=opset,
                              input_names=names, output_names=["output"],
                              do_constant_folding=True)
            return buf.getvalue()
        program = torch.onnx.export(model, args, dynamo=True, opset_version=opset,
                                    input_names=names, output_names=["output"],
                                    optimize=True, verbose=False)
        return _strip(program.model_proto).SerializeToString()


def _strip(model):
    """``model`` without the exporter's per-node metadata (source stack traces, names of the
    PyTorch modules): two thirds of a small export's bytes, and none of its meaning."""
    graphs = [model.graph] + [f for f in model.functions]
    for g in graphs:
        for n in g.node:
            del n.metadata_props[:]
            n.doc_string = ""
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        del vi.metadata_props[:]
    for init in model.graph.initializer:
        del init.metadata_props[:]
    return model


def onnxruntime_outputs(data: bytes, feeds: dict) -> list:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--out", default=str(HERE.parent / "tests" / "data" / "corpus"))
    ap.add_argument("--status", action="store_true",
                    help="write the import status of the stored exports instead")
    ap.add_argument("--doc", default=str(HERE.parent / "docs" / "onnx_corpus.md"))
    args = ap.parse_args(argv)
    if args.status:
        Path(args.doc).write_text(status(Path(args.out)))
        print(f"wrote {args.doc}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    for name in names:
        spec = MODELS[name]
        feeds = spec.inputs()
        for exporter, opset in EXPORTERS.items():
            key = f"{name}-{exporter}"
            entry = {"model": name, "exporter": exporter, "opset": opset}
            try:
                data = export(spec, exporter, opset)
                outs = onnxruntime_outputs(data, feeds)
            except Exception as e:  # noqa: BLE001 - record why this export is missing
                entry["status"] = "failed"
                entry["reason"] = f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
                print(f"{key}: FAILED {entry['reason'][:200]}")
                for stale in (out / f"{key}.onnx", out / f"{key}.npz"):
                    stale.unlink(missing_ok=True)
            else:
                (out / f"{key}.onnx").write_bytes(data)
                arrays = {f"input:{k}": v for k, v in feeds.items()}
                arrays.update({f"output:{k}": np.asarray(v) for k, v in enumerate(outs)})
                np.savez_compressed(out / f"{key}.npz", **arrays)
                entry["status"] = "exported"
                entry["bytes"] = len(data)
                print(f"{key}: {len(data) / 1024:.0f} KB")
            manifest[key] = entry
    manifest["versions"] = _versions()
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


def status(corpus: Path) -> str:
    """The markdown table of the corpus: per model and exporter, exported or not, imported
    or the importer's reason, and the reference executor's error against onnxruntime."""
    import datetime

    from ptxforge import graph

    manifest = json.loads((corpus / "manifest.json").read_text())
    rows, imported, exported = [], 0, 0
    for key, entry in sorted(manifest.items()):
        if key == "versions":
            continue
        if entry["status"] != "exported":
            rows.append(f"| {entry['model']} | {entry['exporter']} | no: "
                        f"{entry['reason'][:120]} | | |")
            continue
        exported += 1
        data = np.load(corpus / f"{key}.npz")
        feeds = {n.removeprefix("input:"): data[n] for n in data.files
                 if n.startswith("input:")}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                net, params = graph.from_onnx(str(corpus / f"{key}.onnx"))
                got = graph.run_graph(net, feeds, params)[0]
        except graph.GraphError as e:
            reason = " ".join(str(e).split("; supported:")[0].split()).replace(
                str(corpus / f"{key}.onnx") + ": ", "").replace("|", "\\|")
            rows.append(f"| {entry['model']} | {entry['exporter']} | yes | no: {reason[:200]} "
                        "| |")
            continue
        want = data["output:0"]
        err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
        imported += 1
        rows.append(f"| {entry['model']} | {entry['exporter']} | yes | yes | {err:.1e} |")
    v = manifest.get("versions", {})
    head = [
        "# The real-model corpus: what imports",
        "",
        "Generated by `python3 bench/export_corpus.py --status` (do not edit by hand) on "
        f"{datetime.date.today().isoformat()}; exports made with "
        + ", ".join(f"{k} {val}" for k, val in sorted(v.items())) + ".",
        "",
        f"**{imported} of {exported}** stored exports import; the error is the reference "
        "executor's largest difference from onnxruntime, as a share of the largest output. "
        "`pytest -m corpus tests/test_corpus.py` also checks each on the simulator in "
        "float32 and mixed float16.",
        "",
        "| model | exporter | exported | imports | error |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(head + rows) + "\n"


def _versions() -> dict:
    import onnx
    import onnxruntime
    import torch

    v = {"torch": torch.__version__, "onnx": onnx.__version__,
         "onnxruntime": onnxruntime.__version__}
    try:
        import transformers

        v["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import onnxscript

        v["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    return v


if __name__ == "__main__":
    sys.exit(main())
