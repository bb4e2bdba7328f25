"""Issue 13's promise, tried as an attacker and a careless user would: bad inputs are
refused with one line naming the culprit (exit 2) and leave the database byte for byte as
it was; nothing forged or damaged becomes a best or breaks a later command.

The cases are entries of tables, one test per table: to add a class of issue 13, add its
entries (a `BadInput` builds its files in a temporary folder and returns the command line
to run). `bench/robustness.py` runs the same kinds of attack through the installed command
and prints the counts.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.session import workload_of
from edgetune.targets import get_target
from edgetune.tuner import Config, Outcome, Trial, TuningDatabase

SHAPE = {"m": 2, "n": 2, "k": 2}
SHAPE_TEXT = "m=2,n=2,k=2"
GOOD_CONFIG = [["tile_m", 1], ["tile_n", 1], ["unroll_k", 1], ["vector", "c"], ["layout", "rowmajor"],
               ["compiler", "gcc"], ["opt", "O2"]]
STORED_TIME_NS = 10.0  # the stored (honest) best of the workload


def host_workload():
    return workload_of(get_kernel("matmul_s8"), get_target("host"), SHAPE)


def stored_db(folder: Path) -> Path:
    """A database holding one honest host trial of matmul_s8 m=2,n=2,k=2."""
    path = folder / "stored.db"
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    space = kernel.tuning_space(target, SHAPE)
    db = TuningDatabase(path)
    db.record(host_workload(), Trial(space.make(dict(GOOD_CONFIG)), Outcome.OK,
                                     {"time_ns": STORED_TIME_NS, "code_bytes": 400, "ram_bytes": 12}), "random", 0)
    db.close()
    return path


def line(**changes) -> str:
    """One JSON line as `db export` writes it for the stored workload, with `changes`
    (a__b sets line["a"]["b"]; the value REMOVE deletes the key)."""
    w = host_workload()
    data = {"format": "edgetune-trial", "schema_version": 2,
            "workload": {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target,
                         "shape": [list(p) for p in w.shape], "toolchain": w.toolchain},
            "config": [list(item) for item in GOOD_CONFIG[:1]] + [["tile_n", 2]] + [list(i) for i in GOOD_CONFIG[2:]],
            "outcome": "ok", "values": {"time_ns": 12.5, "code_bytes": 420, "ram_bytes": 12}, "error": "",
            "info": {"compiler_version": "gcc 12.2"}, "strategy": "random", "seed": 0,
            "created": "2026-11-01T00:00:00Z", "measured_by": "lab-host-1", "measured_at": "2026-11-01T00:00:00Z"}
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        if value is REMOVE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return json.dumps(data)


REMOVE = object()


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def assert_one_line_refusal(code: int, out: str, *culprits: str) -> None:
    lines = [text for text in out.splitlines() if text.strip()]
    assert code == 2, out
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), out
    for culprit in culprits:
        assert culprit in lines[0], out


def best_time(db: Path) -> tuple[int, str]:
    code, out = cli("best", "matmul_s8", "--target", "host", "--shape", SHAPE_TEXT, "--db", db, "--json")
    return code, out


# --- bad inputs: one line, exit 2, the database unchanged ---------------------------------------------------
@dataclass(frozen=True)
class BadInput:
    """A command that must be refused. `build(folder, db)` writes what the command reads into
    `folder` and returns its arguments; the refusal names every one of `culprits`."""

    item: str  # the item of issue 13, e.g. "13.1"
    name: str
    build: Callable[[Path, Path], list]
    culprits: tuple[str, ...]


def forged_import(*lines: str) -> Callable[[Path, Path], list]:
    """`db import` of a file whose first line is good and whose later lines are `lines`."""
    def build(folder: Path, db: Path) -> list:
        path = folder / "shared.jsonl"
        path.write_text("\n".join((line(), *lines)) + "\n", encoding="utf-8")
        return ["db", "import", path, "--db", db]
    return build


def forged_values(**values) -> Callable[[Path, Path], list]:
    return forged_import(line(values={"code_bytes": 420, "ram_bytes": 12, **values}))


IMPORT_CASES = [
    # the measured values: finite, non-negative numbers, integers where they count things
    BadInput("13.1", "negative value", forged_values(time_ns=-5.0), ("line 2", "values.time_ns", "negative")),
    BadInput("13.1", "NaN", forged_import(line().replace("12.5", "NaN")), ("line 2", "NaN")),
    BadInput("13.1", "Infinity", forged_import(line().replace("12.5", "Infinity")), ("line 2", "Infinity")),
    BadInput("13.1", "overflowing number", forged_import(line().replace("12.5", "1e999")),
             ("line 2", "values.time_ns", "finite")),
    BadInput("13.1", "string value", forged_values(time_ns="fast"), ("line 2", "values.time_ns", "not a number")),
    BadInput("13.1", "boolean value", forged_values(time_ns=True), ("line 2", "values.time_ns")),
    BadInput("13.1", "fractional count", forged_values(time_ns=3.0, code_bytes=1.5),
             ("line 2", "values.code_bytes", "integer")),
    BadInput("13.1", "nested value", forged_values(time_ns=3.0, mix={"alu": -1}), ("line 2", "values.mix.alu")),
    BadInput("13.1", "values a list", forged_import(line(values=[1])), ("line 2", "values")),
    BadInput("13.1", "ok without the unit", forged_import(line(values={"code_bytes": 1})),
             ("line 2", "values.time_ns", "missing")),
    BadInput("13.1", "failure with values", forged_import(line(outcome="compile")), ("line 2", "values", "compile")),
    # the configuration: a legal point of the kernel's space, each value of the declared type
    BadInput("13.1", "value outside the space", forged_import(line(config=[["tile_m", 3], *GOOD_CONFIG[1:]])),
             ("line 2", "config.tile_m", "3")),
    BadInput("13.1", "string for an integer", forged_import(line(config=[["tile_m", "1"], *GOOD_CONFIG[1:]])),
             ("line 2", "config.tile_m")),
    BadInput("13.1", "float for an integer", forged_import(line(config=[["tile_m", 1.0], *GOOD_CONFIG[1:]])),
             ("line 2", "config.tile_m")),
    BadInput("13.1", "boolean for an integer", forged_import(line(config=[["tile_m", True], *GOOD_CONFIG[1:]])),
             ("line 2", "config.tile_m")),
    BadInput("13.1", "unknown parameter", forged_import(line(config=[*GOOD_CONFIG, ["evil", 1]])),
             ("line 2", "config.evil")),
    BadInput("13.1", "missing parameter", forged_import(line(config=GOOD_CONFIG[1:])), ("line 2", "config", "tile_m")),
    BadInput("13.1", "parameter twice", forged_import(line(config=[*GOOD_CONFIG, ["tile_m", 2]])),
             ("line 2", "config.tile_m", "twice")),
    BadInput("13.1", "illegal combination",
             forged_import(line(config=[["tile_m", 1], ["tile_n", 1], ["unroll_k", 1], ["vector", "avx2"],
                                        ["layout", "rowmajor"], ["compiler", "gcc"], ["opt", "O2"]])),
             ("line 2", "config", "not legal")),
    BadInput("13.1", "shell payload in a value",
             forged_import(line(config=[*GOOD_CONFIG[:3], ["vector", "c; touch PWNED"], *GOOD_CONFIG[4:]])),
             ("line 2", "config.vector")),
    BadInput("13.1", "C payload in a value",
             forged_import(line(config=[*GOOD_CONFIG[:6], ["opt", 'O2 */\n#include "/etc/passwd"']])),
             ("line 2", "config.opt")),
    BadInput("13.1", "flag in a value", forged_import(line(config=[*GOOD_CONFIG[:6], ["opt", "-fplugin=x.so"]])),
             ("line 2", "config.opt")),
    # the workload: a kernel, template version, target and shape this edgetune knows
    BadInput("13.1", "unknown kernel", forged_import(line(workload__kernel="rootkit")), ("line 2", "workload.kernel")),
    BadInput("13.1", "other template version", forged_import(line(workload__kernel_version=99)),
             ("line 2", "workload.kernel_version")),
    BadInput("13.1", "unknown target", forged_import(line(workload__target="mars")), ("line 2", "workload.target")),
    BadInput("13.1", "target named like a file", forged_import(line(workload__target="evil.toml")),
             ("line 2", "workload.target")),
    BadInput("13.1", "shape keys", forged_import(line(workload__shape=[["m", 2], ["n", 2], ["q", 2]])),
             ("line 2", "workload", "q")),
    BadInput("13.1", "shape order", forged_import(line(workload__shape=[["n", 2], ["m", 2], ["k", 2]])),
             ("line 2", "workload.shape")),
    BadInput("13.1", "huge kernel version", forged_import(line(workload__kernel_version=1 << 70)),
             ("line 2", "workload.kernel_version")),
    # the rest of the line
    BadInput("13.1", "unknown outcome", forged_import(line(outcome="great")), ("line 2", "outcome", "great")),
    BadInput("13.1", "error not text", forged_import(line(outcome="compile", values={}, error=7)),
             ("line 2", "error")),
    BadInput("13.1", "error too long", forged_import(line(outcome="compile", values={}, error="x" * 100_000)),
             ("line 2", "error", "characters")),
    BadInput("13.1", "info nested", forged_import(line(info={"cflags": {"a": 1}})), ("line 2", "info.cflags")),
    BadInput("13.1", "info name", forged_import(line(info={"a b": 1})), ("line 2", "info")),
    BadInput("13.1", "seed out of range", forged_import(line(seed=1 << 80)), ("line 2", "seed")),
    BadInput("13.1", "no created stamp", forged_import(line(created=REMOVE)), ("line 2", "created")),
    BadInput("13.1", "not JSON", forged_import("{not json"), ("line 2", "JSON")),
    BadInput("13.1", "bad line among many", forged_import(line(), line(values={"time_ns": -1})), ("line 3",)),
    # removing: a selection must name something
    BadInput("13.1", "remove nothing named", lambda folder, db: ["db", "remove", "--db", db],
             ("--workload", "--batch")),
    BadInput("13.1", "remove bad workload", lambda folder, db: ["db", "remove", "--db", db, "--workload", "a/b/c/d"],
             ("--workload",)),
    BadInput("13.1", "remove bad shape", lambda folder, db: ["db", "remove", "--db", db,
                                                             "--workload", "matmul_s8/host/m=x"], ("shape",)),
]
# Other classes of issue 13 add their tables here and to BAD_INPUTS.
BAD_INPUTS = [*IMPORT_CASES]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[f"{c.item}-{c.name}" for c in BAD_INPUTS])
def test_a_bad_input_is_refused_in_one_line_and_changes_nothing(tmp_path, case):
    db = stored_db(tmp_path)
    before = db.read_bytes()
    args = case.build(tmp_path, db)
    code, out = cli(*args)
    assert_one_line_refusal(code, out, *case.culprits)
    assert db.read_bytes() == before
    assert not list(tmp_path.rglob("PWNED*"))


def test_a_refused_import_into_a_new_database_creates_no_file(tmp_path):
    path = tmp_path / "shared.jsonl"
    path.write_text(line() + "\n" + line(values={"time_ns": -1}) + "\n")
    code, out = cli("db", "import", path, "--db", tmp_path / "new.db")
    assert_one_line_refusal(code, out, "line 2")
    assert not (tmp_path / "new.db").exists()


# --- a forged but well-formed import: seen, listed, removable -----------------------------------------------
def test_a_forged_best_is_removed_with_its_batch_and_the_true_best_returns(tmp_path):
    db = stored_db(tmp_path)
    forged = tmp_path / "forged.jsonl"
    forged.write_text(line(values={"time_ns": 0.001, "code_bytes": 1, "ram_bytes": 1}) + "\n")
    code, out = cli("db", "import", forged, "--db", db)
    assert code == 0 and "imported 1 trials" in out and "batch 1" in out, out
    code, out = best_time(db)
    assert code == 0 and json.loads(out)["best"]["time_ns"] == 0.001
    code, out = cli("db", "batches", "--db", db, "--json")
    assert code == 0 and [(b["batch"], b["source"], b["stored"]) for b in json.loads(out)] == [(1, str(forged), 1)]
    before = db.read_bytes()
    code, out = cli("db", "remove", "--db", db, "--batch", 1, "--dry-run")
    assert code == 0 and "would remove 1 trials" in out and db.read_bytes() == before, out
    code, out = cli("db", "remove", "--db", db, "--batch", 1)
    assert code == 0 and "removed 1 trials" in out, out
    code, out = best_time(db)
    assert code == 0 and json.loads(out)["best"]["time_ns"] == STORED_TIME_NS
    assert json.loads(cli("db", "batches", "--db", db, "--json")[1]) == []


def test_imported_configurations_are_stored_in_the_spaces_own_form(tmp_path):
    db = stored_db(tmp_path)
    shuffled = line(config=list(reversed(json.loads(line())["config"])))
    path = tmp_path / "shared.jsonl"
    path.write_text(shuffled + "\n")
    assert cli("db", "import", path, "--db", db)[0] == 0
    records = TuningDatabase(db).records(host_workload())
    assert [name for name, _ in records[-1].trial.config.items] == [name for name, _ in GOOD_CONFIG]


def test_remove_by_workload_and_by_trial(tmp_path):
    db = stored_db(tmp_path)
    other = TuningDatabase(db)
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    shape = {"m": 4, "n": 2, "k": 2}
    space = kernel.tuning_space(target, shape)
    for index in space.legal_indices()[:3]:
        other.record(workload_of(kernel, target, shape), Trial(space.config_at(int(index)), Outcome.OK,
                                                               {"time_ns": 5.0}), "random", 0)
    other.close()
    code, out = cli("db", "remove", "--db", db, "--workload", "matmul_s8/host/k=2,n=2,m=4", "--dry-run")
    assert code == 0 and "would remove 3 trials" in out, out
    code, out = cli("db", "remove", "--db", db, "--workload", "matmul_s8@v99/host")
    assert code == 0 and "removed 0 trials" in out, out
    code, out = cli("db", "remove", "--db", db, "--workload", "matmul_s8/host/m=4,n=2,k=2")
    assert code == 0 and "removed 3 trials" in out, out
    remaining = TuningDatabase(db).records(host_workload())
    assert len(remaining) == 1
    code, out = cli("db", "remove", "--db", db, "--trial", remaining[0].id)
    assert code == 0 and "removed 1 trials" in out
    assert TuningDatabase(db).workloads() == []


# --- values stored by other means: a clear error naming the trial, never a traceback --------------------------
DAMAGED_ROWS = [
    ("string value", "measured", '{"time_ns": "fast"}'),
    ("NaN", "measured", '{"time_ns": NaN}'),
    ("negative", "measured", '{"time_ns": -1.0}'),
    ("values a list", "measured", "[1, 2]"),
    ("config value a list", "config", '[["tile_m", [1]]]'),
    ("info not an object", "info", '"x"'),
]


@pytest.mark.parametrize("column, text", [(c, t) for _, c, t in DAMAGED_ROWS], ids=[n for n, _, _ in DAMAGED_ROWS])
@pytest.mark.parametrize("command", ["best", "tune", "export"])
def test_a_damaged_stored_trial_stops_commands_naming_its_id(tmp_path, column, text, command):
    db = stored_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE trials SET {column} = ? WHERE id = 1", (text,))
    conn.commit()
    conn.close()
    args = {"best": ["best", "matmul_s8", "--target", "host", "--shape", SHAPE_TEXT],
            "tune": ["tune", "matmul_s8", "--target", "host", "--shape", SHAPE_TEXT, "--budget", "1"],
            "export": ["export", "--target", "host", "--out", tmp_path / "out"]}[command]
    code, out = cli(*args, "--db", db)
    assert_one_line_refusal(code, out, "trial 1", "db remove --trial 1")
    assert cli("db", "remove", "--db", db, "--trial", 1) == (0, "removed 1 trials\n")


def test_a_damaged_stored_workload_names_the_trial(tmp_path):
    db = stored_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE trials SET kernel = 'a b; x' WHERE id = 1")
    conn.commit()
    conn.close()
    code, out = cli("best", "matmul_s8", "--target", "host", "--shape", SHAPE_TEXT, "--db", db)
    assert_one_line_refusal(code, out, "trial 1", "kernel")


def test_a_users_own_target_is_named_with_its_file_never_looked_up_from_the_line(tmp_path):
    from edgetune.targets import target_file
    board = tmp_path / "my-board.toml"
    board.write_text(f'extends = "{target_file("cortex-m55")}"\nname = "my-board"\n')
    target = get_target(str(board))
    kernel = get_kernel("matmul_s8")
    config = kernel.tuning_space(target, SHAPE).config_at(int(kernel.tuning_space(target, SHAPE).legal_indices()[0]))
    text = line(workload__target="my-board", workload__toolchain=workload_of(kernel, target, SHAPE).toolchain,
                config=[list(item) for item in config.items], values={"instructions": 100, "code_bytes": 1})
    path = tmp_path / "shared.jsonl"
    path.write_text(text + "\n")
    db = tmp_path / "new.db"
    assert_one_line_refusal(*cli("db", "import", path, "--db", db), "line 1", "workload.target", "--target")
    assert_one_line_refusal(*cli("db", "import", path, "--db", db, "--target", "my-board"), "--target", ".toml")
    code, out = cli("db", "import", path, "--db", db, "--target", board)
    assert code == 0 and "imported 1 trials" in out, out
    code, out = cli("best", "matmul_s8", "--target", board, "--shape", SHAPE_TEXT, "--db", db, "--json")
    assert code == 0 and json.loads(out)["best"]["instructions"] == 100, out


def test_a_file_from_before_batches_takes_batches_after_upgrading(tmp_path):
    from test_migration import v1_rows, write_v1
    db = tmp_path / "old.db"
    write_v1(db, v1_rows())
    path = tmp_path / "shared.jsonl"
    path.write_text(line() + "\n")
    code, out = cli("db", "import", path, "--db", db)
    assert code == 0 and "as batch 1" in out, out
    assert json.loads(cli("db", "batches", "--db", db, "--json")[1])[0]["stored"] == 1
    assert cli("db", "remove", "--db", db, "--batch", 1) == (0, "removed 1 trials\n")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM trials WHERE batch IS NULL").fetchone()[0] == len(v1_rows())
    conn.close()


def test_npu_trials_are_checked_against_vela_options():
    from edgetune.npu import NPU_MODEL_VERSION, NPU_OPERATORS, npu_space
    from edgetune.sharing import ImportCheck
    from edgetune.tuner import Workload
    operator = next(iter(NPU_OPERATORS.values()))
    target = get_target("cortex-m55")
    shape = operator.parse_shape(operator.example)
    config = next(iter(npu_space(target, target.npus[0], operator, shape)))
    workload = Workload(operator.name, NPU_MODEL_VERSION, f"cortex-m55+{target.npus[0].name}", tuple(shape.items()), "0123456789ab")
    check = ImportCheck()
    assert check(workload, Trial(config, Outcome.OK, {"total_cycles": 5})).config == config
    with pytest.raises(ValueError, match="values.total_cycles"):
        check(workload, Trial(config, Outcome.OK, {"npu_cycles": 5}))
    bad = Config(tuple((name, 3) if name == "macs" else (name, value) for name, value in config.items))
    with pytest.raises(ValueError, match="config.macs"):
        check(workload, Trial(bad, Outcome.OK, {"total_cycles": 5}))
    with pytest.raises(ValueError, match="workload.target"):
        check(Workload(operator.name, NPU_MODEL_VERSION, "cortex-m55+ethos-u99", tuple(shape.items()), "0123456789ab"),
              Trial(config, Outcome.OK, {"total_cycles": 5}))
