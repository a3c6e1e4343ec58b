"""The ONNX backend node tests, as data: loading them and running one through the importer,
the reference executor and a compiled simulator build.

The cases come from the installed ``onnx`` package: its ``backend/test/data/node`` folder
where the wheel ships it, else generated once from ``onnx.backend.test.case.node`` (the same
models and data ONNX's own generator writes) into a cache folder keyed by the onnx version
(``$PTXFORGE_ONNX_NODE_CACHE``, default ``~/.cache/ptxforge/onnx-node-<version>``).

Each run ends in one :class:`Outcome`: ``passed``; ``refused`` (a clear
:class:`~ptxforge.graph.OnnxImportError` or :class:`~ptxforge.graph.GraphError` naming what
is not supported: an expected failure); ``wrong`` (outputs that differ from ONNX's beyond
the case's tolerances); ``crash`` (any other exception). Only the last two are bugs.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PASSED, REFUSED, WRONG, CRASH = "passed", "refused", "wrong", "crash"


@dataclass(frozen=True)
class NodeCase:
    """One node test: its folder (``model.onnx`` and ``test_data_set_<k>/``) and the
    tolerances ONNX gives it."""

    name: str
    path: Path
    rtol: float
    atol: float

    @property
    def op_type(self) -> str:
        """The operator under test: the op of the model's last node that is in the default
        domain (the test's name does not always say it)."""
        import onnx

        model = onnx.load(str(self.path / "model.onnx"), load_external_data=False)
        return model.graph.node[-1].op_type if model.graph.node else "?"

    def load(self):
        """``(model, [(inputs, expected outputs), ...])`` with arrays (a sequence or
        optional value stays a list / None)."""
        import onnx

        model = onnx.load(str(self.path / "model.onnx"))
        sets = []
        for d in sorted(self.path.glob("test_data_set_*")):
            ins = [_read_value(d / f"input_{k}.pb", model.graph.input[k].type)
                   for k in range(len(list(d.glob("input_*.pb"))))]
            outs = [_read_value(d / f"output_{k}.pb", model.graph.output[k].type)
                    for k in range(len(list(d.glob("output_*.pb"))))]
            sets.append((ins, outs))
        return model, sets


def _read_value(path: Path, type_proto):
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def cache_dir() -> Path:
    import onnx

    default = Path.home() / ".cache" / "ptxforge" / f"onnx-node-{onnx.__version__}"
    return Path(os.environ.get("PTXFORGE_ONNX_NODE_CACHE", default))


def node_cases() -> list[NodeCase]:
    """Every node test of the installed onnx, sorted by name."""
    import onnx.backend.test as backend_test

    shipped = Path(backend_test.__file__).parent / "data" / "node"
    if shipped.is_dir() and any(shipped.iterdir()):
        root, tolerances = shipped, {}
    else:
        root = cache_dir()
        tolerances = _generate(root)
    cases = []
    for d in sorted(p for p in root.iterdir() if (p / "model.onnx").is_file()):
        rtol, atol = tolerances.get(d.name, (1e-3, 1e-7))
        cases.append(NodeCase(d.name, d, rtol, atol))
    return cases


def _generate(root: Path) -> dict:
    """Write the generated cases under ``root`` once (atomically: a folder renamed into
    place, so parallel test workers never see half a suite); returns the tolerances."""
    import json

    marker = root / "tolerances.json"
    if marker.is_file():
        return {k: tuple(v) for k, v in json.loads(marker.read_text()).items()}
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    from onnx import numpy_helper
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    tolerances = {}
    for case in cases:
        d = tmp / case.name
        d.mkdir()
        (d / "model.onnx").write_bytes(case.model.SerializeToString())
        tolerances[case.name] = (case.rtol, case.atol)
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = d / f"test_data_set_{i}"
            ds.mkdir()
            for kind, values, infos in (("input", inputs, case.model.graph.input),
                                        ("output", outputs, case.model.graph.output)):
                for j, v in enumerate(values):
                    (ds / f"{kind}_{j}.pb").write_bytes(
                        _to_proto(numpy_helper, v, infos[j]).SerializeToString())
    (tmp / "tolerances.json").write_text(json.dumps(tolerances))
    try:
        tmp.rename(root)
    except OSError:  # another process got there first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return {k: tuple(v) for k, v in json.loads(marker.read_text()).items()}


def _to_proto(numpy_helper, value, info):
    if info.type.HasField("sequence_type"):
        return numpy_helper.from_list(value, info.name)
    if info.type.HasField("optional_type"):
        return numpy_helper.from_optional(value, info.name)
    if hasattr(value, "SerializeToString"):
        return value
    return numpy_helper.from_array(np.asarray(value), info.name)


@dataclass(frozen=True)
class Outcome:
    """How one case ended: ``status`` one of passed / refused / wrong / crash, the stage
    (import, reference, compiled), a one-line reason, and the inputs bound as constants."""

    status: str
    stage: str = ""
    reason: str = ""
    bound: tuple = ()  # inputs imported as constants (operands needed at import)

    @property
    def group(self) -> str:
        """The reason with names and numbers taken out, to group failures by cause."""
        text = re.sub(r"node '[^']*'", "node", self.reason)
        text = re.sub(r"'[^']*'", "'…'", text)
        text = re.sub(r"\[[-0-9, ]*\]|\(-?[0-9][-0-9, ]*\)", "[…]", text)
        text = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", text)
        return f"{self.stage}: {text[:160]}"


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _is_tensor(v) -> bool:
    return isinstance(v, np.ndarray)


def run_case(case: NodeCase, compiled: bool = True) -> Outcome:
    """Import ``case``'s model, run every data set through the reference executor and (when
    ``compiled``) a simulator build with default schedules, and compare with ONNX's outputs.

    Inputs that the model uses as operands which must be known at import (a Reshape
    target, Resize scales, TopK's k: ONNX's tests feed them as inputs) are bound to the
    data set's values when the importer names them (``from_onnx(..., constants=)``, as a
    user of such a model does); the outcome lists them in ``bound``."""

    from ptxforge.graph.onnx_float8 import host_bits

    model, sets = case.load()
    for ins, outs in sets:
        if not all(_is_tensor(v) for v in list(ins) + list(outs)):
            return Outcome(REFUSED, "import", "sequence, map or optional values are not "
                                              "supported (tensors only)")
    names = [i.name for i in model.graph.input]
    bound: tuple = ()
    for ins, expected in sets:
        # fp8 inputs as ptxforge holds them on the host: bit patterns
        feeds = {k: host_bits(v) for k, v in zip(names, ins)}
        imported = _import(model, feeds, bound)
        if isinstance(imported, Outcome):
            return imported
        net, params, bound = imported
        outcome = _run_data_set(net, params, feeds, expected, case, compiled)
        if outcome is not None:
            return Outcome(outcome.status, outcome.stage, outcome.reason, bound)
    return Outcome(PASSED, "compiled" if compiled else "reference", "", bound)


def _import(model, feeds: dict, bound: tuple):
    """``(net, params, bound)`` or the Outcome of a failed import."""
    from ptxforge import graph
    from ptxforge.graph.frontend_onnx import OnnxDataDependentError

    for _ in range(len(feeds) + 1):
        constants = {k: feeds[k] for k in bound}
        shapes = {k: v.shape for k, v in feeds.items() if k not in constants}
        try:
            with _quiet():
                net, params = graph.from_onnx(model, shapes, constants=constants)
            return net, params, bound
        except OnnxDataDependentError as e:
            more = tuple(k for k in e.inputs if k in feeds and k not in bound)
            if not more:
                return Outcome(REFUSED, "import", _one_line(e), bound)
            bound = bound + more
        except graph.GraphError as e:
            return Outcome(REFUSED, "import", _one_line(e), bound)
        except Exception as e:  # noqa: BLE001 - the point: anything else is a bug
            return Outcome(CRASH, "import", f"{type(e).__name__}: {_one_line(e)}", bound)
    return Outcome(REFUSED, "import", "operands depend on input data", bound)


def _run_data_set(net, params, feeds, expected, case, compiled):
    """None when the data set passes, else its Outcome."""
    import ptxforge
    from ptxforge import graph

    stage = "reference"
    try:
        with _quiet():
            got = graph.run_graph(net, {k: v for k, v in feeds.items()
                                        if k in {p.name for p in net.params}}, params)
        bad = _compare(got, expected, case)
        if bad:
            return Outcome(WRONG, stage, bad)
        if not compiled:
            return None
        stage = "compiled"
        with _quiet():
            lib = graph.build(net, "sim", params)
            m = graph.GraphModule(lib, ptxforge.sim())
            # an input the build found unused (a Shape of it, folded) has no slot
            m.set_input(**{k: v for k, v in feeds.items() if k in lib.plan.inputs})
            m.run()
            got = [m.get_output(k).numpy() for k in range(len(expected))]
        bad = _compare(got, expected, case)
        if bad:
            return Outcome(WRONG, stage, bad)
    except graph.GraphError as e:
        return Outcome(REFUSED, stage, _one_line(e))
    except Exception as e:  # noqa: BLE001
        return Outcome(CRASH, stage, f"{type(e).__name__}: {_one_line(e)}")
    return None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def _compare(got, expected, case: NodeCase) -> str:
    """'' when ``got`` matches ``expected`` as ONNX's runner checks it (same dtype, shape,
    values within rtol/atol, NaNs in the same places), else what differs. A 16-bit float
    output may also differ by one unit in its last place (float16 and bfloat16 carry 11
    and 8 significant bits: one rounding of an intermediate in another order moves it)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if e.dtype.name.startswith("float8"):
            bad = _compare_float8(g, e)
            if bad:
                return f"output {k}: {bad}"
            continue
        if g.dtype != e.dtype:
            return f"output {k}: dtype {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"output {k}: shape {list(g.shape)}, expected {list(e.shape)}"
        rtol = case.rtol
        if e.dtype.name in ("float16", "bfloat16"):
            rtol = max(rtol, 2.0 ** (-10 if e.dtype.name == "float16" else -7))
            g, e = g.astype(np.float32), e.astype(np.float32)
        if e.dtype.kind in "fc":
            try:
                np.testing.assert_allclose(g, e, rtol=rtol, atol=case.atol)
            except AssertionError:
                err = np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64)))
                return f"output {k}: values differ (max abs error {err:.3g})"
        elif not np.array_equal(g, e):
            return f"output {k}: values differ"
    return ""


def _compare_float8(got: np.ndarray, expected: np.ndarray) -> str:
    """'' when ``got`` (fp8 bit patterns, ptxforge's host form) holds exactly the values of
    ``expected`` (an ml_dtypes fp8 array; NaNs in the same places, of either sign)."""
    from ptxforge.ir.float8 import float8_from_bits

    if got.dtype != np.uint8:
        return f"dtype {got.dtype}, expected {expected.dtype.name} bit patterns (uint8)"
    if got.shape != expected.shape:
        return f"shape {list(got.shape)}, expected {list(expected.shape)}"
    g = float8_from_bits(got, expected.dtype.name)
    if not np.array_equal(g, expected.astype(np.float32), equal_nan=True):
        return f"{expected.dtype.name} values differ"
    return ""


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def operator_of(test_name: str, model_op: str = "") -> str:
    """The ONNX operator a node test is about, from its name (``test_reduce_mean_...`` ->
    ``ReduceMean``): the longest operator name, in snake case, that starts the name; else
    ``model_op`` (the op of the model's last node)."""
    import onnx.defs

    table = _operator_names(tuple(sorted({s.name for s in onnx.defs.get_all_schemas()})))
    rest = test_name.removeprefix("test_")
    best = ""
    for snake, op in table.items():
        follows = rest[len(snake):len(snake) + 1]
        if (rest.startswith(snake) and (follows == "" or follows == "_" or follows.isdigit())
                and len(snake) > len(_snake(best))):
            best = op
    return best or model_op or rest.split("_")[0]


_OPERATOR_CACHE: dict = {}


def _operator_names(names: tuple) -> dict:
    if names not in _OPERATOR_CACHE:
        table = {_snake(n): n for n in names}
        # names ONNX's tests spell their own way
        table.update({"reduce_log_sum_exp": "ReduceLogSumExp", "globalaveragepool":
                      "GlobalAveragePool", "globalmaxpool": "GlobalMaxPool",
                      "maxpool": "MaxPool", "averagepool": "AveragePool", "lppool": "LpPool",
                      "maxunpool": "MaxUnpool", "batchnorm": "BatchNormalization",
                      "instancenorm": "InstanceNormalization", "layer_normalization":
                      "LayerNormalization", "convtranspose": "ConvTranspose",
                      "basic_conv": "Conv", "basic_convinteger": "ConvInteger",
                      "logsoftmax": "LogSoftmax", "gathernd": "GatherND",
                      "scatternd": "ScatterND", "depthtospace": "DepthToSpace",
                      "spacetodepth": "SpaceToDepth", "nonmaxsuppression":
                      "NonMaxSuppression", "roialign": "RoiAlign", "onehot": "OneHot",
                      "nonzero": "NonZero", "isinf": "IsInf", "isnan": "IsNaN",
                      "argmax": "ArgMax", "argmin": "ArgMin", "hardmax": "Hardmax",
                      "thresholdedrelu": "ThresholdedRelu", "leakyrelu": "LeakyRelu",
                      "prelu": "PRelu", "hardsigmoid": "HardSigmoid", "hardswish":
                      "HardSwish", "cumsum": "CumSum", "dynamicquantizelinear":
                      "DynamicQuantizeLinear", "quantizelinear": "QuantizeLinear",
                      "dequantizelinear": "DequantizeLinear", "matmulinteger":
                      "MatMulInteger", "qlinearmatmul": "QLinearMatMul", "qlinearconv":
                      "QLinearConv", "convinteger": "ConvInteger", "gridsample":
                      "GridSample", "bitshift": "BitShift", "mvn":
                      "MeanVarianceNormalization", "globallppool": "GlobalLpPool",
                      "reversesequence": "ReverseSequence", "tfidfvectorizer":
                      "TfIdfVectorizer", "strnormalizer": "StringNormalizer",
                      "sequence_map": "SequenceMap", "gru": "GRU", "lstm": "LSTM",
                      "rnn": "RNN", "simple_rnn": "RNN", "stft": "STFT", "dft": "DFT",
                      "sce": "SoftmaxCrossEntropyLoss", "nllloss": "NegativeLogLikelihoodLoss",
                      "training_dropout": "Dropout", "castlike": "CastLike",
                      "blackmanwindow": "BlackmanWindow", "hannwindow": "HannWindow",
                      "hammingwindow": "HammingWindow", "melweightmatrix": "MelWeightMatrix",
                      "affine_grid": "AffineGrid", "regex_full_match": "RegexFullMatch",
                      "string_concat": "StringConcat", "string_split": "StringSplit",
                      "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr",
                      "bitwise_xor": "BitwiseXor", "bitwise_not": "BitwiseNot",
                      "center_crop_pad": "CenterCropPad", "col2im": "Col2Im",
                      "group_normalization": "GroupNormalization", "rms_normalization":
                      "RMSNormalization", "rotary_embedding": "RotaryEmbedding",
                      "top_k": "TopK", "topk": "TopK", "tensorscatter": "TensorScatter",
                      "bitcast": "BitCast", "flexattention": "FlexAttention", "cumprod":
                      "CumProd", "swiglu": "SwiGLU", "basic_deform_conv": "DeformConv",
                      "deform_conv": "DeformConv", "constantofshape": "ConstantOfShape",
                      "eyelike": "EyeLike", "l1normalization": "LpNormalization",
                      "l2normalization": "LpNormalization", "lpnormalization":
                      "LpNormalization", "nesterov_momentum": "Momentum", "tril": "Trilu",
                      "triu": "Trilu", "edge_pad": "Pad", "reflect_pad": "Pad",
                      "wrap_pad": "Pad", "constant_pad": "Pad"})
        _OPERATOR_CACHE[names] = table
    return _OPERATOR_CACHE[names]
