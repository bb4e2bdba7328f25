"""Issue 13's promise, measured: edgetune tried as an attacker and a careless user would,
through the installed command line (a subprocess per attempt, each in its own temporary
folder), with the harm counted per class. Every count of harm should be 0.

Four parts:

- bad inputs: forged `db import` lines, target files with dangerous compiler flags,
  programs given as paths, target-file gaps, huge shapes, a read-only database. Each must
  be refused right: exit status 2, exactly one line on stderr (`edgetune: error: ...`), no
  traceback, the database byte for byte as it was. A forged but well-formed count must not
  be exported silently (`export` must refuse it, naming the workload).
  Issue 27's classes (27.x, a block of their own): export destinations holding someone
  else's manifest.json (the folder must stay as it was), flash commands passing a plugin, a
  log file or semihosting to QEMU, graphs that cannot run in order, a slowed export with a
  rewritten manifest (`verify --db` must fail it), an --out linking to an earlier export
  (replaced in place, nothing hidden left), a kernel writing past its output (every trial
  `overrun`, alone and batched), a template reaching Python (the sandbox stops it).
- kill points: `tune --jobs 2` killed (SIGKILL to its process group, QEMU included) at
  random moments, resumed each time, then run to the end: trials lost (committed before a
  kill, missing after), duplicated (one configuration stored twice, or more trials than
  the budget), and runs that ended elsewhere than the uninterrupted run (other
  configurations or another best).
- payloads: shell separators, `$(...)`, backticks, a newline and `#include`, a C comment
  escape, `../` and a smuggled flag, through every input (command-line values, target-file
  fields, imported lines, export manifests). The C payloads carry a constructor that would
  create the canary file if it were ever compiled and run; the shell ones create it if a
  shell ever sees them. Executed = the canary appeared.
- sharing: two processes creating one new database at once (failures), two tunes of one
  workload on one database (trials beyond the budget), `export` killed part-way (unfinished
  folders `verify` passes) and re-exported over a stale kernel source (files left outside
  the manifest).

usage: .venv/bin/python bench/robustness.py [--parts bad,kill,payload,shared] [--kill-runs R] [--kills K]
                                            [--budget N] [--workers W] [--payload-kinds K,...]
                                            [--races N] [--export-kills N] [--timeout S] [--seed S]

With the defaults (2 runs x 10 kill points, 8 payloads x 28 inputs, 2 workers) it takes about
4 minutes on an idle 2-core machine; most of it is the command's own start-up, once per attempt.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from edgetune.codegen import get_kernel
from edgetune.codegen.manifest import write_manifest
from edgetune.session import workload_of
from edgetune.targets import get_target, target_file
from edgetune.tuner import Outcome, Trial, TuningDatabase

EDGETUNE = str(Path(sys.executable).with_name("edgetune"))
SHAPE = {"m": 2, "n": 2, "k": 2}
SHAPE_TEXT = "m=2,n=2,k=2"
GOOD_CONFIG = {"tile_m": 1, "tile_n": 1, "unroll_k": 1, "vector": "c", "layout": "rowmajor", "compiler": "gcc",
               "opt": "O2"}
CANARY = "CANARY"


# --- running the command ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    code: int | None  # None: it did not end within the timeout
    stdout: str
    stderr: str


def edgetune(args: list, cwd: Path, timeout: float) -> Run:
    try:
        proc = subprocess.run([EDGETUNE, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        return Run(None, _text(exc.stdout), _text(exc.stderr))
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def refused_right(run: Run) -> bool:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    return (run.code == 2 and len(lines) == 1 and lines[0].startswith("edgetune: error: ")
            and "Traceback" not in run.stderr)


def digest(path: Path) -> str:
    """The database's bytes, with its WAL (committed but not yet checkpointed rows) too."""
    parts = [p for p in (path, path.with_name(path.name + "-wal")) if p.exists()]
    return hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()


def stored_db(folder: Path) -> Path:
    """One honest host trial of matmul_s8 m=2,n=2,k=2, recorded as a tuning run records it."""
    path = folder / "stored.db"
    kernel, target = get_kernel("matmul_s8"), get_target("host")
    db = TuningDatabase(path)
    db.record(workload_of(kernel, target, SHAPE),
              Trial(kernel.tuning_space(target, SHAPE).make(GOOD_CONFIG), Outcome.OK,
                    {"time_ns": 10.0, "code_bytes": 400, "ram_bytes": 12}), "random", 0)
    db.close()
    return path


# --- building inputs -------------------------------------------------------------------------------------
def trial_line(**changes) -> str:
    """A JSON line as `db export` writes it for the stored host workload, with `changes`."""
    w = workload_of(get_kernel("matmul_s8"), get_target("host"), SHAPE)
    data = {"format": "edgetune-trial", "schema_version": 2,
            "workload": {"kernel": w.kernel, "kernel_version": w.kernel_version, "target": w.target,
                         "shape": [list(p) for p in w.shape], "toolchain": w.toolchain},
            "config": [[k, v] for k, v in {**GOOD_CONFIG, "tile_n": 2}.items()], "outcome": "ok",
            "values": {"time_ns": 12.5, "code_bytes": 420, "ram_bytes": 12}, "error": "", "info": {},
            "strategy": "random", "seed": 0, "created": "2026-11-01T00:00:00Z", "measured_by": "lab-host-1",
            "measured_at": "2026-11-01T00:00:00Z"}
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return json.dumps(data)


def config_with(**values) -> list:
    return [[k, v] for k, v in {**GOOD_CONFIG, **values}.items()]


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def target_with(folder: Path, base: str, changes: Callable[[dict], None]) -> Path:
    """A target file: the shipped `base` with `changes` applied to its data."""
    data = tomllib.loads(target_file(base).read_text(encoding="utf-8"))
    changes(data)
    path = folder / "evil.toml"
    path.write_text("".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items()), encoding="utf-8")
    return path


def setter(*path, value) -> Callable[[dict, Path], None]:
    def change(data: dict, folder: Path | None = None) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


def fake_program(folder: Path, name: str) -> Path:
    """A script named like a real tool that only creates the canary."""
    path = folder / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {folder / CANARY}\nexit 1\n")
    path.chmod(0o755)
    return path


# --- part 1: bad inputs ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BadInput:
    """A command that must be refused right. `build(folder, db)` writes what it reads and
    returns its arguments; `harm(folder)`, when given, says whether it did damage anyway
    (a file written where a flag pointed)."""

    cls: str
    name: str
    build: Callable[[Path, Path], list]
    harm: Callable[[Path], bool] | None = None
    names: str = ""  # a regular expression the one line must match: the field, key or value at fault


def imported(*lines: str) -> Callable[[Path, Path], list]:
    def build(folder: Path, db: Path) -> list:
        (folder / "shared.jsonl").write_text("\n".join((trial_line(), *lines)) + "\n")
        return ["db", "import", "shared.jsonl", "--db", db]
    return build


def tuned_with(base: str, change: Callable[[dict, Path], None],
               shape: str = SHAPE_TEXT) -> Callable[[Path, Path], list]:
    def build(folder: Path, db: Path) -> list:
        path = target_with(folder, base, lambda data: change(data, folder))
        return ["tune", "matmul_s8", "--target", path, "--shape", shape, "--budget", "1", "--db", db]
    return build


def cflag(flag: str) -> Callable[[dict, Path], None]:
    def change(data: dict, folder: Path) -> None:
        data["compilers"][0]["cflags"] = [*data["compilers"][0]["cflags"], flag]
    return change


def file_written(name: str) -> Callable[[Path], bool]:
    return lambda folder: any(folder.rglob(name))


def _fifo_parent(data: dict, folder: Path) -> None:
    os.mkfifo(folder / "parent.toml")
    data.clear()
    data.update({"extends": str(folder / "parent.toml"), "name": "fifo-child"})


def _high_memory(data: dict, folder: Path) -> None:
    data["memory"][0]["base"] = 0x1_0000_0000


def _tiny_io(data: dict, folder: Path) -> None:
    io_regions = set(data["firmware"]["io_regions"])
    for region in data["memory"]:
        if region["name"] in io_regions:
            region["size"] = 0x11000  # the harness's reserved data fits, m=k=n=256's buffers do not


def _program(key: str, name: str):
    def change(data: dict, folder: Path) -> None:
        path = str(fake_program(folder, name))
        if key == "runner":
            data["runner"]["program"] = path
        else:
            data["compilers"][0]["command"] = path
    return change


def _read_only_import(folder: Path, db: Path) -> list:
    (folder / "shared.jsonl").write_text(trial_line() + "\n")
    db.chmod(0o444)
    folder.chmod(0o555)
    return ["db", "import", "shared.jsonl", "--db", db]


def bad_inputs() -> list[BadInput]:
    forged = [
        ("negative value", trial_line(values={"time_ns": -5.0, "code_bytes": 1, "ram_bytes": 1})),
        ("NaN", trial_line().replace("12.5", "NaN")),
        ("overflowing number", trial_line().replace("12.5", "1e999")),
        ("string value", trial_line(values={"time_ns": "fast", "code_bytes": 1, "ram_bytes": 1})),
        ("fractional count", trial_line(values={"time_ns": 1.0, "code_bytes": 1.5, "ram_bytes": 1})),
        ("value outside the space", trial_line(config=config_with(tile_m=3))),
        ("type outside the space", trial_line(config=config_with(tile_m="1"))),
        ("unknown parameter", trial_line(config=[*config_with(), ["evil", 1]])),
        ("illegal combination", trial_line(config=config_with(vector="avx2"))),
        ("payload in a value", trial_line(config=config_with(opt="O2; touch CANARY"))),
        ("unknown kernel", trial_line(workload__kernel="rootkit")),
        ("unknown target", trial_line(workload__target="mars")),
        ("other template version", trial_line(workload__kernel_version=99)),
        ("unknown outcome", trial_line(outcome="great")),
        ("huge error text", trial_line(outcome="compile", values={}, error="x" * 100_000)),
        ("nested info", trial_line(info={"cflags": {"a": 1}})),
    ]
    cases = [BadInput("13.1 db import", name, imported(text), names="line 2") for name, text in forged]
    cases += [BadInput("13.3 compiler flags", flag, tuned_with("cortex-m55", cflag(flag)), file_written("x.txt"),
                       names="cflags")
              for flag in ("-fopt-info-all=x.txt", "--coverage", "-ftest-coverage", "-fstack-usage", "-save-temps",
                           "-fdump-tree-all", "-E", "-S")]
    cases += [BadInput("13.4 program paths", f"{key} {name}", tuned_with("cortex-m55", _program(key, name)),
                       file_written(CANARY))
              for key, name in (("runner", "qemu-system-arm"), ("compiler", "arm-none-eabi-gcc"))]
    cases += [BadInput("13.4 program paths", "runner qemu-img", tuned_with("cortex-m55", setter("runner", "program",
                                                                                          value="qemu-img")))]
    cases += [
        BadInput("13.9 target file", "timeout_s = inf", tuned_with("cortex-m55", setter("runner", "timeout_s",
                                                                                    value=float("inf")))),
        BadInput("13.9 target file", "extends = '.'", tuned_with("cortex-m55", lambda d, f: d.update(extends="."))),
        BadInput("13.9 target file", "extends a FIFO", tuned_with("cortex-m55", _fifo_parent)),
        BadInput("13.9 target file", "region above 4 GiB", tuned_with("cortex-m55", _high_memory)),
        BadInput("13.9 target file", "clock_hz = 10**29", tuned_with("cortex-m55", setter("core", "clock_hz",
                                                                                    value=10 ** 29))),
        BadInput("13.9 target file", "I/O regions too small", tuned_with("cortex-m55", _tiny_io, "m=256,n=256,k=256")),
        BadInput("13.10 shapes", "m = 2**70", lambda f, db: ["tune", "matmul_s8", "--target", "host", "--shape",
                                                            f"m={2 ** 70},n=2,k=2", "--db", db], names=r"\bm\b"),
        BadInput("13.10 shapes", "newline in a path", lambda f, db: ["best", "matmul_s8", "--target", "host",
                                                                    "--shape", SHAPE_TEXT, "--db", "no\nsuch.db"]),
    ]
    if os.geteuid() != 0:  # root writes a read-only file anyway: the case cannot be tried as root
        cases.append(BadInput("13.8 read-only db", "db import", _read_only_import))
    return cases + issue27_destination_flash_graph_inputs()


@dataclass
class Tally:
    tried: int = 0
    right: int = 0
    harmed: int = 0
    wrong: list[str] = field(default_factory=list)


def try_bad_input(case: BadInput, timeout: float) -> tuple[bool, bool, str]:
    """(refused right, harm done, what happened) for one bad input."""
    with tempfile.TemporaryDirectory(prefix="robust-") as tmp:
        folder = Path(tmp)
        db = stored_db(folder)
        before = digest(db)
        run = edgetune(case.build(folder, db), folder, timeout)
        folder.chmod(0o755)
        db.chmod(0o644)
        unchanged = digest(db) == before
        harmed = (case.harm is not None and case.harm(folder)) or (folder / CANARY).exists()
    named = re.search(case.names, run.stderr) is not None
    right = refused_right(run) and named and unchanged and not harmed
    said = "timed out" if run.code is None else f"exit {run.code}"
    said += "" if named else f", does not name {case.names}"
    return right, harmed or not unchanged, (f"{case.name} ({said}{'' if unchanged else ', database changed'}"
                                            f"{', HARM' if harmed else ''})")


def try_bad_inputs(timeout: float, workers: int) -> dict[str, Tally]:
    cases = bad_inputs()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda case: try_bad_input(case, timeout), cases))
    tallies: dict[str, Tally] = {}
    for case, (right, harmed, note) in zip(cases, results):
        tally = tallies.setdefault(case.cls, Tally())
        tally.tried += 1
        tally.right += right
        tally.harmed += harmed
        if not right:
            tally.wrong.append(note)
    tallies["13.1 forged count exported"] = try_forged_export(timeout)
    tallies.update(try_issue27_flows(timeout))
    return tallies


def try_forged_export(timeout: float) -> Tally:
    """A well-formed line claiming instructions=1 for a legal configuration of an emulated
    workload: `export` must refuse it (a stored count and the count measured at export
    disagree), naming the workload."""
    tally = Tally(tried=1)
    with tempfile.TemporaryDirectory(prefix="robust-") as tmp:
        folder = Path(tmp)
        shape = "m=4,n=4,k=4"
        run = edgetune(["tune", "matmul_s8", "--target", "cortex-m55", "--shape", shape, "--budget", "2",
                        "--jobs", "2", "--db", "t.db"], folder, timeout)
        dump = edgetune(["db", "export", "--db", "t.db", "--out", "-"], folder, timeout)
        if run.code != 0 or dump.code != 0:
            tally.wrong.append(f"setup failed: {run.stderr.strip()[-200:]}")
            return tally
        stored = [json.loads(text) for text in dump.stdout.splitlines()]
        kernel, target = get_kernel("matmul_s8"), get_target("cortex-m55")
        space = kernel.tuning_space(target, kernel.parse_shape(shape))
        taken = {tuple(map(tuple, line["config"])) for line in stored}
        fresh = next(c for c in space if tuple(c.items) not in taken and c["vector"] == "c")
        forged = dict(stored[0], config=[list(item) for item in fresh.items],
                      values={**stored[0]["values"], "instructions": 1})
        (folder / "forged.jsonl").write_text(json.dumps(forged) + "\n")
        edgetune(["db", "import", "forged.jsonl", "--db", "t.db"], folder, timeout)
        export = edgetune(["export", "--target", "cortex-m55", "--db", "t.db", "--out", "out"], folder, timeout)
        right = refused_right(export) and "matmul_s8" in export.stderr
    tally.right += right
    tally.harmed += not right
    if not right:
        tally.wrong.append(f"export exit {export.code}: the forged count was "
                           f"{'exported' if export.code == 0 else 'refused without naming the workload'}")
    return tally


# --- issue 27 (export destinations, flash arguments, graph order, verify --db, linked --out) -------------
# Each class fails right (exit 2, one line naming the culprit) or counts harm: a folder of the
# user's changed, a shared object loaded or a file written by a flash command, a module exported
# from a graph that cannot run in order, a forged export passing `verify --db`, a linked export
# left stale or a hidden folder left beside it.
FOREIGN_MANIFESTS = {"web app": '{"name": "my-app", "icons": []}', "empty": "", "garbage": "\x00garbage",
                     "list": "[1, 2]", "files only": '{"files": {"notes.txt": "0"}}',
                     "unchecked": '{"manifest_version": 1, "target": "host", "kernels": [], "files": {}, '
                                  '"manifest_sha256": "' + "0" * 64 + '"}',
                     "nested": "[" * 100_000}
GRAPH_MODEL = Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / "ds_cnn_kws.tflite"


def _users_folder(folder: Path, manifest: str) -> Path:
    out = folder / "d"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (out / "notes.txt").write_text("x\n")
    (out / "manifest.json").write_text(manifest)
    return out


def _users_folder_export(manifest: str, model: bool) -> Callable[[Path, Path], list]:
    def build(folder: Path, db: Path) -> list:
        out = _users_folder(folder, manifest)
        if model:
            return ["model", "export", GRAPH_MODEL, "--target", "cortex-m55", "--out", out]
        return ["export", "--target", "host", "--db", db, "--out", out]
    return build


def _users_folder_changed(folder: Path) -> bool:
    out = folder / "d"
    return not ((out / "notes.txt").is_file() and (out / "src" / "main.c").is_file()
                and sorted(p.name for p in out.iterdir()) == ["manifest.json", "notes.txt", "src"]
                or any(p.name.startswith(".d.") for p in folder.iterdir()))


def _evil_plugin(folder: Path) -> Path:
    """A shared object whose constructor creates the canary when anything loads it."""
    source = folder / "evil.c"
    source.write_text(f'#include <fcntl.h>\n__attribute__((constructor)) static void pwn(void) '
                      f'{{ creat("{folder / CANARY}", 0644); }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(source)], check=True)
    return folder / "evil.so"


def _flash_extra(*extra: str, plugin: bool = False) -> Callable[[dict, Path], None]:
    def change(data: dict, folder: Path) -> None:
        args = [a.replace("@", str(folder) + "/") for a in extra]
        if plugin:
            args = ["-plugin", f"file={_evil_plugin(folder)}"]
        flash = data["serial"]["flash"]
        data["serial"]["flash"] = [*flash[:-2], *args, *flash[-2:]]
    return change


def _bad_graph(edges: list[tuple[int, int]]) -> Callable[[Path, Path], list]:
    def build(folder: Path, db: Path) -> list:
        from edgetune.codegen.model.builder import build_model
        from edgetune.codegen.model.graph import Operator, Quantization, Tensor
        q = Quantization((0.05,), (0,))
        tensors = [Tensor(i, f"t{i}", (1, 8), "int8", q) for i in range(3)]
        operators = [Operator(n, "QUANTIZE", (a,), (b,)) for n, (a, b) in enumerate(edges)]
        (folder / "bad.tflite").write_bytes(build_model(tensors, operators, [0], [2]))
        return ["model", "export", "bad.tflite", "--target", "cortex-m55", "--out", "module"]
    return build


def issue27_destination_flash_graph_inputs() -> list[BadInput]:
    cases = [BadInput("27.1 export destination", f"{'model export' if model else 'export'} {name}",
                      _users_folder_export(text, model), _users_folder_changed, names=r"/d: its manifest\.json")
             for name, text in FOREIGN_MANIFESTS.items() for model in (False, True)]
    cases += [BadInput("27.2 flash arguments", name, tuned_with("an547-serial", change), file_written(written),
                       names=r"serial\.flash\[\d+\]")
              for name, change, written in (
                  ("-plugin evil.so", _flash_extra(plugin=True), CANARY),
                  ("-D log -d in_asm", _flash_extra("-D", "@qemu.log", "-d", "in_asm"), "qemu.log"),
                  ("-serial file:", _flash_extra("-chardev", "file,id=x,path=@out.txt"), "out.txt"),
                  ("-semihosting", _flash_extra("-semihosting"), CANARY))]
    cases += [BadInput("27.4 graph order", name, _bad_graph(edges), lambda f: (f / "module").exists(),
                       names=r"operator \d+ \(QUANTIZE\)")
              for name, edges in (("reads its own output", [(0, 1), (1, 1), (1, 2)]),
                                  ("two-operator cycle", [(0, 2), (2, 1), (1, 2)]),
                                  ("out of execution order", [(1, 2), (0, 1)]))]
    return cases


def try_issue27_flows(timeout: float) -> dict[str, Tally]:
    """The two classes that need an earlier export: a forged one `verify --db` must fail, and
    an --out linking to one that must be replaced in place, leaving nothing hidden."""
    tallies = {"27.5 verify --db, forged": Tally(tried=1), "27.6 linked --out": Tally(tried=2)}
    with tempfile.TemporaryDirectory(prefix="robust-27-") as tmp:
        folder = Path(tmp)
        tune = edgetune(["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=4,n=8,k=8", "--budget", "2",
                         "--db", "t.db"], folder, timeout)
        export = edgetune(["export", "--target", "cortex-m55", "--db", "t.db", "--out", "v1"], folder, timeout)
        if tune.code != 0 or export.code != 0:
            for tally in tallies.values():
                tally.wrong.append(f"setup failed: {(tune.stderr + export.stderr).strip()[-200:]}")
            return tallies
        _forged_verify(folder, tallies["27.5 verify --db, forged"], timeout)
        _linked_out(folder, tallies["27.6 linked --out"], timeout)
    tallies["27.b template sandbox"] = _template_escape(timeout)
    tallies["27.a output overrun"] = _output_overrun(timeout)
    return tallies


def _output_overrun(timeout: float) -> Tally:
    """A kernel of one's own with right answers that also writes one element past its output,
    tuned alone and batched on the M55 and on the host: every trial must be `overrun`, none
    stored `ok` (harm: an ok trial)."""
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="robust-overrun-") as tmp:
        folder = Path(tmp)
        kernel = folder / "overrun"
        kernel.mkdir()
        example = Path(__file__).resolve().parent.parent / "examples" / "kernels" / "vector_add"
        (kernel / "kernel.py").write_text((example / "kernel.py").read_text())
        source = (example / "vector_add.c").read_text()
        (kernel / "vector_add.c").write_text(source[:source.rindex("}")] + "    c[n] = 1.0f;\n}\n")
        for target, batch in (("cortex-m55", "1"), ("cortex-m55", "4"), ("host", "4")):
            db = f"{target}-{batch}.db"
            run = edgetune(["tune", "--kernel-file", kernel, "--target", target, "--shape", "size=16", "--budget", "4",
                            "--batch", batch, "--db", db], folder, timeout)
            outcomes = [outcome for _, outcome, _ in stored_rows(folder / db)]
            tally.tried += 1
            right = bool(outcomes) and set(outcomes) == {"overrun"}
            tally.right += right
            tally.harmed += "ok" in outcomes
            if not right:
                tally.wrong.append(f"{target} --batch {batch}: exit {run.code}, stored {sorted(outcomes)}")
    return tally


def _template_escape(timeout: float) -> Tally:
    """A kernel template reaching Python through Jinja2's internals: the sandbox stops the
    render (harm: the canary appeared, i.e. the template ran a command)."""
    tally = Tally(tried=1)
    with tempfile.TemporaryDirectory(prefix="robust-sandbox-") as tmp:
        folder = Path(tmp)
        kernel = folder / "escape"
        kernel.mkdir()
        example = Path(__file__).resolve().parent.parent / "examples" / "kernels" / "vector_add"
        (kernel / "kernel.py").write_text((example / "kernel.py").read_text().replace('"vector_add.c"', '"add.c.j2"')
                                          .replace('name="vector_add"', 'name="escape_add"'))
        escape = f"{{{{ cycler.__init__.__globals__.os.system('touch {folder / CANARY}') }}}}"
        (kernel / "add.c.j2").write_text(f"/* {escape} */\n" + (example / "vector_add.c").read_text())
        run = edgetune(["tune", "--kernel-file", kernel, "--target", "host", "--shape", "size=16", "--budget", "1",
                        "--db", "t.db"], folder, timeout)
        ran = (folder / CANARY).exists()
    tally.right += not ran
    tally.harmed += ran
    if ran:
        tally.wrong.append(f"a kernel template ran a command (tune exit {run.code})")
    return tally


def _forged_verify(folder: Path, tally: Tally, timeout: float) -> None:
    """Slow the kernel, raise its exported_value to match, recompute every checksum."""
    forged = folder / "forged"
    subprocess.run(["cp", "-r", str(folder / "v1"), str(forged)], check=True)
    manifest = json.loads((forged / "manifest.json").read_text())
    victim = manifest["kernels"][0]
    source = forged / victim["source"]
    text = source.read_text()
    body = text.index("{", text.index(victim["function"] + "(")) + 1
    source.write_text(text[:body] + "\n    for (volatile int spin = 0; spin < 64; spin++) { }" + text[body:])
    victim["exported_value"] = victim["exported_value"] * 100
    victim["exported_values"][victim["objective"]] = victim["exported_value"]
    manifest["files"][victim["source"]] = hashlib.sha256(source.read_bytes()).hexdigest()
    write_manifest(forged, manifest)
    run = edgetune(["verify", "forged", "--db", "t.db"], folder, timeout)
    right = run.code == 1 and victim["function"] in run.stdout
    tally.right += right
    tally.harmed += run.code == 0
    if not right:
        tally.wrong.append(f"verify --db of a slowed kernel with a rewritten manifest: exit {run.code}")


def _linked_out(folder: Path, tally: Tally, timeout: float) -> None:
    """An --out that links to an earlier export, then a link to nothing."""
    (folder / "current").symlink_to(folder / "v1")
    # Marked, so a replaced export is told from the one left stale (both carry the minute's stamp).
    write_manifest(folder / "v1", {**json.loads((folder / "v1" / "manifest.json").read_text()), "exported": "old"})
    run = edgetune(["export", "--target", "cortex-m55", "--db", "t.db", "--out", "current"], folder, timeout)
    fresh = json.loads((folder / "v1" / "manifest.json").read_text())["exported"]
    hidden = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    right = run.code == 0 and (folder / "current").is_symlink() and fresh != "old" and not hidden
    tally.right += right
    tally.harmed += not right
    if not right:
        tally.wrong.append(f"export through a link: exit {run.code}, link kept {(folder / 'current').is_symlink()}, "
                           f"linked export {'stale' if fresh == 'old' else 'replaced'}, hidden {hidden}")
    (folder / "nowhere").symlink_to(folder / "missing")
    run = edgetune(["export", "--target", "cortex-m55", "--db", "t.db", "--out", "nowhere"], folder, timeout)
    right = refused_right(run) and "nowhere" in run.stderr and not (folder / "missing").exists()
    tally.right += right
    tally.harmed += not right and (folder / "nowhere").is_dir() and not (folder / "nowhere").is_symlink()
    if not right:
        tally.wrong.append(f"export through a dangling link: exit {run.code}")


# --- part 2: kill points ---------------------------------------------------------------------------------
KILL_TUNE = ["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=8,n=16,k=16", "--jobs", "2", "--seed", "7",
             "--json"]


def stored_rows(db: Path) -> list[tuple[str, str, str]]:
    """(configuration, outcome, measured values) of every stored trial; [] before the file exists."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("SELECT config_key, outcome, measured FROM trials ORDER BY config_key").fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def duplicates(db: Path) -> int:
    rows = stored_rows(db)
    return len(rows) - len({key for key, _, _ in rows})


@dataclass
class KillTally:
    runs: int = 0
    kills: int = 0
    lost: int = 0
    duplicated: int = 0
    elsewhere: int = 0
    notes: list[str] = field(default_factory=list)


def kill_once(folder: Path, budget: int, delay: float) -> tuple[int, int]:
    """Start the tune, kill its whole process group after `delay` seconds; (trials stored
    just before the kill, trials stored after it)."""
    proc = subprocess.Popen([EDGETUNE, *KILL_TUNE, "--budget", str(budget), "--db", "k.db"], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(delay)
    before = len(stored_rows(folder / "k.db"))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it finished first
    proc.wait()
    return before, len(stored_rows(folder / "k.db"))


def try_kill_points(runs: int, kills: int, budget: int, timeout: float, rng: random.Random) -> KillTally:
    tally = KillTally()
    with tempfile.TemporaryDirectory(prefix="robust-kill-") as tmp:
        folder = Path(tmp)
        started = time.monotonic()
        reference = edgetune([*KILL_TUNE, "--budget", budget, "--db", "ref.db"], folder, timeout)
        duration = time.monotonic() - started
        if reference.code != 0:
            tally.notes.append(f"the uninterrupted run failed: {reference.stderr.strip()[-200:]}")
            return tally
        expected = stored_rows(folder / "ref.db")
        for run in range(runs):
            (folder / "k.db").unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                (folder / f"k.db{suffix}").unlink(missing_ok=True)
            for _ in range(kills):
                before, after = kill_once(folder, budget, rng.uniform(0.2, max(0.5, duration * 0.9)))
                tally.kills += 1
                tally.lost += max(0, before - after)
            final = edgetune([*KILL_TUNE, "--budget", budget, "--db", "k.db"], folder, timeout)
            rows = stored_rows(folder / "k.db")
            tally.runs += 1
            tally.duplicated += duplicates(folder / "k.db") + max(0, len(rows) - budget)
            if final.code != 0 or rows != expected:
                tally.elsewhere += 1
                got = json.loads(final.stdout)["best"] if final.code == 0 else None
                tally.notes.append(f"run {run + 1}: {len(set(rows) - set(expected))} trials differ from the "
                                   f"uninterrupted run's; best {got and got.get('instructions')} vs "
                                   f"{json.loads(reference.stdout)['best'].get('instructions')}")
    return tally


# --- part 3: payloads ------------------------------------------------------------------------------------
def payloads(folder: Path) -> dict[str, str]:
    """Each creates the canary if it ever reaches a shell, or C that is compiled and run."""
    canary = folder / CANARY
    constructor = f'__attribute__((constructor)) static void pwn(void) {{ system("touch {canary}"); }}'
    (folder / "evil.h").write_text(f"#include <stdlib.h>\n{constructor}\n")
    return {
        "semicolon": f"x; touch {canary}",
        "subshell": f"$(touch {canary})",
        "backticks": f"`touch {canary}`",
        "newline-include": f'x\n#include "{folder / "evil.h"}"',
        "comment-escape": f"x */ {constructor} /*",
        "dotdot": f"../../../{canary}",
        "flag-smuggling": f"-fplugin={canary}.so",
        "pipe": f"x | touch {canary}",
    }


@dataclass(frozen=True)
class Input:
    """Where a payload goes: `build(folder, db, payload)` returns the command's arguments."""

    cls: str
    name: str
    build: Callable[[Path, Path, str], list]


def _tune(shape=SHAPE_TEXT, *extra) -> list:
    return ["tune", "matmul_s8", "--target", "host", "--shape", shape, "--budget", "1", *extra]


def _target_field(*path) -> Callable[[Path, Path, str], list]:
    def build(folder: Path, db: Path, payload: str) -> list:
        toml = target_with(folder, "host", setter(*path, value=payload))
        return ["tune", "matmul_s8", "--target", toml, "--shape", SHAPE_TEXT, "--budget", "1", "--db", db]
    return build


def _import_field(field_path: str) -> Callable[[Path, Path, str], list]:
    def build(folder: Path, db: Path, payload: str) -> list:
        if field_path == "config":
            text = trial_line(config=config_with(opt=payload))
        elif field_path == "config name":
            text = trial_line(config=[*config_with(), [payload, 1]])
        else:
            text = trial_line(**{field_path: payload})
        (folder / "in.jsonl").write_text(text + "\n")
        return ["db", "import", "in.jsonl", "--db", db]
    return build


def _manifest_field(*path) -> Callable[[Path, Path, str], list]:
    def build(folder: Path, db: Path, payload: str) -> list:
        cflags = ["-march=native", "-std=c99", "-O2"]
        data = {"manifest_version": 1, "edgetune_version": "0.1.0", "target": "host", "objective": "time_ns",
                "exported": "2026-11-29 10:00 UTC", "database": "edgetune.db",
                "dispatch": {"source": "edgetune_kernels.c", "compiler_command": "gcc", "cflags": list(cflags)},
                "kernels": [{"kernel": "matmul_s8", "kernel_version": 2, "shape": dict(SHAPE),
                             "function": "et_matmul_s8_m2_n2_k2", "source": "et_matmul_s8_m2_n2_k2.c",
                             "config": dict(GOOD_CONFIG), "objective": "time_ns", "value": 10.0,
                             "values": {"time_ns": 10.0}, "compiler": "gcc", "compiler_command": "gcc",
                             "cflags": list(cflags), "trial_id": 1, "measured": "", "toolchain": ""}],
                "files": {}}
        setter(*path, value=payload)(data)
        (folder / "export").mkdir(exist_ok=True)
        write_manifest(folder / "export", data)
        return ["verify", folder / "export", "--target", "host"]
    return build


INPUTS = [
    Input("command line", "--shape value", lambda f, db, p: [*_tune(f"m={p},n=2,k=2"), "--db", db]),
    Input("command line", "--shape key", lambda f, db, p: [*_tune(f"{p}=2,n=2,k=2"), "--db", db]),
    Input("command line", "--initial", lambda f, db, p: [*_tune(SHAPE_TEXT, "--initial", f"opt={p}"), "--db", db]),
    Input("command line", "--objective", lambda f, db, p: [*_tune(SHAPE_TEXT, "--objective", p), "--db", db]),
    Input("command line", "--constraint", lambda f, db, p: [*_tune(SHAPE_TEXT, "--constraint", f"{p}<=1"), "--db", db]),
    Input("command line", "--strategy", lambda f, db, p: [*_tune(SHAPE_TEXT, "--strategy", p), "--db", db]),
    Input("command line", "kernel name", lambda f, db, p: ["tune", p, "--target", "host", "--shape", SHAPE_TEXT,
                                                           "--db", db]),
    Input("command line", "db remove --workload", lambda f, db, p: ["db", "remove", "--db", db, "--workload", p]),
    Input("target file", "name", _target_field("name")),
    Input("target file", "compilers[0].command", _target_field("compilers", 0, "command")),
    Input("target file", "compilers[0].cflags[0]", _target_field("compilers", 0, "cflags", 0)),
    Input("target file", "compilers[0].name", _target_field("compilers", 0, "name")),
    Input("target file", "runner.kind", _target_field("runner", "kind")),
    Input("db import", "workload.kernel", _import_field("workload__kernel")),
    Input("db import", "workload.target", _import_field("workload__target")),
    Input("db import", "workload.toolchain", _import_field("workload__toolchain")),
    Input("db import", "config value", _import_field("config")),
    Input("db import", "config name", _import_field("config name")),
    Input("db import", "strategy", _import_field("strategy")),
    Input("db import", "measured_by", _import_field("measured_by")),
    Input("db import", "created", _import_field("created")),
    Input("export manifest", "target", _manifest_field("target")),
    Input("export manifest", "kernels[0].function", _manifest_field("kernels", 0, "function")),
    Input("export manifest", "kernels[0].source", _manifest_field("kernels", 0, "source")),
    Input("export manifest", "kernels[0].cflags[1]", _manifest_field("kernels", 0, "cflags", 1)),
    Input("export manifest", "kernels[0].compiler_command", _manifest_field("kernels", 0, "compiler_command")),
    Input("export manifest", "kernels[0].config.opt", _manifest_field("kernels", 0, "config", "opt")),
    Input("export manifest", "dispatch.cflags[0]", _manifest_field("dispatch", "cflags", 0)),
]


@dataclass
class PayloadTally:
    tried: int = 0
    refused: int = 0
    executed: int = 0
    notes: list[str] = field(default_factory=list)


def try_payload(entry: Input, kind: str, timeout: float) -> tuple[bool, bool, str]:
    """(refused right, executed, what happened) for one payload through one input."""
    with tempfile.TemporaryDirectory(prefix="robust-payload-") as tmp:
        folder = Path(tmp)
        db = stored_db(folder)
        run = edgetune(entry.build(folder, db, payloads(folder)[kind]), folder, timeout)
        executed = any(folder.rglob(f"{CANARY}*"))
    said = "EXECUTED" if executed else ("timed out" if run.code is None else f"exit {run.code}")
    return refused_right(run), executed, f"{entry.name} {kind}: {said}"


def try_payloads(timeout: float, workers: int, kinds: list[str]) -> dict[str, PayloadTally]:
    known = payloads(Path(tempfile.gettempdir()))
    unknown = [kind for kind in kinds if kind not in known]
    if unknown:
        raise SystemExit(f"robustness.py: unknown payload {unknown[0]!r} (known: {', '.join(known)})")
    jobs = [(entry, kind) for entry in INPUTS for kind in kinds]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda job: try_payload(*job, timeout), jobs))
    tallies: dict[str, PayloadTally] = {}
    for (entry, _), (refused, executed, note) in zip(jobs, results):
        tally = tallies.setdefault(entry.cls, PayloadTally())
        tally.tried += 1
        tally.refused += refused
        tally.executed += executed
        if executed or not refused:
            tally.notes.append(note)
    return tallies


# --- part 4: sharing a database, exports killed part-way -------------------------------------------------
@dataclass
class SharedTally:
    creation_tries: int = 0
    creation_failed: int = 0
    budget: int = 0
    stored: int = 0  # trials two processes tuning one workload left (should be the budget)
    export_kills: int = 0
    partial_passed: int = 0  # exports killed part-way whose unfinished folder `verify` passed
    stale_files: int = 0  # files left in a re-exported folder outside its manifest
    notes: list[str] = field(default_factory=list)


def try_creation_race(tally: SharedTally, tries: int, timeout: float) -> None:
    """Two processes creating one new database at once (a `db import` each)."""
    for n in range(tries):
        with tempfile.TemporaryDirectory(prefix="robust-race-") as tmp:
            folder = Path(tmp)
            (folder / "shared.jsonl").write_text(trial_line() + "\n")
            procs = [subprocess.Popen([EDGETUNE, "db", "import", "shared.jsonl", "--db", "new.db"], cwd=folder,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
            results = [proc.communicate(timeout=timeout) for proc in procs]
            tally.creation_tries += 1
            failed = [err.strip() for proc, (_, err) in zip(procs, results) if proc.returncode != 0]
            tally.creation_failed += bool(failed)
            if failed:
                tally.notes.append(f"creation try {n + 1}: {failed[0][-160:]}")


def try_split_budget(tally: SharedTally, budget: int, timeout: float) -> None:
    """Two tunes of one workload on one database: together they should store the budget."""
    with tempfile.TemporaryDirectory(prefix="robust-split-") as tmp:
        folder = Path(tmp)
        args = ["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=4,n=4,k=4", "--budget", str(budget),
                "--jobs", "1", "--db", "shared.db"]
        edgetune(["db", "import", "/dev/null", "--db", "shared.db"], folder, timeout)  # created before the race
        procs = [subprocess.Popen([EDGETUNE, *args, "--seed", str(seed)], cwd=folder, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
        errors = [proc.communicate(timeout=timeout)[1] for proc in procs]
        tally.budget = budget
        tally.stored = len(stored_rows(folder / "shared.db"))
        for proc, err in zip(procs, errors):
            if proc.returncode != 0:
                tally.notes.append(f"a sharing tune failed: {err.strip()[-160:]}")


def manifest_files(folder: Path) -> set[str] | None:
    """The files the manifest lists, as paths relative to the folder (zephyr/module.yml)."""
    try:
        return set(json.loads((folder / "manifest.json").read_text())["files"]) | {"manifest.json"}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def folder_files(folder: Path) -> set[str]:
    """Every file below the folder, as a path relative to it (subfolders: their files)."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def measured_at_export(folder: Path) -> bool:
    """Whether every kernel of the manifest carries the value measured at export."""
    try:
        kernels = json.loads((folder / "manifest.json").read_text())["kernels"]
        return all(kernel.get("exported_value") is not None for kernel in kernels)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def try_exports(tally: SharedTally, kills: int, timeout: float, rng: random.Random) -> None:
    """`export` killed at random moments (then `verify` must not pass what is left), and
    a re-export into a folder holding a stale kernel source (it must not stay)."""
    with tempfile.TemporaryDirectory(prefix="robust-export-") as tmp:
        folder = Path(tmp)
        edgetune(["tune", "matmul_s8", "--target", "cortex-m55", "--shape", "m=4,n=4,k=4", "--budget", "2",
                  "--db", "t.db"], folder, timeout)
        export = ["export", "--target", "cortex-m55", "--db", "t.db", "--out"]
        started = time.monotonic()
        edgetune([*export, "full"], folder, timeout)
        duration = time.monotonic() - started
        for n in range(kills):
            out = folder / f"killed{n}"
            proc = subprocess.Popen([EDGETUNE, *export, out.name], cwd=folder, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rng.uniform(0.1, max(0.2, duration)))
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            tally.export_kills += 1
            if out.exists() and edgetune(["verify", out.name, "--target", "cortex-m55"], folder, timeout).code == 0:
                complete = manifest_files(out) == folder_files(out) and measured_at_export(out)
                tally.partial_passed += not complete
                if not complete:
                    tally.notes.append(f"export killed at kill point {n + 1}: verify passed an unfinished folder")
        (folder / "full" / "et_stale_kernel.c").write_text("int stale;\n")
        edgetune([*export, "full"], folder, timeout)
        listed = manifest_files(folder / "full") or set()
        stale = folder_files(folder / "full") - listed
        tally.stale_files = len(stale)
        if stale:
            tally.notes.append(f"re-export left {', '.join(sorted(stale))} outside the manifest")


def print_shared(t: SharedTally) -> int:
    print("\nsharing a database, exports killed part-way")
    print(f"  creation races: {t.creation_tries} tries, {t.creation_failed} with a process failing")
    print(f"  two tunes of one workload, budget {t.budget}: {t.stored} trials stored "
          f"({max(0, t.stored - t.budget)} beyond the budget)")
    print(f"  exports killed: {t.export_kills}, unfinished folders verify passed: {t.partial_passed}; "
          f"stale files after a re-export: {t.stale_files}")
    for note in t.notes:
        print(f"      {note}")
    return t.creation_failed + max(0, t.stored - t.budget) + t.partial_passed + t.stale_files


# --- the table -------------------------------------------------------------------------------------------
def print_bad_inputs(tallies: dict[str, Tally]) -> int:
    print(f"\nbad inputs (refused right: exit 2, one line on stderr, database unchanged)")
    print(f"  {'class':28} {'tried':>5} {'right':>5} {'wrong':>5} {'harm':>5}")
    for cls, t in tallies.items():
        print(f"  {cls:28} {t.tried:5} {t.right:5} {t.tried - t.right:5} {t.harmed:5}")
        for note in t.wrong:
            print(f"      not right: {note}")
    total = sum(t.tried for t in tallies.values())
    wrong = sum(t.tried - t.right for t in tallies.values())
    print(f"  {'all':28} {total:5} {total - wrong:5} {wrong:5} {sum(t.harmed for t in tallies.values()):5}")
    return wrong


def print_kill_points(t: KillTally) -> int:
    print(f"\nkill points (tune {' '.join(KILL_TUNE[1:-1])}, SIGKILL to the process group, resumed)")
    print(f"  runs {t.runs}, kill points {t.kills}: trials lost {t.lost}, duplicated {t.duplicated}, "
          f"runs that ended elsewhere {t.elsewhere}")
    for note in t.notes:
        print(f"      {note}")
    return t.lost + t.duplicated + t.elsewhere + (t.runs == 0)


def print_payloads(tallies: dict[str, PayloadTally]) -> int:
    print("\npayloads (executed: the canary file appeared)")
    print(f"  {'input':28} {'tried':>5} {'refused':>7} {'executed':>8}")
    for cls, t in tallies.items():
        print(f"  {cls:28} {t.tried:5} {t.refused:7} {t.executed:8}")
        for note in t.notes:
            print(f"      {note}")
    executed = sum(t.executed for t in tallies.values())
    print(f"  {'all':28} {sum(t.tried for t in tallies.values()):5} "
          f"{sum(t.refused for t in tallies.values()):7} {executed:8}")
    return executed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="bad,kill,payload,shared",
                        help="comma-separated: bad, kill, payload, shared")
    parser.add_argument("--races", type=int, default=4, help="tries of two processes creating one database")
    parser.add_argument("--export-kills", type=int, default=4, help="exports killed part-way")
    parser.add_argument("--kill-runs", type=int, default=2, help="resumed runs, each killed --kills times")
    parser.add_argument("--kills", type=int, default=10, help="kill points per run")
    parser.add_argument("--budget", type=int, default=20, help="trials of the killed tune")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one command may take")
    parser.add_argument("--seed", type=int, default=13, help="seed of the kill moments")
    parser.add_argument("--workers", type=int, default=2, help="bad inputs and payloads tried at once")
    parser.add_argument("--payload-kinds", default="", help="comma-separated subset of the payloads (default: all: "
                        + ", ".join(payloads(Path(tempfile.gettempdir()))) + ")")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    started = time.monotonic()
    harm = 0
    if "bad" in parts:
        harm += print_bad_inputs(try_bad_inputs(args.timeout, args.workers))
    if "kill" in parts:
        harm += print_kill_points(try_kill_points(args.kill_runs, args.kills, args.budget, args.timeout,
                                                  random.Random(args.seed)))
    if "payload" in parts:
        kinds = [k for k in args.payload_kinds.split(",") if k] or list(payloads(Path(tempfile.gettempdir())))
        harm += print_payloads(try_payloads(args.timeout, args.workers, kinds))
    if "shared" in parts:
        shared = SharedTally()
        try_creation_race(shared, args.races, args.timeout)
        try_split_budget(shared, 8, args.timeout)
        try_exports(shared, args.export_kills, args.timeout, random.Random(args.seed))
        harm += print_shared(shared)
    print(f"\n{'every count of harm is 0' if harm == 0 else f'{harm} counted against the promise'} "
          f"({time.monotonic() - started:.0f} s)")
    return 0 if harm == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
