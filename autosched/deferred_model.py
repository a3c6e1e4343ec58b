"""A cost model made in the background while a tuning run starts.

:class:`~ptxforge.autosched.cost_model.XGBModel` imports xgboost when it is made, and
xgboost imports scikit-learn and scipy: 3.6 s on the loaded 2-core development machine,
every second of it before the first round of a network run was searched and its
builders had work (``tune-network bert`` on the H200 machine opened its builders 3.3 s
into a 31.7 s run). Made in a thread instead, the model is ready by the time it learns:
a model with no samples scores states by the analytical estimate alone, so the first
rounds are searched with those scores, as they would be with the model itself, while the
import runs beside them. The first update (the first round measured) waits for the model;
from then on every call goes to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from .cost_model import CostModel, XGBModel


class _NoSamples:
    """What :meth:`XGBModel.predict` asks of a model with no samples: its trees are not
    used for any task (so its scores are the analytical prior, the same as a new
    ``XGBModel`` gives, computed by that same method)."""

    @staticmethod
    def uses_trees_for(task) -> bool:
        return False


class DeferredModel(CostModel):
    """The model ``make()`` returns, made in a background thread (``make`` must return a
    model that, before its first update, scores as an :class:`XGBModel` with no samples
    does). Until its first :meth:`update`, :meth:`predict` gives those scores without
    waiting; everything else waits for the model and goes to it (attributes too, such as
    ``save`` and ``num_samples``). An exception in ``make`` is raised by the first call
    that waits."""

    def __init__(self, make: Callable[[], CostModel], name: str = "ptxforge-cost-model"):
        self._future: Future = Future()
        self._learned = False

        def build() -> None:
            try:
                self._future.set_result(make())
            except BaseException as e:  # raised again where the model is needed
                self._future.set_exception(e)

        threading.Thread(target=build, name=name, daemon=True).start()

    @property
    def model(self) -> CostModel:
        """The model (waits until it is made)."""
        return self._future.result()

    @property
    def ready(self) -> bool:
        """Whether the model is made (or failed)."""
        return self._future.done()

    def predict(self, task, pop, feats=None, est=None):
        if not self._learned and not self._future.done():
            return XGBModel.predict(_NoSamples(), task, pop, feats, est)
        return self.model.predict(task, pop, feats, est)

    def update(self, task, pop, results) -> None:
        self._learned = True
        self.model.update(task, pop, results)

    def update_from_file(self, file_name: str) -> None:
        self._learned = True
        self.model.update_from_file(file_name)

    def __getattr__(self, name: str):
        # only for what this class does not define: the model's own attributes
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.model, name)


__all__ = ["DeferredModel"]
