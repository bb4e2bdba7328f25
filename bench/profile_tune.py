"""edgetune's own CPU time against its children's (compilers, QEMU) in a default `model tune`.

Each model runs `edgetune model tune MODEL --target T` with the command's defaults (budget,
jobs, strategy, seed) in a fresh Python process, on a fresh database and, unless --warm, a
fresh build cache (EDGETUNE_CACHE in a temporary folder: every variant compiled). That
process reports getrusage(RUSAGE_SELF) (edgetune itself: search, code generation, the
database, the TFLite Micro check, every thread) and getrusage(RUSAGE_CHILDREN) (every
program it ran and waited for). CPU time, not wall time: on a shared machine the ratio
holds where the wall clock does not. --profile FILE also writes a cProfile of the (first)
model's run, sorted by cumulative time with `python -m pstats FILE`.

edgetune's modules are first compiled to bytecode next to their sources, as `pip install`
leaves an installed package (a checkout used with PYTHONDONTWRITEBYTECODE set compiles every
module of edgetune again in each process: about 0.4 s more of its own CPU). --repeat N runs
each model N times and reports every run and the median share. Each run's result line (the
tuned layers' total) is kept in the --json file, to show a change left the tune alone.

usage: .venv/bin/python bench/profile_tune.py [MODEL ...] [--target T] [--warm] [--repeat N]
                                              [--profile FILE] [--json FILE]
       (default models: every tests/data/models/*.tflite)
"""
from __future__ import annotations

import argparse
import compileall
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "data" / "models"
PACKAGES = ("edgetune", "edgetune.hal", "edgetune.codegen", "edgetune.targets", "edgetune.tuner", "edgetune.firmware")

# Runs in the measured process: the command line in-process, then both usages as one JSON line.
DRIVER = """
import cProfile, json, resource, sys, time
from edgetune.cli import main as edgetune
args, profile = json.loads(sys.argv[1]), sys.argv[2]
profiler = cProfile.Profile(time.process_time) if profile else None  # CPU time: the machine is shared
if profiler: profiler.enable()
try:
    edgetune.main(args, prog_name="edgetune", standalone_mode=False)
finally:
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("USAGE " + json.dumps({"own": own.ru_utime + own.ru_stime, "children": children.ru_utime + children.ru_stime}))
"""


def measure(model: Path, target: str, warm_cache: Path | None, profile: str) -> dict:
    """Own and children's CPU seconds of one default `model tune` of `model`."""
    with tempfile.TemporaryDirectory(prefix="edgetune-profile-") as tmp:
        env = {**os.environ, "EDGETUNE_CACHE": str(warm_cache or Path(tmp) / "cache")}
        args = ["model", "tune", str(model), "--target", target, "--db", str(Path(tmp) / "tune.db")]
        done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(args), profile], env=env,
                              capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("USAGE ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{model.name}: model tune failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    usage = json.loads(lines[-1][len("USAGE "):])
    usage["share"] = usage["own"] / (usage["own"] + usage["children"])
    # The tune's result, so a change that makes it cheaper can be seen to leave it alone.
    usage["result"] = next((line.strip() for line in done.stdout.splitlines() if "(tuned layers" in line), "")
    return usage


def compile_bytecode() -> None:
    """Every module of edgetune compiled to bytecode next to its source, as an installed
    package has it (the libraries it imports were compiled by pip)."""
    for name in PACKAGES:
        for folder in importlib.import_module(name).__path__:
            compileall.compile_dir(folder, quiet=1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--target", default="cortex-m55")
    parser.add_argument("--warm", action="store_true", help="one build cache for every model, filled by a first run")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each model (median share reported)")
    parser.add_argument("--profile", default="", help="write the first model's cProfile here")
    parser.add_argument("--json", default="", help="write the figures here too")
    options = parser.parse_args(argv)
    models = options.models or sorted(MODELS.glob("*.tflite"))
    compile_bytecode()
    results = {}
    print(f"{'model':32} {'own s':>8} {'children s':>11} {'own share':>10}   (CPU seconds: getrusage self / children)")
    with tempfile.TemporaryDirectory(prefix="edgetune-profile-cache-") as cache:
        for n, model in enumerate(models):
            runs = []
            for repeat in range(max(1, options.repeat)):
                warm = Path(cache) if options.warm else None
                if warm is not None:
                    measure(model, options.target, warm, "")  # fills the cache; the second run is measured
                usage = measure(model, options.target, warm, options.profile if n == repeat == 0 else "")
                runs.append(usage)
                print(f"{model.name:32} {usage['own']:8.2f} {usage['children']:11.2f} {usage['share']:10.0%}",
                      flush=True)
            results[model.name] = {"runs": runs, "median_share": statistics.median(u["share"] for u in runs)}
            if len(runs) > 1:
                print(f"{model.name:32} {'':8} {'':11} {results[model.name]['median_share']:10.0%}   (median)")
    if options.json:
        Path(options.json).write_text(json.dumps({"target": options.target, "warm": options.warm,
                                                  "models": results}, indent=1))


if __name__ == "__main__":
    main()
