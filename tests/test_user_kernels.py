"""Kernels of the user's own (docs/own-kernel.md): the three examples in examples/kernels/
go from folder to verified export on the host and the M55, from the command line and from
the Python API; every mistake in a user's kernel is one line naming it, exit 2, with
nothing stored lost; the restriction parser evaluates only what it allows."""
from __future__ import annotations

import inspect
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgetune
from edgetune import api
from edgetune.cli.tune import tune_cmd
from edgetune.codegen.kernels import KERNELS, SHIPPED, KernelError, unregister_kernel
from edgetune.codegen.kernels.restrictions import ExpressionError, compiled
from edgetune.codegen.kernels.user_loader import load_kernel_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "kernels"
SHAPES = {"vector_add": "size=48", "biquad_q31": "stages=2,block=16", "qadd_s8": "n=40"}


@pytest.fixture(autouse=True)
def _forget_user_kernels():
    """Kernels registered by a test (through the API) are gone after it."""
    yield
    for name in set(KERNELS) - SHIPPED:
        unregister_kernel(name)


def edgetune_cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgetune.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def trial_count(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgetune: error: "), result.stderr
    return lines[0]


def tune_export_verify(tmp_path: Path, name: str, target: str, budget: int) -> dict:
    folder = EXAMPLES / name
    tuned = edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", SHAPES[name], "--target", target,
                         "--budget", str(budget), "--json")
    assert tuned.returncode == 0, tuned.stderr
    summary = json.loads(tuned.stdout)
    assert summary["failed"] == 0 and summary["best"] is not None, summary
    exported = edgetune_cli(tmp_path, "export", "--kernel-file", str(folder), "--target", target, "--out", "out")
    assert exported.returncode == 0, exported.stderr
    # Host timings vary with the machine's load: there verify checks answers, not speed
    # (no timing threshold in a test); the M55's counts are exact, so its tolerance is 0.
    speed = ("--tolerance", "1e9") if target == "host" else ()
    verified = edgetune_cli(tmp_path, "verify", "out", "--kernel-file", str(folder), "--json", *speed)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["ok"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["kernels"][0]["definition"] == load_kernel_file(folder).definition
    return summary


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.one_case
def test_an_example_goes_from_folder_to_verified_export_on_the_host(tmp_path, name):
    summary = tune_export_verify(tmp_path, name, "host", 3)
    assert "vector" not in summary["best"]["config"] or summary["best"]["config"]["vector"] == "c"  # no MVE on x86


@pytest.mark.qemu
@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.one_case
def test_an_example_goes_from_folder_to_verified_export_on_the_m55(tmp_path, name):
    tune_export_verify(tmp_path, name, "cortex-m55", 3)


@pytest.mark.qemu
def test_the_mve_path_is_offered_on_the_m55_only_and_measures():
    m55 = edgetune.register(EXAMPLES / "qadd_s8")
    from edgetune.targets import get_target

    assert m55.space(get_target("host"), {"n": 40}).param("vector").values == ("c",)
    assert m55.space(get_target("cortex-m55"), {"n": 40}).param("vector").values == ("c", "mve")


def test_kernels_with_kernel_files_lists_just_their_spaces(tmp_path):
    listed = edgetune_cli(tmp_path, "kernels", "--json", "--target", "cortex-m55", "--kernel-file",
                          str(EXAMPLES / "qadd_s8"), "--kernel-file", str(EXAMPLES / "vector_add"))
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    assert [item["name"] for item in items] == ["qadd_s8", "vector_add"]
    assert items[0]["parameters"]["vector"]["values"] == ["c", "mve"]


def test_verify_refuses_a_definition_changed_since_export(tmp_path):
    folder = tmp_path / "vector_add"
    shutil.copytree(EXAMPLES / "vector_add", folder)
    for args in (("tune", "--budget", "2"), ("export", "--out", "out")):
        extra = ("--shape", "size=16") if args[0] == "tune" else ()
        result = edgetune_cli(tmp_path, *args, *extra, "--kernel-file", str(folder), "--target", "host")
        assert result.returncode == 0, result.stderr
    assert "kernel-file" in one_error_line(edgetune_cli(tmp_path, "verify", "out"))
    with open(folder / "vector_add.c", "a") as source:
        source.write("/* edited after export */\n")
    line = one_error_line(edgetune_cli(tmp_path, "verify", "out", "--kernel-file", str(folder), "--tolerance", "1e9"))
    assert "'vector_add' changed since export" in line


def test_export_says_a_workload_of_an_earlier_definition_is_the_users_edit_not_edgetunes(tmp_path):
    folder = tmp_path / "vector_add"
    shutil.copytree(EXAMPLES / "vector_add", folder)

    def tune(size):
        args = ("--budget", "1", "--shape", f"size={size}", "--kernel-file", str(folder), "--target", "host")
        assert edgetune_cli(tmp_path, "tune", *args).returncode == 0

    tune(16), tune(8)
    with open(folder / "vector_add.c", "a") as source:
        source.write("/* edited: a new definition */\n")
    tune(16)  # size=8 is not tuned again
    exported = edgetune_cli(tmp_path, "export", "--out", "out", "--kernel-file", str(folder), "--target", "host")
    assert exported.returncode == 0, exported.stderr
    skipped = sorted(line for line in exported.stderr.splitlines() if "skipped" in line)
    assert len(skipped) == 2 and not any("this edgetune has" in line for line in skipped), exported.stderr
    assert "size=16" in skipped[0] and "an earlier definition of vector_add" in skipped[0] \
        and "superseded by the current one's" in skipped[0] and "exported" in skipped[0]
    assert "size=8" in skipped[1] and "tuned with an earlier definition of vector_add" in skipped[1] \
        and "tune this shape again to export it" in skipped[1]


def test_db_import_of_a_users_kernel_names_the_kernel_file_and_the_definition(tmp_path):
    folder = tmp_path / "vector_add"
    shutil.copytree(EXAMPLES / "vector_add", folder)
    tune = ("tune", "--budget", "1", "--shape", "size=16", "--kernel-file", str(folder), "--target", "host")
    assert edgetune_cli(tmp_path, *tune).returncode == 0
    assert edgetune_cli(tmp_path, "db", "export", "--out", "t.jsonl").returncode == 0
    line = one_error_line(edgetune_cli(tmp_path, "db", "import", "t.jsonl", "--db", "other.db"))
    assert "'vector_add' is not a kernel of this edgetune" in line and "pass its --kernel-file" in line
    with open(folder / "vector_add.c", "a") as source:
        source.write("/* edited: a new definition */\n")
    line = one_error_line(edgetune_cli(tmp_path, "db", "import", "t.jsonl", "--db", "other.db", "--kernel-file",
                                       str(folder)))
    assert "is another definition of vector_add than the --kernel-file given" in line, line


def test_after_an_edit_one_definitions_trials_are_exported_and_imported_alone(tmp_path):
    folder = tmp_path / "vector_add"
    shutil.copytree(EXAMPLES / "vector_add", folder)
    tune = ("tune", "--budget", "1", "--shape", "size=16", "--kernel-file", str(folder), "--target", "host")
    assert edgetune_cli(tmp_path, *tune).returncode == 0
    with open(folder / "vector_add.c", "a") as source:
        source.write("/* edited: a new definition */\n")
    assert edgetune_cli(tmp_path, *tune).returncode == 0  # the old definition's trial stays stored
    assert edgetune_cli(tmp_path, "db", "export", "--out", "all.jsonl").returncode == 0
    line = one_error_line(edgetune_cli(tmp_path, "db", "import", "all.jsonl", "--db", "other.db", "--kernel-file",
                                       str(folder)))
    versions = {json.loads(text)["workload"]["kernel_version"] for text in (tmp_path / "all.jsonl").read_text().splitlines()}
    assert len(versions) == 2 and "edgetune db export --workload vector_add@v" in line, line
    current = line.rsplit("--workload vector_add@v", 1)[1].split("`")[0]
    exported = edgetune_cli(tmp_path, "db", "export", "--out", "one.jsonl", "--workload", f"vector_add@v{current}")
    assert exported.returncode == 0 and "exported 1 trials" in exported.stderr, exported.stderr
    imported = edgetune_cli(tmp_path, "db", "import", "one.jsonl", "--db", "other.db", "--kernel-file", str(folder))
    assert imported.returncode == 0 and "imported 1 trials" in imported.stdout, imported.stderr
    assert trial_count(tmp_path / "other.db") == 1


def test_export_prints_the_value_measured_as_exported_which_verify_checks(tmp_path):
    folder = EXAMPLES / "vector_add"
    tuned = edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", "size=16", "--target",
                         "cortex-m55", "--budget", "1")
    assert tuned.returncode == 0, tuned.stderr
    exported = edgetune_cli(tmp_path, "export", "--kernel-file", str(folder), "--target", "cortex-m55", "--out", "out")
    assert exported.returncode == 0, exported.stderr
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["kernels"][0]
    line = next(line for line in exported.stdout.splitlines() if entry["function"] in line)
    # Through the shape dispatcher the count is not the variant's own (the call costs instructions).
    assert entry["exported_value"] != entry["value"]
    assert f"instructions={entry['value']:g}, {entry['exported_value']:g} as exported" in line, line


def test_a_wrong_answer_names_the_values_as_numbers_not_numpy_reprs():
    from edgetune.codegen.kernels.base import describe_mismatch

    got, want = np.array([1, 5], dtype=np.int16), np.array([1, -1773], dtype=np.int16)
    assert describe_mismatch("y", got != want, got, want) == \
        "y: 1 of 2 elements differ; first at (1,): got 5, expected -1773"
    got, want = np.array([0.5], dtype=np.float32), np.array([0.3], dtype=np.float32)
    assert describe_mismatch("c", got != want, got, want).endswith("got 0.5, expected 0.3")


def test_tune_without_a_shape_suggests_the_kernels_example_shape(tmp_path):
    line = one_error_line(edgetune_cli(tmp_path, "tune", "--kernel-file", str(EXAMPLES / "qadd_s8"), "--target",
                                       "host"))
    assert "give --shape" in line and "e.g. --shape n=100" in line and "KERNEL" not in line, line


def test_a_kernel_of_your_own_named_without_its_folder_points_to_kernel_file(tmp_path):
    line = one_error_line(edgetune_cli(tmp_path, "tune", "vector_add", "--target", "host", "--shape", "size=16"))
    assert "unknown kernel 'vector_add'" in line and "--kernel-file DIR" in line


def bad_kernel(tmp_path: Path, kernel_py: str, sources: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir(exist_ok=True)
    (folder / "kernel.py").write_text(kernel_py)
    for name, text in (sources or {"k.c": "void k(int8_t *y, const int8_t *x, int n)\n"
                                          "{ for (int i = 0; i < len; i++) y[i] = x[i]; }\n"}).items():
        (folder / name).write_text(text)
    return folder


COPY = """import edgetune as et
KERNEL = et.KernelDef(name="k", shape=("size",), source={source!r},
    args=[et.Output("y", "int8", "size"), et.Input("x", "int8", "size"), et.Scalar("n", "size")],
    params={params}, restrictions={restrictions}, reference={reference})
"""


def kernel_text(source="k.c", params="{'u': [1, 2]}", restrictions="[]",
                reference="lambda shape, i: i['x'].copy()") -> str:
    return COPY.format(source=source, params=params, restrictions=restrictions, reference=reference)


@pytest.fixture(scope="module")
def stored_trials(tmp_path_factory) -> Path:
    """A database holding a good tune's trials, made once: each mistake below is tried on a copy."""
    folder = tmp_path_factory.mktemp("stored")
    good = edgetune_cli(folder, "tune", "qadd_s8", "--kernel-file", str(EXAMPLES / "qadd_s8"), "--shape", "n=16",
                        "--target", "host", "--budget", "2")
    assert good.returncode == 0, good.stderr
    assert not (folder / "edgetune.db-wal").exists()  # every trial is in the one file copied
    return folder / "edgetune.db"


@pytest.mark.parametrize("text, sources, expected", [
    (kernel_text(source="k.c.j2"), {"k.c.j2": "{{ signature }}\n{\n    y[0] = {{ u + }};\n}\n"},
     "k.c.j2:3: template syntax error: unexpected"),
    (kernel_text(restrictions="['size // (u - 1) > 0']"), None, "raised ZeroDivisionError"),
    (kernel_text(restrictions="['__import__(\"os\").system(\"true\")']"), None, "only min, max, abs may be called"),
    (kernel_text(restrictions="['tile > 1']"), None, "unknown name 'tile'"),
    (kernel_text(restrictions="'u > 1'"), None, "restrictions: give a list of expressions or functions, e.g. ['u > 1']"),
    (kernel_text(restrictions="['u > 2']"), None, "no configuration meets its restrictions on host: 'u > 2' holds for none (u in [1, 2]"),
    (kernel_text(restrictions="['u > 1', 'u < 2', 'u >= 1']"), None,
     ": 'u > 1', 'u < 2' exclude every configuration together (u in [1, 2]"),
    (kernel_text(restrictions="[lambda p: p['u']]"), None, "gave 1, not True or False"),
    (kernel_text(reference="lambda shape, i: i['x'].astype('int16')"), None,
     "reference output 'y' is int16[16], expected int8[16]"),
    (kernel_text(reference="lambda shape, i: i['x'][:3]"), None, "reference output 'y' is int8[3], expected int8[16]"),
    (kernel_text(reference="lambda shape, i: 1 / 0"), None, "reference raised ZeroDivisionError"),
    (kernel_text(params="{'u': ['1;abort()']}"), None, "'1;abort()' is not a C token"),
    (kernel_text(params="{'u': [True]}"), None, "True is not a C token"),
    (kernel_text(params="{'x': [1]}"), None, "parameter 'x' has the name of a shape key or argument"),
    (kernel_text().replace('name="k"', 'name="matmul_s8"'), None, "the name of a shipped kernel"),
    ("import edgetune as et\nKERNEL = 1 / 0\n", None, "kernel.py:2: ZeroDivisionError"),
    (kernel_text().replace('"size"), et.Scalar', '"size", low=5, high=-5), et.Scalar'), None,
     "buffer 'x': low=5 is above high=-5"),
    (kernel_text().replace('"size"), et.Scalar', '"size", high=300), et.Scalar'), None,
     "buffer 'x': high=300 is not an integer in [-128, 127] (int8)"),
])
def test_a_mistake_in_a_kernel_is_one_line_exit_2_and_nothing_stored_is_lost(tmp_path, stored_trials, text, sources,
                                                                             expected):
    shutil.copy(stored_trials, tmp_path / "edgetune.db")
    before = trial_count(tmp_path / "edgetune.db")
    assert before == 2
    folder = bad_kernel(tmp_path, text, sources)
    line = one_error_line(edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", "size=16",
                                       "--target", "host", "--budget", "2"))
    assert expected in line
    assert trial_count(tmp_path / "edgetune.db") == before


def test_a_reference_that_raises_is_named_with_the_line_that_raised(tmp_path):
    folder = bad_kernel(tmp_path, kernel_text(reference="lambda shape, i: 1 / 0"))
    line = one_error_line(edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", "size=16",
                                       "--target", "host", "--budget", "1"))
    assert line.endswith(f"reference raised ZeroDivisionError: division by zero (at {folder / 'kernel.py'}:4)"), line


def test_a_source_that_compiles_for_no_configuration_is_refused_before_any_trial(tmp_path):
    folder = bad_kernel(tmp_path, kernel_text(params="{'u': [1]}"),
                        {"k.c": "void k(int8_t *y, const int8_t *x, int n) { y[0] = x[0] + undeclared; }\n"})
    line = one_error_line(edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", "size=16",
                                       "--target", "host", "--budget", "2"))
    assert "kernel k: its source does not compile on host" in line and "k.c:1" in line and "undeclared" in line, line
    assert not (tmp_path / "edgetune.db").exists() or trial_count(tmp_path / "edgetune.db") == 0


def test_a_source_that_does_not_compile_for_one_configuration_is_a_failed_trial_with_the_first_error(tmp_path):
    folder = bad_kernel(tmp_path, kernel_text(params="{'u': [1, 2]}"),
                        {"k.c": "#if u == 2\nint broken = undeclared;\n#endif\n"
                                "void k(int8_t *y, const int8_t *x, int n) { for (int i = 0; i < n; i++) y[i] = x[i]; }\n"})
    result = edgetune_cli(tmp_path, "tune", "--kernel-file", str(folder), "--shape", "size=16", "--target", "host",
                          "--budget", "100")
    assert result.returncode == 0, result.stderr  # u=1 is a correct copy: the run has its best
    assert "best:" in result.stdout and "u=1" in result.stdout
    assert "failures: compile" in result.stdout
    failure = next(line for line in result.stdout.splitlines() if "first failure" in line)
    assert "compiler=" in failure and "u=2" in failure and "k.c:2" in failure and "undeclared" in failure


def test_installed_kernel_packages_are_listed_and_tuned_by_name(tmp_path):
    site = tmp_path / "site"
    package = site / "teamkernels"
    package.mkdir(parents=True)
    shutil.copy(EXAMPLES / "qadd_s8" / "kernel.py", package / "__init__.py")
    shutil.copy(EXAMPLES / "qadd_s8" / "qadd_s8.c.j2", package)
    info = site / "teamkernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: teamkernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[edgetune.kernels]\nqadd = teamkernels:KERNEL\n")
    env = {"PYTHONPATH": str(site)}
    listed = edgetune_cli(tmp_path, "kernels", "--target", "host", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "qadd_s8" in [k["name"] for k in json.loads(listed.stdout)]
    tuned = edgetune_cli(tmp_path, "tune", "qadd_s8", "--shape", "n=16", "--target", "host", "--budget", "2", env=env)
    assert tuned.returncode == 0 and "2 trials stored" in tuned.stdout, tuned.stderr


API_SHAPES = {"vector_add": {"size": 24}, "biquad_q31": "stages=1,block=8", "qadd_s8": {"n": 20}}


def api_round_trip(tmp_path: Path, name: str, target: str) -> None:
    folder, db = EXAMPLES / name, tmp_path / "api.db"
    summary = edgetune.tune(folder, API_SHAPES[name], target=target, budget=2, db=db)
    assert summary.trials == 2 and summary.best is not None and summary.failed == 0
    again = edgetune.best(folder, API_SHAPES[name], target=target, db=db)
    assert again.best.id == summary.best.id
    result = edgetune.export(tmp_path / "out", target=target, db=db, kernels=[folder])
    assert [e.kernel for e in result.entries] == [name]
    speed = 1e9 if target == "host" else None  # host timings vary with load: answers only there
    report = edgetune.verify(tmp_path / "out", kernels=[folder], tolerance_pct=speed)
    assert report.ok, report.verdicts


@pytest.mark.parametrize("name", sorted(API_SHAPES))
def test_the_python_api_drives_an_example_to_a_verified_export_on_the_host(tmp_path, name):
    api_round_trip(tmp_path, name, "host")


@pytest.mark.qemu
@pytest.mark.parametrize("name", sorted(API_SHAPES))
def test_the_python_api_drives_an_example_to_a_verified_export_on_the_m55(tmp_path, name):
    api_round_trip(tmp_path, name, "cortex-m55")


def test_record_replay_and_report_take_a_kernel_of_your_own(tmp_path):
    folder = str(EXAMPLES / "qadd_s8")
    recorded = edgetune_cli(tmp_path, "record", "--kernel-file", folder, "--shape", "n=16", "--target", "host",
                            "--out", "space.json")
    assert recorded.returncode == 0, recorded.stderr
    replayed = edgetune_cli(tmp_path, "replay", "space.json", "--budget", "4", "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["size"] == 24, replayed.stderr  # 4 unrolls x 2 x 3
    reported = edgetune_cli(tmp_path, "report", "--out", "report")
    assert reported.returncode == 0 and (tmp_path / "report" / "index.html").is_file(), reported.stderr


VADD = """
void vadd(float *c, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i += block) {
        for (int j = 0; j < block && i + j < n; j++) c[i + j] = a[i + j] + b[i + j];
    }
}
"""


def test_tune_kernel_is_shaped_like_kernel_tuners(tmp_path):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    c = np.zeros_like(a)
    results, env = edgetune.tune_kernel("vadd", VADD, 40, [c, a, b, np.int32(40)], {"block": [1, 2, 4, 8]},
                                        restrictions=["block <= 4"], answer=[a + b, None, None, None], target="host",
                                        budget=4, db=tmp_path / "kt.db")
    assert len(results) == 4 and all("time_ns" in r and r["block"] <= 4 for r in results)
    assert env["device_name"] == "host" and env["best_config"]["block"] in (1, 2, 4)
    wrong, _ = edgetune.tune_kernel("vadd2", VADD.replace("vadd", "vadd2"), 40, [c, a, b, np.int32(40)],
                                    {"block": [2]}, answer=[a - b, None, None, None], target="host", budget=1,
                                    db=tmp_path / "kt.db")
    assert wrong[0]["error"].startswith("wrong_answer")
    with pytest.raises(KernelError, match="give answer="):
        edgetune.tune_kernel("vadd", VADD, 40, [c, a, b, np.int32(40)], {"block": [1]}, target="host")


def test_tune_kernel_again_with_an_edited_source_tunes_the_latest_definition(tmp_path):
    """As in a notebook: the same kernel name, its source edited, tuned again in one process."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    c = np.zeros_like(a)
    envs = []
    for source in (VADD, VADD.replace("{", "{ /* edited */", 1)):
        results, env = edgetune.tune_kernel("vadd", source, 24, [c, a, b, np.int32(24)], {"block": [2]},
                                            answer=[a + b, None, None, None], target="host", budget=1,
                                            db=tmp_path / "kt.db")
        assert len(results) == 1 and "time_ns" in results[0], results
        envs.append(env)
    assert envs[0]["definition"] != envs[1]["definition"]
    assert KERNELS["vadd"].definition == envs[1]["definition"]


def test_tune_kernel_refuses_a_lone_restriction_string_instead_of_splitting_it():
    a = np.zeros(8, dtype=np.float32)
    with pytest.raises(KernelError, match=r"give a list of expressions or functions, e.g. \['block <= 4'\]"):
        edgetune.tune_kernel("vadd_lone", VADD.replace("vadd", "vadd_lone"), 8, [a, a, a, np.int32(8)],
                             {"block": [1, 2]}, restrictions="block <= 4", answer=[a, None, None, None], target="host")


def test_the_api_has_the_command_lines_defaults():
    cli = {p.name: p.default for p in tune_cmd.params}
    sig = inspect.signature(api.tune).parameters
    for api_name, cli_name in (("target", "target_name"), ("strategy", "strategy"), ("budget", "budget"),
                               ("jobs", "jobs"), ("seed", "seed"), ("objective", "objective"), ("db", "db_path")):
        assert sig[api_name].default == cli[cli_name], api_name


@pytest.mark.parametrize("text, values, expected", [
    ("block_size * unroll <= 16", {"block_size": 4, "unroll": 4}, True),
    ("n % tile == 0 and tile in (1, 2, 4)", {"n": 12, "tile": 8}, False),
    ("max(a, b) - min(a, b) < 2 if a else not b", {"a": 3, "b": 2}, True),
    ("order == 'stage_major' or unroll == 1", {"order": "sample_major", "unroll": 2}, False),
    ("taps + block - 1", {"taps": 5, "block": 8}, 12),
])
def test_restrictions_evaluate_what_they_allow(text, values, expected):
    assert compiled(text, values)(values) == expected


@pytest.mark.parametrize("text, expected", [
    ("x.__class__", "Attribute is not allowed"),
    ("open('f')", "only min, max, abs may be called"),
    ("[i for i in x]", "ListComp is not allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("y > 1", "unknown name 'y'"),
    ("x ==", "is not a Python expression"),
])
def test_restrictions_refuse_what_they_do_not_allow(text, expected):
    with pytest.raises(ExpressionError, match=expected.replace("(", r"\(")):
        compiled(text, {"x"})


def test_numbers_cannot_grow_without_bound():
    with pytest.raises(ExpressionError, match="too large"):
        compiled("2 ** 10 ** 10", set())({})
    with pytest.raises(ExpressionError, match="exceeds"):
        compiled("x * x * x * x * x", {"x"})({"x": 1 << 20})


def test_what_a_definition_says_reaches_c_only_as_checked_tokens(tmp_path):
    from edgetune.targets import get_target
    from edgetune.tuner import Config

    folder = bad_kernel(tmp_path, kernel_text(params="{'u': [-3, 0.5, 'FAST']}").replace(
        'name="k"', 'name="k", description="evil */ int injected; /*"'))
    kernel = edgetune.register(folder)
    host = get_target("host")
    space = kernel.tuning_space(host, {"size": 8})
    source = kernel.render(host, {"size": 8}, space.make({"u": -3, "compiler": "gcc", "opt": "O2"})).source
    assert "*/ int injected" not in source and "#define u (-3)" in source
    assert "#define k et_k_size8_kernel" in source and "(void)k((int8_t *)y, (int8_t *)x, n);" in source
    assert isinstance(space.make({"u": "FAST", "compiler": "gcc", "opt": "O2"}), Config)


def _doc_python_blocks() -> list[str]:
    import re
    page = (ROOT / "docs" / "own-kernel.md").read_text()
    return [body for lang, body in re.findall(r"^```(\w+)\n(.*?)^```$", page, re.S | re.M) if lang == "python"]


def test_the_pages_tune_kernel_example_runs_verbatim_and_finds_a_best(tmp_path, monkeypatch):
    """docs/own-kernel.md's tune_kernel block, run as written: every trial succeeds (it once
    failed every one as `compile: gcc failed (exit 1):`, exit 0), and nothing is written to
    the working folder."""
    block = next(b for b in _doc_python_blocks() if "tune_kernel(" in b)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "own-kernel.md", "exec"), scope)  # noqa: S102 - the documentation's own example
    results, env = scope["results"], scope["env"]
    assert env["best_config"] is not None and not any("error" in r for r in results), results
    assert list(tmp_path.iterdir()) == []


def test_tune_kernel_refuses_a_kernel_name_that_is_not_the_c_function(tmp_path):
    a = np.zeros(8, dtype=np.float32)
    with pytest.raises(KernelError, match=r"source 'vadd_kt.c' has no function 'vadd_kt' \(it defines vadd\)"):
        edgetune.tune_kernel("vadd_kt", VADD, 8, [a, a, a, np.int32(8)], {"block": [1, 2]},
                             answer=[a, None, None, None], target="host", db=tmp_path / "kt.db")
    assert not (tmp_path / "kt.db").exists() or trial_count(tmp_path / "kt.db") == 0


def test_a_source_that_compiles_for_no_configuration_is_refused_with_the_compilers_first_error(tmp_path):
    a = np.zeros(8, dtype=np.float32)
    broken = VADD.replace("a[i + j] + b[i + j]", "a[i + j] + bb[i + j]")
    with pytest.raises(KernelError, match=r"kernel vadd: its source does not compile on host \(tried .* and .*\): "
                                          r"\w+ failed \(exit 1\): vadd.c:\d+:\d+: error: .*bb"):
        edgetune.tune_kernel("vadd", broken, 8, [a, a, a, np.int32(8)], {"block": [1, 2]},
                             answer=[a, None, None, None], target="host", db=tmp_path / "kt.db")
    assert trial_count(tmp_path / "kt.db") == 0


def test_a_compile_failure_of_one_configuration_keeps_the_compilers_first_error(tmp_path):
    """Only block=2 fails: the search runs, and that trial's error starts with the error line."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    source = "#if block == 2\nint broken = undeclared_name;\n#endif\n" + VADD
    results, _ = edgetune.tune_kernel("vadd", source, 8, [np.zeros_like(a), a, b, np.int32(8)], {"block": [1, 2, 4]},
                                      answer=[a + b, None, None, None], target="host", budget=9,
                                      db=tmp_path / "kt.db")
    failed = [r for r in results if "error" in r]
    assert failed and all(r["block"] == 2 for r in failed)
    assert all(r["error"].startswith("compile: ") and "error:" in r["error"] and "undeclared_name" in r["error"]
               for r in failed), failed


@pytest.mark.parametrize("target", ["host", pytest.param("cortex-m55", marks=pytest.mark.qemu)])
def test_tune_kernel_passes_in_out_buffers_with_their_contents(tmp_path, target):
    """An in-place kernel: y arrives as given (not zeros), as Kernel Tuner passes it."""
    source = "void accumulate(int16_t *y, const int16_t *x, int n)\n{\n" \
             "    for (int i = 0; i < n; i++) y[i] = y[i] + (x[i] >> SHIFT);\n}\n"
    rng = np.random.default_rng(4)
    y = rng.integers(-2000, 2000, 32).astype(np.int16)
    x = rng.integers(-2000, 2000, 32).astype(np.int16)
    results, env = edgetune.tune_kernel("accumulate", source, 32, [y, x, np.int32(32)], {"SHIFT": [2]},
                                        answer=[(y + (x >> 2)).astype(np.int16), None, None], target=target,
                                        budget=1, db=tmp_path / "kt.db")
    assert env["best_config"] is not None and "error" not in results[0], results


def test_a_tune_whose_every_trial_fails_exits_1_so_a_script_stops_before_exporting(tmp_path):
    """A new user's reference shifted by 14 where the C shifted by 15: every trial a wrong
    answer, "no successful trial yet", and exit status 0, so `tune && export` went on."""
    folder = tmp_path / "halve"
    folder.mkdir()
    (folder / "halve.c").write_text("#include <stdint.h>\n"
                                    "void halve(const int16_t *x, int16_t *y, int len)\n"
                                    "{ for (int i = 0; i < len; i++) y[i] = (int16_t)(x[i] >> 1); }\n")
    kernel_py = ('import numpy as np\nimport edgetune as et\n\n\n'
                 'def reference(shape, inputs):\n    return (inputs["x"] >> SHIFT).astype(np.int16)\n\n\n'
                 'KERNEL = et.KernelDef(name="halve", shape=("n",), source="halve.c",\n'
                 '    args=[et.Input("x", "int16", "n"), et.Output("y", "int16", "n"), et.Scalar("len", "n")],\n'
                 '    params={"u": [1, 2]}, reference=reference, example_shape="n=16")\n')
    tune = ("tune", "--kernel-file", str(folder), "--shape", "n=16", "--target", "host", "--budget", "2")
    (folder / "kernel.py").write_text(kernel_py.replace("SHIFT", "2"))
    wrong = edgetune_cli(tmp_path, *tune, "--db", "wrong.db")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "wrong_answer 2" in wrong.stdout and "no successful trial yet" in wrong.stdout
    (folder / "kernel.py").write_text(kernel_py.replace("SHIFT", "1"))
    right = edgetune_cli(tmp_path, *tune, "--db", "right.db")
    assert right.returncode == 0 and "best:" in right.stdout, right.stdout + right.stderr


def test_a_definition_edited_within_the_second_to_the_same_size_is_read_again(tmp_path, monkeypatch):
    """Python's bytecode cache trusts a .pyc by the source's size and whole-second mtime: a
    kernel.py rewritten SHIFT 2 -> 1 in the same second ran the old reference (seen on a
    fresh machine's CI). Each load compiles the file's current text, and leaves no
    __pycache__ in the user's folder."""
    import os
    import sys

    from edgetune.codegen.kernels.user_loader import load_kernel_file

    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as on a machine without PYTHONDONTWRITEBYTECODE
    folder = tmp_path / "halve"
    folder.mkdir()
    (folder / "halve.c").write_text("void halve(const short *x, short *y, int len) {}\n")
    text = ('import edgetune as et\nSHIFT = 2\n'
            'KERNEL = et.KernelDef(name="halve", shape=("n",), source="halve.c",\n'
            '    args=[et.Input("x", "int16", "n"), et.Output("y", "int16", "n"), et.Scalar("len", "n")],\n'
            '    params={"u": [1, 2]}, reference=lambda shape, i: i["x"] >> SHIFT, example_shape="n=16")\n')
    definition = folder / "kernel.py"
    definition.write_text(text)
    first = load_kernel_file(folder)
    stamp = definition.stat()
    definition.write_text(text.replace("SHIFT = 2", "SHIFT = 1"))
    os.utime(definition, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same size and time
    second = load_kernel_file(folder)
    x = {"x": np.array([64], dtype=np.int16)}
    assert first.spec.reference({}, x)[0] == 16 and second.spec.reference({}, x)[0] == 32
    assert first.definition != second.definition
    assert not (folder / "__pycache__").exists()
