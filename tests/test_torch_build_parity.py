"""A model tuned with ``ptxforge.tune_torch`` (which tunes the ``torch.export`` graph's
tasks) builds through ``torch.compile(backend="ptxforge")`` (which builds the graph AOT
autograd captures) into the same functions as ``graph.from_torch`` with the same log: the
same workload keys, every recorded task's record applied, the same schedules and the same
kernel launches; and the backend's report says which functions a record scheduled. A small
ResNet (bottlenecks with batch norm and a downsampling branch, max pool, global pool,
linear) and a small BERT (attention mask, SDPA), fp16, tuned on the simulator."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import ptxforge  # noqa: E402
from ptxforge import autosched, graph  # noqa: E402
from ptxforge.measure import load_records  # noqa: E402
from ptxforge.torch_backend import ptxforge_backend  # noqa: E402
from ptxforge.torch_report import COPY, TUNED, PartitionReport  # noqa: E402

pytestmark = pytest.mark.torch_frontend

TARGET = "sim -arch=sm_80"


class Bottleneck(torch.nn.Module):
    """torchvision's ResNet-50 block: 1x1, strided 3x3, 1x1, each with batch norm."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True), nn.Conv2d(width, 4 * width, 1, bias=False),
            nn.BatchNorm2d(4 * width))
        self.down = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False),
                                  nn.BatchNorm2d(4 * width))

    def forward(self, x):
        out = self.body(x)
        out += self.down(x)
        return torch.relu(out)


class SmallResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(Bottleneck(8, 4, 1), Bottleneck(16, 8, 2))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _resnet():
    torch.manual_seed(0)
    model = SmallResNet().eval()
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):  # statistics a folding error would show
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)
    return model.half(), (torch.randn(1, 3, 16, 16).half(),), {}


def _bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=64,
                                  max_position_embeddings=32, attn_implementation="sdpa")
    cfg.return_dict = False
    model = transformers.BertModel(cfg).eval().half()
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 8, dtype=torch.int64)
    mask[0, -2:] = 0
    return model, (ids,), {"attention_mask": mask}


def _functions(lib) -> dict:
    return {key: (f.func.name, f.tuned, f.pipeline_text) for key, f in lib.functions.items()}


def _launches(lib) -> list:
    return [k for k in lib.call_keys if k is not None]


@pytest.mark.parametrize("make", [_resnet, _bert], ids=["resnet", "bert"])
def test_backend_build_equals_from_torch_build_for_the_same_log(make, tmp_path):
    model, args, kwargs = make()
    log = str(tmp_path / "model.json")
    net, params = graph.from_torch(model, args, kwargs)
    tasks, _ = autosched.extract_tasks(net, params, "cuda", precision="float16")
    # one trial per task: every task gets a record
    ptxforge.tune_torch(model, args, trials=len(tasks), log=log, precision="float16",
                        target="sim", kwargs=kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        with autosched.ApplyHistoryBest(log):
            want = graph.build(net, target=TARGET, params=params, precision="float16")

    parts, reports = [], []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ptxforge_backend, dynamic=False, options={
        "precision": "float16", "log": log, "target": TARGET, "on_build": parts.append,
        "report": reports.append})
    with torch.no_grad():
        got = compiled(*args, **kwargs)
        eager = model(*args, **kwargs)
    got, eager = (got[0], eager[0]) if isinstance(got, tuple) else (got, eager)
    torch.testing.assert_close(got.float(), eager.float(), rtol=2e-2, atol=2e-2)

    assert len(parts) == 1, "the whole model is one partition"
    lib = parts[0].lib
    assert _functions(lib) == _functions(want)
    assert _launches(lib) == _launches(want)
    task_keys = {t.workload_key for t in tasks}
    assert {k for k, f in lib.functions.items() if not f.func.is_view} == task_keys
    # every task with a successful record was scheduled by it; the others (a trial that
    # failed, which a loaded machine's time limit can cause) are the report's fallbacks
    recorded = {inp.task.workload_key for inp, res in load_records(log)
                if int(res.error_no) == 0}
    assert len(recorded & task_keys) >= len(task_keys) // 2
    (report,) = reports
    assert isinstance(report, PartitionReport)
    assert {f.workload_key for f in report.functions if f.schedule == TUNED} == (
        recorded & task_keys)
    assert {f.workload_key for f in report.functions if f.name in report.fallbacks} == (
        task_keys - recorded)
    assert report.tunable == len(task_keys)
    assert all(f.schedule == COPY for f in report.functions
               if f.workload_key not in task_keys)
    assert (f"{len(recorded & task_keys)} of {len(task_keys)} functions tuned"
            in report.summary())
    assert report.cuda_graph == "simulator"
    assert report.weights == len(parts[0].static) > 0
