"""The command line's manners with a new user (issue 31 item 8): output piped into `head`
ends quietly, columns line up, and `best` on a workload never tuned says so and how."""
from __future__ import annotations

import re
import subprocess
import sys

from click.testing import CliRunner

from edgetune.cli import main


def test_a_reader_that_goes_away_ends_the_command_quietly_with_success():
    """`edgetune kernels | head -1`: the pipe closes before edgetune writes (it exited 1)."""
    proc = subprocess.Popen([sys.executable, "-m", "edgetune.cli", "kernels"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and stderr == b"", stderr


def test_kernels_lists_every_parameters_values_in_one_column():
    result = CliRunner().invoke(main, ["kernels", "--target", "cortex-m55"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("  ")]
    assert any(line.lstrip().startswith("activations_in") for line in rows)
    columns = {re.match(r"  \S+\s+", line).end() for line in rows}
    assert len(columns) == 1, columns


def test_best_on_a_workload_never_tuned_says_so_and_how_to_tune_it(tmp_path):
    db = tmp_path / "t.db"
    runner = CliRunner()
    tuned = runner.invoke(main, ["tune", "matmul_s8", "--shape", "m=4,n=4,k=4", "--target", "host", "--budget", "1",
                                 "--db", str(db)])
    assert tuned.exit_code == 0, tuned.output
    result = runner.invoke(main, ["best", "matmul_s8", "--shape", "m=8,n=4,k=4", "--target", "host", "--db", str(db)])
    assert result.exit_code == 1
    assert "0 trials stored" not in result.output
    assert f"matmul_s8 m=8,n=4,k=4 on host: not tuned ({db} holds no trial of it); tune it first: edgetune tune " \
           f"matmul_s8 --shape m=8,n=4,k=4 --target host --db {db}" in result.output


def test_the_readmes_command_table_lists_every_command():
    """`model report` was missing from the README's table (issue 31 item 14); so may any command
    `edgetune --help` lists."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `edgetune ")]
    for name in main.commands["model"].commands:
        assert any(line.startswith(f"| `edgetune model {name} ") for line in table), name
    # and every command and subcommand `edgetune --help` lists (db's and cache's by their names)
    said = " ".join(table)
    for name, command in main.commands.items():
        assert f"`edgetune {name}" in said, name
        for sub in getattr(command, "commands", {}) if name != "model" else ():
            assert re.search(rf"`edgetune {name} \[?{sub}\b|`{name} {sub}`|`{sub}`", said), (name, sub)


def test_the_hint_to_tune_runs_verbatim_for_a_kernel_and_a_board_of_ones_own(tmp_path):
    """A new user's vector_add on their own board file: the hint named neither the kernel file
    (`edgetune tune vector_add ...` says the kernel is unknown) nor the board's path (its name,
    not a shipped target). The printed command, run as printed, tunes the workload."""
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    kernel = str(root / "examples" / "kernels" / "vector_add")
    board = tmp_path / "my host.toml"
    board.write_text('extends = "host"\nname = "my-host"\n')
    db = tmp_path / "t.db"
    runner = CliRunner()
    common = ["--kernel-file", kernel, "--target", str(board), "--db", str(db)]
    assert runner.invoke(main, ["tune", "--shape", "size=8", "--budget", "1", *common]).exit_code == 0
    result = runner.invoke(main, ["best", "--shape", "size=16", *common])
    assert result.exit_code == 1 and "not tuned" in result.output, result.output
    words = shlex.split(result.output.split("tune it first: ", 1)[1])
    assert words[:2] == ["edgetune", "tune"] and str(board) in words and kernel in words, words
    tuned = runner.invoke(main, [*words[1:], "--budget", "1"])
    assert tuned.exit_code == 0, tuned.output
    assert runner.invoke(main, ["best", "--shape", "size=16", *common]).exit_code == 0


def test_a_model_budget_below_its_workloads_says_which_budget_would_do(tmp_path):
    """`model tune fc_autoencoder_ad.tflite --budget 4` said 5 workloads need a trial each, but
    not what to give: the line names the least budget that runs, and nothing is written."""
    from pathlib import Path

    model = Path(__file__).resolve().parent / "data" / "models" / "fc_autoencoder_ad.tflite"
    db = tmp_path / "m.db"
    result = CliRunner().invoke(main, ["model", "tune", str(model), "--target", "cortex-m55", "--budget", "4",
                                       "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "5 distinct workloads" in result.output and "give --budget 5 or more" in result.output, result.output
    assert not db.exists()


def test_a_count_that_is_no_whole_number_is_said_so_in_plain_words():
    """`--budget lots` printed click's "'lots' is not a valid integer range." and the help showed
    `--budget INTEGER RANGE`: a new user looked for the range they had missed."""
    runner = CliRunner()
    for argv, flag in ((["tune", "matmul_s8", "--shape", "m=4,n=4,k=4", "--budget", "lots"], "--budget"),
                       (["tune", "matmul_s8", "--shape", "m=4,n=4,k=4", "--jobs", "1.5"], "--jobs"),
                       (["model", "tune", "x.tflite", "--budget", "ten"], "--budget")):
        result = runner.invoke(main, argv)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert flag in result.output and "is not a valid whole number" in result.output, result.output
        assert "range" not in result.output
    usage = runner.invoke(main, ["tune", "--help"]).output
    assert "--budget N " in usage and "INTEGER RANGE" not in usage


def test_model_show_and_targets_keep_their_columns_for_long_names():
    """UNIDIRECTIONAL_SEQUENCE_LSTM (28 characters) pushed model show's shape and MACs columns
    out of line, as cortex-a72-linux did the runner and clock columns of `edgetune targets`."""
    from pathlib import Path

    lstm = Path(__file__).resolve().parent / "data" / "models" / "zoo" / "lstm_fused.tflite"
    shown = CliRunner().invoke(main, ["model", "show", str(lstm)])
    assert shown.exit_code == 0, shown.output
    header, *rows = shown.output.splitlines()[1:4]  # the header and the three operators
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in rows[0]
    shapes_at, macs_end, kernel_at = header.index("input"), header.index("MACs") + 4, header.index("kernel")
    for row in rows:
        assert row[shapes_at - 1] == " " and row[shapes_at].isdigit(), (header, row)
        assert row[macs_end - 1].isdigit() and row[macs_end] == " ", (header, row)
        assert row[kernel_at - 1] == " " and row[kernel_at] != " ", (header, row)
    listed = CliRunner().invoke(main, ["targets"])
    assert listed.exit_code == 0, listed.output
    assert len({line.index(" MHz") for line in listed.output.splitlines()}) == 1, listed.output
    assert len({line.index("vector:") for line in listed.output.splitlines()}) == 1, listed.output


def test_model_export_names_the_database_it_found_no_trial_in_and_counts_in_the_singular(tmp_path, monkeypatch):
    """Without --db, `model export` reads whatever edgetune.db the folder holds: a new user's
    held only a kernel tune, and the export said "no trial in the database" without naming it;
    with none there it said "all 1 workloads" and "(1 tensors"."""
    from pathlib import Path

    from edgetune.tuner import TuningDatabase

    logistic = Path(__file__).resolve().parent / "data" / "models" / "zoo" / "op_logistic.tflite"
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    bare = runner.invoke(main, ["model", "export", str(logistic), "--out", "a"])
    assert bare.exit_code == 0, bare.output
    assert "edgetune.db does not exist: the 1 workload exported with the kernel's default configuration" in bare.stderr
    assert "(1 tensor, " in bare.output and "1 tensors" not in bare.output
    TuningDatabase(tmp_path / "edgetune.db").close()  # a database holding no trial of the model
    found = runner.invoke(main, ["model", "export", str(logistic), "--out", "b"])
    assert found.exit_code == 0, found.output
    assert "  no trial in edgetune.db for conv2d_s8 " in found.stderr, found.stderr
