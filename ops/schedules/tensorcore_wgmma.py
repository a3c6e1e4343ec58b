"""The names of the wgmma (sm_90a) GEMM schedule, where callers import them: the schedule
is :func:`~.gemm.schedule.schedule_gemm` with
:class:`~.gemm.knobs.WgmmaScheduleConfig` knobs (see :mod:`.gemm`)."""

from ...ir.intrin.wgmma import WARPGROUP  # noqa: F401
from .gemm.choice import wgmma_refusal  # noqa: F401
from .gemm.chooser import (  # noqa: F401
    SPLIT_K_GAIN,
    choose_wgmma_config,
    wgmma_candidates,
)
from .gemm.chooser import WGMMA_SPLIT_K_CHOICES as SPLIT_K_CHOICES  # noqa: F401
from .gemm.estimate import (  # noqa: F401
    L2_TILE_RATE,
    NO_FLIGHT_RATE,
    WGMMA_COPY_BYTES_PER_CLOCK,
    WGMMA_PEAK_FRACTION,
    wgmma_estimate,
    wgmma_time,
)
from .gemm.forms import _b_is_kn, _is_cast  # noqa: F401
from .gemm.knobs import B_KN_PANEL, BLOCK_K, BLOCK_N, ROW_BYTES, WgmmaScheduleConfig  # noqa: F401
from .gemm.pieces import (  # noqa: F401
    copy_vec,
    finish_warpgroup_product,
    schedule_b_kn_copy,
    split_warpgroup_k,
)
from .gemm.rules import (  # noqa: F401
    block_k,
    check_wgmma_gemm,
    check_wgmma_knobs,
    needs_c_tile,
    wgmma_padded_extents,
    wgmma_shared_bytes,
)
from .gemm.schedule import schedule_dense_wgmma, schedule_gemm_wgmma, wgmma_form  # noqa: F401
