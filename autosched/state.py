"""Search states: a sketch of the task plus one value per slot of the sketch.

A state turns into a pass pipeline (:meth:`State.pipeline`) or its text
(:meth:`State.pipeline_text`), and into the JSON payload records store next to that text
(:func:`state_payload`), from which :func:`state_from_payload` recovers it (by sketch name
and explicit slot values, so records stay readable and survive reordering of sketches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..passes.pipeline import Pipeline

PAYLOAD_KIND = "autosched"


@dataclass(frozen=True)
class State:
    """One point of the search space of a task: ``sketch`` indexes the task's sketches,
    ``values`` holds one value (table row or choice index) per slot of that sketch."""

    sketch: int
    values: tuple

    def pipeline(self, task) -> Pipeline:
        """The schedule passes of this state for ``task``."""
        return task.sketches[self.sketch].pipeline(self.values)

    def pipeline_text(self, task) -> str:
        """The text of :meth:`pipeline`, as measure inputs and records carry it."""
        return task.sketches[self.sketch].pipeline_text(self.values)

    def row(self, width: int) -> np.ndarray:
        """This state as a population row (sketch index, then values, zero-padded)."""
        out = np.zeros(width, dtype=np.int64)
        out[0] = self.sketch
        out[1: 1 + len(self.values)] = self.values
        return out

    @classmethod
    def from_row(cls, row, task) -> State:
        sk = int(row[0])
        n = len(task.sketches[sk].slots)
        return cls(sk, tuple(int(v) for v in row[1: 1 + n]))


def state_payload(task, state: State) -> dict:
    """The JSON-able description of ``state`` stored in records."""
    sk = task.sketches[state.sketch]
    return {"kind": PAYLOAD_KIND, "sketch": sk.name, "state": sk.describe(state.values)}


def state_from_payload(task, payload) -> State | None:
    """The state a record's payload describes, or None if it is not one of this task's
    sketches (another tuner's record, or a sketch this version no longer makes)."""
    if not isinstance(payload, dict) or payload.get("kind") != PAYLOAD_KIND:
        return None
    for k, sk in enumerate(task.sketches):
        if sk.name == payload.get("sketch"):
            try:
                return State(k, sk.row_of(payload.get("state", {})))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                return None
    return None
