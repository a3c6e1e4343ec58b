"""``ptxforge.tune_torch`` and the backend's ``trials`` option on the CPU simulator: records
from an empty log through the network-tuning loop, resumed, then built by
``torch.compile(backend="ptxforge", options={"log": ...})`` and checked against eager."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
import ptxforge  # noqa: E402
from ptxforge.torch_backend import ptxforge_backend  # noqa: E402

pytestmark = pytest.mark.torch_frontend


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), -1)


def _workloads(log) -> list[str]:
    return [json.dumps(json.loads(line)["task"]["key"]) for line in
            log.read_text().splitlines()]


def test_tune_torch_writes_resumes_and_the_backend_applies_the_log(tmp_path):
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 16)
    log = tmp_path / "mlp.json"
    measured = ptxforge.tune_torch(model, (x,), trials=4, log=str(log), target="sim")
    keys = _workloads(log)
    assert measured == len(keys) >= 4 and len(set(keys)) >= 2
    assert (tmp_path / "mlp.tasks.txt").exists()
    # the log holds the trials asked for: nothing left to measure
    assert ptxforge.tune_torch(model, (x,), trials=4, log=str(log), target="sim") == 0
    assert len(_workloads(log)) == measured
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ptxforge_backend,
                             options={"target": "sim", "log": str(log)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_trials_option_tunes_each_captured_graph_before_building(tmp_path):
    torch.manual_seed(1)
    model, x = Mlp().eval(), torch.randn(3, 16)
    log = tmp_path / "opt.json"
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=ptxforge_backend,
                             options={"target": "sim", "log": str(log), "trials": 3})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    assert len(_workloads(log)) >= 3
