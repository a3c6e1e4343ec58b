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
    args = ap.parse_args(argv)
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
