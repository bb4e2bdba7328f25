"""edgetune.tuner: a pure search library (spaces, strategies, trials, the database).

Knows nothing of C, compilers or emulators; codegen declares spaces with these types.
"""
from .database import Batch, Claim, DatabaseError, ImportResult, Owner, Record, TrialSelection, TuningDatabase, Workload
from .objective import Bound, Goal, ObjectiveError, check_names, feasible, parse_bound, resolve_goal
from .space import Config, Constraint, Param, Space, SpaceError, choice, powers_of_two
from .strategies import (STRATEGIES, Exhaustive, PriorTrials, RandomSearch, Strategy, ValueRoles, canonical_strategy,
                         check_strategy, deprecation_note, make_strategy)
from .trial import Outcome, Trial, replaceable

__all__ = ["Batch", "Bound", "Claim", "Config", "Constraint", "DatabaseError", "Exhaustive", "Goal", "ImportResult",
           "ObjectiveError", "Outcome", "Owner", "Param", "PriorTrials", "RandomSearch", "Record", "TrialSelection",
           "canonical_strategy", "check_names", "check_strategy", "deprecation_note", "feasible", "parse_bound", "resolve_goal",
           "STRATEGIES", "Space", "SpaceError", "Strategy", "Trial", "TuningDatabase", "ValueRoles", "Workload", "choice",
           "make_strategy", "replaceable", "powers_of_two"]
