"""Every option more than one command takes, declared once: its flag, its destination, its
type (which is its validation where click can do it), its default and its help. Commands
use these decorators and never re-declare one (tests/test_cli_options.py checks every
command). Where a flag means different things in different commands (`--target` names the
target to tune for, or the boards whose tables price a report), each meaning is its own
declaration here, with its own name.

The checks click cannot do live here too, once: opening the database as a command needs it
(created, required, or optional), and reading --constraint texts."""
from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from edgetune.codegen.code_placement import FIRMWARE_CODE_RESERVE
from edgetune.tuner import STRATEGIES, TuningDatabase, canonical_strategy, deprecation_note, parse_bound
from edgetune.tuner.strategies import ALIASES, DEFAULT_STRATEGY

from ..session import MAX_SEED
from ..user_kernels import register_files
from .errors import UserError

DEFAULT_TARGET = "cortex-m55"
DEFAULT_DB = "edgetune.db"  # in the working directory, for every command that takes --db


class SharedOption(click.Option):
    """A click option declared in this module; `declared_as` names its declaration."""

    def __init__(self, *args, declared_as: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.declared_as = declared_as


class WholeNumber(click.IntRange):
    """A count (--budget, --jobs, --seed, ...): click's IntRange, whose words for a value that is
    no number at all ("'lots' is not a valid integer range.") left a new user asking what range
    they had missed, says "is not a whole number", and its help shows N, not INTEGER RANGE."""
    name = "whole number"

    def get_metavar(self, param, ctx):
        return "N"


def _shared(declared_as: str, *flags: str, **attrs):
    return click.option(*flags, cls=SharedOption, declared_as=declared_as, **attrs)


def _register_kernel_files(ctx, param, paths) -> tuple[str, ...]:
    ctx.meta["kernel_file_paths"] = tuple(paths)  # as typed: hints print commands to paste
    return register_files(paths)


# --- the target --------------------------------------------------------------------------
target = _shared("target", "--target", "target_name", default=DEFAULT_TARGET, show_default=True, metavar="NAME|FILE",
                 help="Target name, or path to a target .toml file.")
export_target = _shared("export_target", "--target", "target_name", default=None, metavar="NAME|FILE",
                        help="Target name or .toml file [default: the target the export names].")
fit_target = _shared("fit_target", "--target", "target_name", default=None, metavar="NAME|FILE",
                     help="Also check that the model's tensors fit this target's memory.")
pricing_targets = _shared("pricing_targets", "--target", "board_names", multiple=True, metavar="NAME|FILE",
                          help="A board file whose current cost tables price its trials (repeatable; shipped "
                               "targets are found by name).")
import_targets = _shared("import_targets", "--target", "target_files", multiple=True, metavar="FILE.toml",
                         help="A target file the imported trials name (shipped targets are known; repeatable).")

# --- the database ------------------------------------------------------------------------
db = _shared("db", "--db", "db_path", default=DEFAULT_DB, show_default=True, metavar="FILE",
             help="Tuning database (SQLite). Commands that tune create it; `model export` goes on without it when "
                  f"{DEFAULT_DB} is absent (saying so); every other reader refuses a missing file.")
# verify's --db adds a check that can fail (a kernel slower than the database's best, or one
# it holds no trial of), so it is asked for, never taken from a file lying in the folder.
check_db = _shared("check_db", "--db", "db_path", default=None, metavar="FILE",
                   help="Also check each kernel against the best trial this database holds for it (fails when "
                        "slower, or when it holds none), and say when it holds a better configuration.")

# --- what is minimised or chosen by --------------------------------------------------------
objective = _shared("objective", "--objective", default="", metavar="NAME",
                    help="Measured value to minimise, or to choose, check or plot by (instructions, cycles, "
                         "energy_uj, time_ns, code_bytes, ...) [default: what each workload was tuned for, else the "
                         "target's own unit: instructions on QEMU targets, time_ns on the host].")
recorded_objective = _shared("recorded_objective", "--objective", default="", metavar="NAME",
                             help="Recorded value to minimise [default: the recording's objective].")
constraints = _shared("constraints", "--constraint", "constraints", multiple=True, metavar="NAME<=VALUE",
                      help="Bound on another measured value, e.g. energy_uj<=2.5 (repeatable).")

# --- the search ----------------------------------------------------------------------------
def _strategy_name(ctx, param, name: str) -> str:
    """An old strategy name (tuner ALIASES) runs as the name it stands for, said in one line."""
    note = deprecation_note(name)
    if note:
        click.echo(f"edgetune: {note}", err=True)
    return canonical_strategy(name)


strategy = _shared("strategy", "--strategy", default=DEFAULT_STRATEGY, show_default=True, callback=_strategy_name,
                   help=f"One of: {', '.join(sorted(STRATEGIES))} ({', '.join(f'{old}: an old name of {new}' for old, new in sorted(ALIASES.items()))}; "
                        f"transfer+code: `transfer` that compiles its candidates and ranks them by the instructions their code is estimated to run, on targets "
                        f"with a disassembler; docs/code-ranking-live.md).")
random_strategy = _shared("random_strategy", "--strategy", default="random", show_default=True,
                          help="How Vela's options are searched (random search only).")
budget = _shared("budget", "--budget", default=20, show_default=True, type=WholeNumber(min=1),
                 help="Trials the workload should have stored when the run ends (a rerun goes on from the stored "
                      "ones); in `replay`, evaluations per repeat.")
# `model tune`'s default budget: this many trials per distinct workload, and never fewer than
# MODEL_TRIALS_AT_LEAST in all. A model of few workloads has the time of a larger one's tune:
# MobileNet-VWW's 20 workloads take 640 trials, ~580 s of CPU (the ~5 minutes on 2 cores issue
# 29 allows), DS-CNN's 4 took 128 (~70 s) and ended 14% above what 4x reached; at 512 they
# reach it (bench/model_budget.py, bench/model_speed.py; docs/models-tuning.md).
MODEL_TRIALS_PER_WORKLOAD = 32
MODEL_TRIALS_AT_LEAST = 512


def default_model_budget(distinct: int) -> int:
    """The trials `model tune` spends without --budget on a model of `distinct` workloads."""
    return max(MODEL_TRIALS_PER_WORKLOAD * distinct, MODEL_TRIALS_AT_LEAST)


model_budget = _shared("model_budget", "--budget", default=None, type=WholeNumber(min=0),
                       help=f"Trials for the whole model (default: {MODEL_TRIALS_PER_WORKLOAD} per distinct "
                            f"workload, at least {MODEL_TRIALS_AT_LEAST}). Counts stored trials: a rerun with a "
                            "larger budget goes on.")
seed = _shared("seed", "--seed", default=0, show_default=True, type=WholeNumber(0, MAX_SEED),
               help="Seed of every random choice (the search's proposals, the checks' inputs): the same seed "
                    "repeats the same run.")
fresh_seed = _shared("fresh_seed", "--seed", default=None, type=WholeNumber(0, MAX_SEED),
                     help="Seed of the fresh random inputs [default: a new one, printed].")
jobs = _shared("jobs", "--jobs", default=2, show_default=True, type=WholeNumber(min=1),
               help="Trials (or Vela runs) built and run at once.")

# --- what is tuned -------------------------------------------------------------------------
SHAPE_HELP = ("Workload shape, e.g. m=16,n=16,k=32; convolutions take TFLite's geometry, e.g. "
              "h=96,w=96,cin=3,cout=8,kh=3,kw=3,stride=2,pad=same (or stride_h/_w, dilation_h/_w, pad_top/_bottom/"
              "_left/_right; pad=P, pad=valid).")
shape = _shared("shape", "--shape", required=True, help=SHAPE_HELP)
shape_or_export = _shared("shape_or_export", "--shape", default=None, help=SHAPE_HELP + " Not with --from-export.")
device = _shared("device", "--device", default="cpu", show_default=True,
                 help="cpu, or an NPU of the target (ethos-u55, ethos-u65): Vela's options instead of a C kernel's.")
npu_device = _shared("npu_device", "--device", default="ethos-u55", show_default=True,
                     help="The NPU of the target to offload to (none: all on the CPU; a .tflite on a board without "
                          "an NPU is all CPU).")
kernel_file = _shared("kernel_file", "--kernel-file", "kernel_files", multiple=True, metavar="PATH",
                      callback=_register_kernel_files, is_eager=True,
                      help="A kernel of your own: a folder holding kernel.py, or a .py file (repeatable; "
                           "docs/own-kernel.md).")
workload = _shared("workload", "--workload", "workload_text", default=None, metavar="KERNEL[@vN][/TARGET[/SHAPE]]",
                   help="Only the trials of these workloads, e.g. matmul_s8/cortex-m55/m=8,n=16,k=16 (KERNEL@vN: one "
                        "definition of a kernel of your own).")

# --- what is written -------------------------------------------------------------------------
compilers = _shared("compilers", "--compiler", "compilers", multiple=True, metavar="NAME",
                    help="Only variants built by this compiler of the target (repeatable; default: every one): "
                         "measured by a tune, counted as best, taken by an export; a firmware built with one "
                         "toolchain gets no object of another.")
as_json = _shared("as_json", "--json", "as_json", is_flag=True, help="Print JSON instead of text (and no progress).")
class ByteCount(click.ParamType):
    """A positive whole number of bytes: anything else is one line naming the flag."""
    name = "bytes"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        text = str(value).strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
        self.fail(f"{value!r}: it needs a positive whole number of bytes, e.g. 200000", param, ctx)


max_ram = _shared("max_ram", "--max-ram", "max_ram", type=ByteCount(), default=None, metavar="BYTES",
                  help="Bound on the module's RAM as `model verify` counts it (arena with the layers' scratch, static "
                       "scratch and pointers, inputs and outputs, code and constants copied to RAM): the fastest "
                       "variants whose planned RAM fits, the code plan copying into RAM only what is left "
                       "(docs/model-ram.md).")


code_reserve = _shared("code_reserve", "--code-reserve", "code_reserve", type=WholeNumber(min=0),
                      default=FIRMWARE_CODE_RESERVE, show_default=True, metavar="BYTES",
                      help="Bytes of the firmware's code region (the ITCM on the M55) left to your own code, "
                           "vectors and C library: the code plan places the module in the rest "
                           "(docs/model-export.md).")


def out_folder(what: str):
    """--out naming a folder; `what` says what the command writes into it."""
    return _shared("out_folder", "--out", "out_dir", required=True, metavar="DIR", help=f"Folder for {what}.")


def out_file(what: str):
    """--out naming a file; `what` says which."""
    return _shared("out_file", "--out", "out_path", required=True, metavar="FILE", help=what)


# --- the checks click cannot make ------------------------------------------------------------------
def open_db(path: str) -> TuningDatabase:
    """The database a command writes to: created when absent."""
    return TuningDatabase(Path(path))


def open_existing_db(path: str) -> TuningDatabase:
    """The database a command only reads: a missing file is an error, not a new database."""
    if Path(path).is_dir():
        raise UserError(f"--db {path}: a folder, not a database file")
    if not Path(path).is_file():
        raise UserError(f"--db {path}: no such database (run `edgetune tune` or `edgetune model tune` first)")
    return TuningDatabase(Path(path))


def open_db_if_present(path: str) -> TuningDatabase | None:
    """The database a command can go without (`model export`): None when the default
    file is absent; a database named with --db must exist (a mistyped name is not silence)."""
    source = click.get_current_context().get_parameter_source("db_path")
    if source is ParameterSource.DEFAULT and not Path(path).exists():
        return None
    return open_existing_db(path)


def bounds_of(texts) -> tuple:
    """The --constraint texts as bounds (a malformed one is refused naming it)."""
    return tuple(parse_bound(text) for text in texts)
