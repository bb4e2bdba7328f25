"""edgetune.tuner: a pure search library (spaces, strategies, trials, the database).

Knows nothing of C, compilers or emulators; codegen declares spaces with these types.
"""
from .database import DatabaseError, Record, TuningDatabase, Workload
from .space import Config, Constraint, Param, Space, SpaceError, choice, powers_of_two
from .strategies import STRATEGIES, Exhaustive, PriorTrials, RandomSearch, Strategy, make_strategy
from .trial import Outcome, Trial

__all__ = ["Config", "Constraint", "DatabaseError", "Exhaustive", "Outcome", "Param", "PriorTrials", "RandomSearch", "Record",
           "STRATEGIES", "Space", "SpaceError", "Strategy", "Trial", "TuningDatabase", "Workload", "choice",
           "make_strategy", "powers_of_two"]
