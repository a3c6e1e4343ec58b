"""Tuners: random, grid search, genetic algorithm, and XGBoost-model-based."""

from .ga_tuner import GATuner
from .index_based_tuner import GridSearchTuner, RandomTuner
from .model_based_tuner import ModelBasedTuner, submodular_pick
from .sa_model_optimizer import SimulatedAnnealingOptimizer
from .tuner import Tuner
from .xgboost_cost_model import XGBoostCostModel
from .xgboost_tuner import XGBTuner

__all__ = ["GATuner", "GridSearchTuner", "ModelBasedTuner", "RandomTuner",
           "SimulatedAnnealingOptimizer", "Tuner", "XGBTuner", "XGBoostCostModel",
           "submodular_pick"]
