"""Cost-model transfer on the command line: ``--load-model`` / ``--save-model`` of the tuning
commands, and ``records train-model LOG -o PATH``."""

from __future__ import annotations

import os

from .progress import logger


def add_model_arguments(p) -> None:
    """``--load-model PATH`` and ``--save-model PATH`` of a tuning command."""
    p.add_argument("--load-model", metavar="PATH",
                   help="seed the cost model with a saved one (of other networks' records: "
                        "--save-model or `records train-model`)")
    p.add_argument("--save-model", metavar="PATH",
                   help="save the cost model (its samples and trees) when tuning ends")


def check_model_file(path: str | None) -> None:
    """Refuse a ``--load-model`` file that is missing or not a model, before any tuning."""
    if path is None:
        return
    from ..autosched.model_file import load_model

    samples, _, trees = load_model(path)
    logger.info(f"cost model {path}: {len(samples)} samples, {trees} trees")


def save_model(model, path: str | None) -> None:
    """``--save-model``: write ``model`` to ``path`` (a model without samples is not
    written: say so)."""
    if path is None:
        return
    if not hasattr(model, "save") or not getattr(model, "num_samples", 0):
        logger.warning(f"--save-model {path}: the cost model has nothing to save "
                       "(no successful trial, or --model random)")
        return
    model.save(path)
    logger.info(f"cost model saved to {path} ({model.num_samples} samples)")


def train_model_command(args) -> int:
    """``records train-model LOG -o PATH``: fit a cost model on a record file's
    auto-scheduler records (a network's with ``--network``, which registers its tasks)."""
    from .. import autosched

    if not args.output:
        raise SystemExit("records train-model needs --output PATH")
    if not os.path.isfile(args.log):
        raise SystemExit(f"{args.log}: no such record file")
    if args.network:
        from .. import graph

        net, params, _, _ = graph.get_network(args.network, args.batch_size, args.layout,
                                              image_size=args.image_size)
        autosched.extract_tasks(net, params, "cuda", precision=args.dtype)
    model = autosched.XGBModel()
    model.update_from_file(args.log)
    if not model.num_samples:
        raise SystemExit(
            f"{args.log} holds no auto-scheduler record of a workload registered here: "
            "for a network's log, name the network (--network NAME --dtype DTYPE)")
    model.save(args.output)
    print(f"trained on {model.num_samples} records of {len(model.samples.count_by_task())} "
          f"workloads ({model.num_trees} trees); saved to {args.output}")
    return 0
