"""Without a GPU, the GPU runner says so up front and names the simulator runner."""

import pytest

from ptxforge.backend_ptx.cuda_driver import NoGPUError, device_count


def _has_gpu() -> bool:
    try:
        return device_count() > 0
    except NoGPUError:
        return False


@pytest.mark.skipif(_has_gpu(), reason="the message is for machines without a GPU")
def test_local_runner_says_no_gpu_and_how_to_use_the_simulator(capsys):
    from ptxforge.measure import runner_gpu

    runner_gpu._NO_GPU_SAID = False
    from ptxforge.tvm import auto_scheduler, autotvm

    ctx = auto_scheduler.LocalRPCMeasureContext(min_repeat_ms=300)
    autotvm.LocalRunner(number=2)
    err = capsys.readouterr().err
    assert err.count("no GPU on this machine") == 1
    assert "SimRunner()" in err
    ctx.close()
