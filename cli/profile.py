"""``--profile`` of the tuning commands: where a run's time went.

The main process's stages (``search``: the search of each round and the making of its
measure inputs; ``measure``: waiting for measurements; ``learn``: records and the cost
model) come from :func:`ptxforge.stages.collect` around the run; the builders' stages
(``schedule``, ``lower``, LLVM, PTX, ptxas, ...) are summed over the build results, in
worker seconds (the workers build in parallel, so they can add up to more than the wall
time).
"""

from __future__ import annotations

from ..stages import TOP_LEVEL

MAIN_STAGES = ("search", "measure", "learn")


def format_pool(label: str, stats, wall_s: float) -> str:
    """One line on where a worker pool's time went (``stats`` a
    :class:`~ptxforge.measure.pool.PoolStats`): working, idle with nothing queued (the
    tuner did not hand work over fast enough), and finished but waiting for the tuner's
    process to take the answer and hand over the next job; the idle time split by when
    (start-up, between rounds, tail) and the time to the first answer."""
    capacity = stats.workers * wall_s
    share = f" ({100 * stats.job_s / capacity:.0f}% of {stats.workers} x {wall_s:.1f} s)" if (
        capacity > 0) else ""
    split = ""
    if stats.starved_s > 0:
        split = (f"; idle at the start-up {stats.startup_starved_s:.2f}, between rounds "
                 f"{stats.between_starved_s:.2f}, in the tail {stats.tail_starved_s:.2f}")
    first = (f"; first answer {stats.first_s:.2f} s after the first job"
             if stats.first_s is not None else "")
    return (f"  {label}: {stats.workers} worker{'s' if stats.workers != 1 else ''}, "
            f"{stats.jobs} jobs: working {stats.job_s:.2f} worker-s{share}, idle with nothing "
            f"queued {stats.starved_s:.2f}, finished and waiting for the tuner's process "
            f"{stats.lag_s:.2f}, taking a job over {stats.handover_s:.2f}; open "
            f"{stats.open_s:.1f} s{split}{first}")


def format_profile(main: dict, builder, trials: int, wall_s: float, runner=None,
                   times=None) -> str:
    """The profile lines of a tuning run: ``main`` the stage seconds of the main process,
    ``builder`` the run's builder (its ``stage_totals`` and ``builds``, when it keeps
    them), ``runner`` the run's runner; builder and runner add where their workers' time
    went when they keep ``pool_stats`` (the idle time split into start-up, between rounds
    and tail), and a GPU runner its worker's time per candidate by part (``run_parts``:
    unpack, inputs, load, check, time). ``times`` (a
    :class:`~ptxforge.measure.measure.FlowTimes`) says when the first candidate was built,
    handed to the runner and measured."""
    lines = ["profile:"]
    known = ", ".join(f"{k} {main.get(k, 0.0):.2f} s" for k in MAIN_STAGES)
    lines.append(f"  main process: {known} (wall {wall_s:.2f} s)")
    totals = dict(getattr(builder, "stage_totals", {}) or {})
    builds = int(getattr(builder, "builds", 0) or 0)
    if builds:
        total = float(getattr(builder, "build_seconds", 0.0) or 0.0)
        # the stages that split a build first, then the finer or coarser ones reported
        names = [k for k in TOP_LEVEL if k in totals] + sorted(
            (k for k in totals if k not in TOP_LEVEL), key=lambda k: -totals[k])
        parts = ", ".join(f"{k} {totals[k]:.2f}" for k in names)
        lines.append(f"  build: {total:.2f} worker-s for {builds} candidates "
                     f"({1e3 * total / builds:.0f} ms each); by stage (s): {parts}")
    else:
        lines.append("  build: no stage times (the builder keeps none)")
    for label, side in (("builders", builder), ("runner", runner)):
        stats = getattr(side, "pool_stats", None)
        if stats is not None and stats.jobs:
            lines.append(format_pool(label, stats, wall_s))
    if times is not None:
        lines.append(f"  {times.line()}")
    parts = getattr(runner, "run_parts", None)
    if parts is not None and parts.candidates:
        # the GPU runner's worker: what its time per candidate went to
        lines.append(f"  runner parts: {parts.line()}")
    rate = trials / wall_s if wall_s > 0 else 0.0
    per = 1e3 * (main.get("search", 0.0) + main.get("learn", 0.0)) / max(trials, 1)
    lines.append(f"  {trials} trials, {rate:.2f} trials/s; main process {per:.1f} ms per "
                 "trial (search and learn)")
    return "\n".join(lines)
