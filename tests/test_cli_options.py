"""The command line's shared options (app/cli/options.py): every option two commands take is
declared once and used as such everywhere, `--db` has one default, so `model tune` then
`model export` with the defaults exports the tuned kernels; and `edgetune --help` starts
without the plotting and learning libraries (imported only by the commands that use them)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edgetune.cli import main, options

DS_CNN = Path(__file__).parent / "data" / "models" / "ds_cnn_kws.tflite"  # the smallest committed model
SHARED = {"--compiler", "--target", "--db", "--objective", "--constraint", "--seed", "--jobs", "--budget", "--strategy", "--out",
          "--json", "--shape", "--device", "--kernel-file", "--workload"}


def commands(command: click.Command, path: str = "edgetune"):
    """(path, command) of `command` and of every command under it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, f"{path} {name}")


def shared_flag_uses() -> list[tuple[str, click.Option]]:
    return [(path, param) for path, command in commands(main) for param in command.params
            if isinstance(param, click.Option) and SHARED & set(param.opts)]


def test_every_shared_option_of_every_command_is_declared_in_the_options_module():
    uses = shared_flag_uses()
    assert {flag for _, param in uses for flag in param.opts} >= SHARED  # each is in use somewhere
    redeclared = [f"{path} {'/'.join(param.opts)}" for path, param in uses if not isinstance(param, options.SharedOption)]
    assert redeclared == [], "declare these in app/cli/options.py and use the declaration"
    assert {param.declared_as for _, param in uses} <= set(vars(options))


def test_one_declaration_is_one_type_default_and_destination_wherever_it_is_used():
    seen: dict[str, tuple] = {}
    for path, param in shared_flag_uses():
        facts = (param.name, repr(param.type), param.default, param.required, param.multiple, param.is_flag)
        assert seen.setdefault(param.declared_as, facts) == facts, f"{path}: {param.declared_as}"


def test_every_command_that_takes_a_database_defaults_to_the_same_file():
    """All but verify, whose --db adds a check that can fail: asked for, not found lying about."""
    defaults = {path: param.default for path, param in shared_flag_uses() if "--db" in param.opts}
    assert defaults.pop("edgetune verify") is None
    assert {"edgetune tune", "edgetune export", "edgetune model tune", "edgetune model export",
            "edgetune place", "edgetune model report", "edgetune model compare"} <= set(defaults)
    assert set(defaults.values()) == {"edgetune.db"}


@pytest.mark.parametrize("args", [["--help"], ["tune", "--help"], ["model", "export", "--help"]])
def test_help_leaves_plotting_and_learning_libraries_unimported(args):
    script = ("import sys\nfrom edgetune.cli import main\n"
              f"try:\n    main({args!r}, prog_name='edgetune')\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
              "print(sorted(m for m in ('matplotlib', 'sklearn', 'distributed') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Usage: edgetune" in result.stdout
    assert result.stdout.splitlines()[-1] == "[]", result.stdout.splitlines()[-1]


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.qemu
def test_model_tune_then_model_export_with_the_defaults_exports_the_tuned_kernels(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default database, edgetune.db, is in the working directory
    runner = CliRunner()
    untuned = _json(runner.invoke(main, ["model", "export", str(DS_CNN), "--out", "before", "--json"]))
    assert untuned["untuned"] and {l["source"] for l in untuned["layers"]} >= {"default"}
    assert "edgetune.db does not exist" in runner.invoke(main, ["model", "export", str(DS_CNN), "--out", "before"]).stderr
    assert not (tmp_path / "edgetune.db").exists()  # exporting created no database

    tuned = _json(runner.invoke(main, ["model", "tune", str(DS_CNN), "--budget", "4", "--no-check", "--json"]))
    assert (tmp_path / "edgetune.db").is_file() and all(w["best"] is not None for w in tuned["workloads"])
    exported = _json(runner.invoke(main, ["model", "export", str(DS_CNN), "--out", "after", "--json"]))
    assert exported["untuned"] == []
    sources = [l["source"] for l in exported["layers"] if l["source"] in ("tuned", "default")]
    assert sources and set(sources) == {"tuned"}


def test_a_database_named_with_db_must_exist_even_where_the_default_may_be_absent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["model", "export", str(DS_CNN), "--db", "typo.db", "--out", "m"])
    assert result.exit_code == 2 and "--db typo.db: no such database" in result.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "typo.db").exists()
