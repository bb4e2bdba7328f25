"""edgetune.tuner: a pure search library (spaces, strategies, trials, the database).

Knows nothing of C, compilers or emulators; codegen declares spaces with these types.
"""
from .database import Claim, DatabaseError, Owner, Record, TuningDatabase, Workload
from .objective import Bound, ObjectiveError, check_names, feasible, parse_bound
from .space import Config, Constraint, Param, Space, SpaceError, choice, powers_of_two
from .strategies import STRATEGIES, Exhaustive, PriorTrials, RandomSearch, Strategy, make_strategy
from .trial import Outcome, Trial

__all__ = ["Bound", "Claim", "Config", "Constraint", "DatabaseError", "Exhaustive", "ObjectiveError", "Outcome", "Owner", "Param",
           "PriorTrials", "RandomSearch", "Record", "check_names", "feasible", "parse_bound",
           "STRATEGIES", "Space", "SpaceError", "Strategy", "Trial", "TuningDatabase", "Workload", "choice",
           "make_strategy", "powers_of_two"]
