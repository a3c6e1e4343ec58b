"""The file of a saved cost model (:meth:`XGBModel.save <ptxforge.autosched.XGBModel.save>`):
one ``.npz`` archive (numpy, no pickled objects) with the training samples and the trees.

Keys: ``format`` (:data:`FORMAT`), ``version``, ``feature_names`` (the columns, checked on
loading: a model of other features cannot rank these states), ``features``, ``margins``,
``labels``, ``weights`` (one row per measured state), ``task_keys`` and ``anchor_tags``,
``trees`` (the xgboost booster, UBJSON bytes) and ``num_trees``. The samples travel with the
trees so that a loaded model keeps learning: new measurements are boosted on top, and a
refit trains on the old samples and the new ones together.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from .features import FEATURE_NAMES

FORMAT = "ptxforge-cost-model"
VERSION = 1
_KEYS = ("format", "version", "feature_names", "features", "margins", "labels", "weights",
         "task_keys", "anchor_tags", "trees", "num_trees")


class CostModelFileError(ValueError):
    """A file that is not a cost model this version of ptxforge can load."""


def save_model(path: str | os.PathLike, model) -> None:
    """Write ``model`` (an :class:`~ptxforge.autosched.XGBModel` with samples) to ``path``
    (written whole to a temporary name and renamed, so a reader never sees half a file)."""
    s = model.samples
    raw = bytes(model.booster.save_raw(raw_format="ubj")) if model.booster is not None \
        else b""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez_compressed(
            f, format=np.array(FORMAT), version=np.array(VERSION),
            feature_names=np.array(FEATURE_NAMES), features=s.features, margins=s.margins,
            labels=s.labels, weights=s.weights, task_keys=s.keys.astype(str),
            anchor_tags=s.tags.astype(str),
            trees=np.frombuffer(raw, dtype=np.uint8), num_trees=np.array(model.num_trees))
    os.replace(tmp, path)


def load_model(path: str | os.PathLike) -> tuple:
    """``(samples, trees bytes or None, number of trees)`` of a file written by
    :func:`save_model`; :class:`CostModelFileError` names what is wrong with any other."""
    from .cost_model import SampleSet

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"cost model file {path!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise CostModelFileError(
            f"{path} is not a ptxforge cost model file ({type(e).__name__}: {e}); save one "
            "with XGBModel.save, `ptxforge tune-network ... --save-model PATH` or "
            "`ptxforge records train-model LOG -o PATH`") from None
    missing = [k for k in _KEYS if k not in data]
    if missing or str(data.get("format", "")) != FORMAT:
        raise CostModelFileError(
            f"{path} is a numpy archive but not a ptxforge cost model (missing "
            f"{', '.join(missing) or 'the format tag'}); save one with XGBModel.save")
    if int(data["version"]) != VERSION:
        raise CostModelFileError(f"{path} is a cost model of format version "
                                 f"{int(data['version'])}; this ptxforge reads {VERSION}: "
                                 "train it again from its records (records train-model)")
    names = tuple(str(x) for x in data["feature_names"])
    if names != FEATURE_NAMES:
        gone = sorted(set(names) - set(FEATURE_NAMES))
        new = sorted(set(FEATURE_NAMES) - set(names))
        raise CostModelFileError(
            f"{path} was trained on other features (not here: {gone or 'none'}; new here: "
            f"{new or 'none'}; or in another order): train it again from its records "
            "(records train-model)")
    n = len(data["labels"])
    shapes_ok = (data["features"].shape == (n, len(FEATURE_NAMES))
                 and all(len(data[k]) == n
                         for k in ("margins", "weights", "task_keys", "anchor_tags")))
    if not shapes_ok or not np.isfinite(data["features"]).all() \
            or not all(np.isfinite(data[k]).all() for k in ("labels", "margins", "weights")) \
            or (data["weights"] <= 0).any():
        raise CostModelFileError(f"{path}: the samples are inconsistent (rows of different "
                                 "lengths, non-finite values or weights that are not "
                                 "positive); the file is damaged")
    samples = SampleSet()
    keys, tags = data["task_keys"], data["anchor_tags"]
    for key in dict.fromkeys(keys.tolist()):
        sel = keys == key
        samples.add(data["features"][sel], data["margins"][sel], data["labels"][sel],
                    str(key), str(tags[sel][0]), data["weights"][sel])
    raw = data["trees"].tobytes() or None
    return samples, raw, int(data["num_trees"])
