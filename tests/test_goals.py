"""The objective and bounds a workload was tuned for are stored with it and honoured by
`best`, `export`, `verify` and `place`, each of which takes --objective/--constraint to
override them; the manifest says which goal chose each kernel.

On the Cortex-M55 the two placements of one tiling run the same instructions but not the
same estimated cycles (SRAM2 has wait states, DTCM none), so the instruction-count best
(the earlier of a tie: SRAM2) and the cycles best (DTCM) are different variants."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from edgetune.cli import main
from edgetune.codegen import get_kernel
from edgetune.npu.layer_plan import load_network, plan_network
from edgetune.session import workload_of
from edgetune.tuner import Bound, Goal, TuningDatabase

pytestmark = pytest.mark.qemu

SHAPE = "m=1,n=4,k=16"
TILING = "tile_m=1,tile_n=4,unroll_k=1,vector=c,layout=rowmajor,compiler=gcc,opt=O2"
SRAM = f"{TILING},weights_in=sram2,activations_in=sram2"
DTCM = f"{TILING},weights_in=dtcm,activations_in=dtcm"


def cli(*args, code: int = 0):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return json.loads(result.output) if "--json" in args and code == 0 else result.output


def placement(config: dict) -> str:
    return f"{config['weights_in']}/{config['activations_in']}"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """matmul_s8 tuned for cycles: the SRAM2 variant measured first, then the DTCM one."""
    root = tmp_path_factory.mktemp("goals")
    db = root / "t.db"
    summary = cli("tune", "matmul_s8", "--target", "cortex-m55", "--shape", SHAPE, "--objective", "cycles",
                  "--initial", SRAM, "--initial", DTCM, "--budget", 2, "--jobs", 1, "--db", db, "--json")
    assert summary["objective"] == "cycles" and summary["new_trials"] == 2
    by_instructions = cli("best", "matmul_s8", "--shape", SHAPE, "--objective", "instructions", "--db", db, "--json")
    # The premise: the two bests differ (same instructions, the tie goes to the earlier SRAM2 trial).
    assert placement(by_instructions["best"]["config"]) == "sram2/sram2"
    assert placement(summary["best"]["config"]) == "dtcm/dtcm"
    assert summary["best"]["cycles"] < by_instructions["best"]["cycles"]
    assert summary["best"]["instructions"] == by_instructions["best"]["instructions"]
    return root, db, summary, by_instructions


def test_export_bakes_the_best_of_what_was_tuned_for(tuned, tmp_path):
    root, db, summary, _ = tuned
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", db)
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    [entry] = manifest["kernels"]
    assert placement(entry["config"]) == "dtcm/dtcm"
    assert (entry["objective"], entry["constraints"], entry["chosen_by"]) == ("cycles", [], "tuned")
    assert manifest["objective"] == "cycles"
    # Measured as exported, in what it was chosen by (the dispatcher's call adds a little).
    assert entry["exported_value"] == entry["exported_values"]["cycles"] != entry["exported_values"]["instructions"]


def test_export_objective_overrides_and_the_manifest_says_so(tuned, tmp_path):
    root, db, _, by_instructions = tuned
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", db, "--objective", "instructions")
    [entry] = json.loads((tmp_path / "x" / "manifest.json").read_text())["kernels"]
    assert entry["config"] == by_instructions["best"]["config"]
    assert (entry["objective"], entry["chosen_by"]) == ("instructions", "override")
    limit = tuned[2]["best"]["cycles"]
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "y", "--db", db, "--objective", "instructions",
        "--constraint", f"cycles<={limit}")
    [entry] = json.loads((tmp_path / "y" / "manifest.json").read_text())["kernels"]
    assert placement(entry["config"]) == "dtcm/dtcm"  # SRAM2's variant breaks the bound
    assert entry["constraints"] == [f"cycles<={limit:g}"] and entry["bounds"] == [["cycles", limit]]


def test_best_and_a_resumed_tune_keep_the_stored_goal(tuned, tmp_path):
    root, db, summary, _ = tuned
    best = cli("best", "matmul_s8", "--shape", SHAPE, "--db", db, "--json")
    assert best["objective"] == "cycles" and best["best"]["config"] == summary["best"]["config"]
    copy = tmp_path / "t.db"
    cli("db", "export", "--db", db, "--out", tmp_path / "t.jsonl")
    cli("db", "import", tmp_path / "t.jsonl", "--db", copy)  # the goal travels with the trials
    again = cli("tune", "matmul_s8", "--shape", SHAPE, "--budget", 2, "--db", copy, "--json")
    assert again["objective"] == "cycles" and again["new_trials"] == 0


def test_bounds_given_to_tune_are_stored_and_honoured_by_export(tuned, tmp_path):
    root, db, summary, _ = tuned
    copy = tmp_path / "t.db"
    cli("db", "export", "--db", db, "--out", tmp_path / "t.jsonl")
    cli("db", "import", tmp_path / "t.jsonl", "--db", copy)
    limit = summary["best"]["cycles"]
    cli("tune", "matmul_s8", "--shape", SHAPE, "--budget", 2, "--db", copy, "--objective", "instructions",
        "--constraint", f"cycles<={limit}")
    matmul = get_kernel("matmul_s8")
    from edgetune.targets import get_target
    m55 = get_target("cortex-m55")
    stored = TuningDatabase(copy).goal(workload_of(matmul, m55, matmul.parse_shape(SHAPE)))
    assert stored == Goal("instructions", (Bound("cycles", float(limit)),))
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", copy)
    [entry] = json.loads((tmp_path / "x" / "manifest.json").read_text())["kernels"]
    assert placement(entry["config"]) == "dtcm/dtcm"
    assert (entry["objective"], entry["constraints"], entry["chosen_by"]) == \
        ("instructions", [f"cycles<={limit:g}"], "tuned")


def test_verify_checks_the_value_each_kernel_was_chosen_by(tuned, tmp_path):
    root, db, summary, _ = tuned
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", db)
    report = cli("verify", tmp_path / "x", "--db", db, "--json")
    [kernel] = report["kernels"]
    assert report["ok"] and kernel["objective"] == "cycles" and kernel["measured"] == kernel["recorded"]
    assert not any("different best" in note for note in kernel["notes"])  # the export is the database's best
    report = cli("verify", tmp_path / "x", "--objective", "instructions", "--json")
    assert report["ok"] and report["kernels"][0]["objective"] == "instructions"
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert report["kernels"][0]["recorded"] == manifest["kernels"][0]["exported_values"]["instructions"]
    # A bound the exported variant breaks is a failure naming it.
    exported_cycles = manifest["kernels"][0]["exported_value"]
    out = cli("verify", tmp_path / "x", "--constraint", f"cycles<={exported_cycles - 1}", code=1)
    assert "breaks its constraint cycles<=" in out


def test_place_chooses_cpu_kernels_by_their_goal(tuned, tmp_path):
    root, db, summary, by_instructions = tuned
    from edgetune.targets import get_target
    m55 = get_target("cortex-m55")
    path = tmp_path / "net.toml"
    path.write_text('name = "fc"\n[[layers]]\nname = "fc"\nop = "matmul_s8"\nshape = { m = 1, n = 4, k = 16 }\n')
    network = load_network(path)
    database = TuningDatabase(db)
    plan = plan_network(network, m55, m55.npu("ethos-u55"), database, macs=128, npu_budget=1)
    cpu = plan.layers[0].cpu
    assert placement(cpu.record.trial.config.as_dict()) == "dtcm/dtcm" and cpu.region == "dtcm"
    assert cpu.cycles == pytest.approx(summary["best"]["cycles"], abs=1)  # the estimate it was tuned for
    plan = plan_network(network, m55, m55.npu("ethos-u55"), database, macs=128, npu_budget=1, objective="instructions")
    cpu = plan.layers[0].cpu
    assert cpu.record.trial.config.as_dict() == by_instructions["best"]["config"]
    assert cpu.cycles == by_instructions["best"]["instructions"]  # one cycle per instruction


def test_from_export_retunes_for_what_each_kernel_was_chosen_by(tuned, tmp_path):
    root, db, summary, _ = tuned
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", db, "--objective", "instructions",
        "--constraint", f"cycles<={summary['best']['cycles']}")
    again = cli("tune", "--from-export", tmp_path / "x", "--budget", 1, "--db", tmp_path / "new.db", "--json")
    [workload] = again
    assert workload["objective"] == "instructions"
    assert workload["constraints"] == [f"cycles<={summary['best']['cycles']:g}"]
    assert placement(workload["best"]["config"]) == "dtcm/dtcm"  # the exported variant, measured first
    assert workload["best"]["cycles"] <= summary["best"]["cycles"]


@pytest.mark.parametrize("command", ["export", "place", "verify", "best"])
def test_an_override_naming_no_measured_value_is_one_line(tuned, tmp_path, command):
    root, db, _, _ = tuned
    network = tmp_path / "net.toml"
    network.write_text('name = "fc"\n[[layers]]\nname = "fc"\nop = "matmul_s8"\nshape = { m = 1, n = 4, k = 16 }\n')
    cli("export", "--target", "cortex-m55", "--out", tmp_path / "x", "--db", db)
    args = {"export": ["export", "--out", tmp_path / "y", "--db", db],
            "place": ["place", network, "--out", tmp_path / "plan", "--db", db],
            "verify": ["verify", tmp_path / "x"],
            "best": ["best", "matmul_s8", "--shape", SHAPE, "--db", db]}[command]
    for extra, culprit in ((["--objective", "teleports"], "teleports"), (["--constraint", "warp<=3"], "warp")):
        out = cli(*args, *extra, code=2)
        assert culprit in out and "Traceback" not in out and len(out.strip().splitlines()) == 1
