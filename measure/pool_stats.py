"""Where a :class:`~ptxforge.measure.pool.WorkerPool`'s worker time went (the figures
``--profile`` prints for the builders and the runner)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolStats:
    """Where a pool's worker time went, in worker-seconds.

    ``jobs``: jobs finished; ``job_s``: the time the workers ran them (as the workers
    measured it); ``lag_s``: the time finished workers with no job sent ahead waited for
    this process to read their answer (and give them the next job); ``starved_s``: started
    workers idle while no job was queued (nothing to do: the caller did not submit work
    fast enough); ``handover_s``: from handing a job over (or from the end of the job
    before, for a job sent ahead) to the worker starting it (the message through the pipe
    and unpickled: a task the worker does not know yet arrives whole); ``open_s``: seconds
    from the first job submitted to the last answer read. ``starved_s`` is split by when
    it happened: ``startup_starved_s`` before the first answer was read (the workers up and
    waiting while the caller prepares its first work), ``tail_starved_s`` after the last
    job was submitted (the workers running out of work at the end; read after the last
    job, as a closed pool's figures are), the rest between those (the caller not keeping
    up in the middle of the run). ``first_s``: from the first job submitted to the first
    answer read (the first worker's start-up and its first job)."""

    workers: int = 0
    jobs: int = 0
    job_s: float = 0.0
    lag_s: float = 0.0
    starved_s: float = 0.0
    open_s: float = 0.0
    handover_s: float = 0.0
    startup_starved_s: float = 0.0
    tail_starved_s: float = 0.0
    first_s: float | None = None

    @property
    def between_starved_s(self) -> float:
        """Idle worker-seconds with nothing queued between the start-up and the tail."""
        return max(0.0, self.starved_s - self.startup_starved_s - self.tail_starved_s)

    def merged(self, other: PoolStats) -> PoolStats:
        """The sums of two pools' (or two lives of one pool's) figures; the first answer
        of the earlier life."""
        return PoolStats(max(self.workers, other.workers), self.jobs + other.jobs,
                         self.job_s + other.job_s, self.lag_s + other.lag_s,
                         self.starved_s + other.starved_s, self.open_s + other.open_s,
                         self.handover_s + other.handover_s,
                         self.startup_starved_s + other.startup_starved_s,
                         self.tail_starved_s + other.tail_starved_s,
                         self.first_s if self.first_s is not None else other.first_s)
