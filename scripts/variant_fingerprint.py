"""Fingerprints of every kernel's space and generated C, per (kernel, vector path, target),
to show that a refactoring of kernels and templates changed neither.

For each shipped target, kernel and vector path it records the space (parameter names and
values, the number of legal points and a hash of which points are legal and why not), and
for a sample of legal configurations the hash of the rendered C with comments and
whitespace folded away. With --measure it also builds and runs a smaller sample on the
emulated targets and records the measured counts (instructions, ...), which are
deterministic there.

    python scripts/variant_fingerprint.py --out before.json [--measure 2]
    python scripts/variant_fingerprint.py --out after.json [--measure 2] --compare before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from edgetune.codegen import KERNELS
from edgetune.evaluate import Evaluator
from edgetune.targets import get_target

TARGETS = ("cortex-m55", "cortex-m4", "cortex-m7", "cortex-a53", "cortex-a72", "host")
EMULATED = ("cortex-m55", "cortex-m4", "cortex-m7", "cortex-a53", "cortex-a72")
SHAPES = {"matmul_s8": "m=7,n=13,k=37", "matmul_f32": "m=9,n=20,k=33",
          "conv2d_s8": "h=6,w=7,cin=5,cout=6,kh=3,kw=3,stride=1,pad=1,dilation=1",
          "dwconv2d_s8": "h=7,w=6,c=9,kh=3,kw=3,stride=1,pad=1,dilation=1",
          "fir_q15": "taps=9,block=37", "fir_f32": "taps=9,block=37"}
SAMPLES = 12
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def folded(source: str) -> str:
    """The C without comments, with every run of whitespace (line breaks too) folded to one
    space: what the compiler sees. Preprocessor lines keep their own line."""
    lines = [line.strip() for line in COMMENT.sub("", source).splitlines() if line.strip()]
    text = "\n".join(lines)
    return re.sub(r"\n(?!#)", " ", re.sub(r"[ \t]+", " ", text)).replace(" \n#", "\n#")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spread(items: list, count: int) -> list:
    """`count` items evenly spread over `items` (all of them if fewer)."""
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def shape_of(kernel) -> dict:
    name = kernel.name
    text = SHAPES.get(name)
    return kernel.parse_shape(text) if text else kernel.parse_shape(kernel.example_shape())


def fingerprint(measure: int) -> dict:
    result = {}
    work = Path(tempfile.mkdtemp(prefix="fingerprint-"))
    for target_name in TARGETS:
        target = get_target(target_name)
        for kernel in KERNELS.values():
            shape = shape_of(kernel)
            space = kernel.space(target, shape)
            every = [space.config_at(i) for i in range(space.cartesian_size)]
            verdicts = [space.violation(config) or "" for config in every]
            params = [[p.name, [str(v) for v in p.values]] for p in space.params]
            entry = {"params": params, "points": len(every), "legal": sum(1 for v in verdicts if not v),
                     "verdicts": digest("\n".join(verdicts))}
            legal = [config for config, verdict in zip(every, verdicts) if not verdict]
            for vector in space.param("vector").values:
                ours = [config for config in legal if config["vector"] == vector]
                sample = spread(ours, SAMPLES)
                renders = {}
                for config in sample:
                    rendered = kernel.render(target, shape, config)
                    renders[config.key()] = [digest(folded(rendered.source)), list(rendered.cflags)]
                measured = {}
                if target_name in EMULATED:
                    io = kernel.make_io(shape, np.random.default_rng(0))
                    evaluate = Evaluator(kernel, target, shape, space, io, work)
                    for config in spread(sample, measure) if measure else []:
                        trial = evaluate(config)
                        measured[config.key()] = [trial.outcome.value, trial.values]
                entry[str(vector)] = {"count": len(ours), "renders": renders, "measured": measured}
            result[f"{kernel.name}@{target_name}"] = entry
            print(f"{kernel.name}@{target_name}: {len(every)} points, {entry['legal']} legal", file=sys.stderr)
    return result


def differences(before: dict, after: dict, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            if key not in after:
                found.append(f"{path}/{key}: missing after")
            elif key not in before:
                found.append(f"{path}/{key}: new after")
            else:
                found += differences(before[key], after[key], f"{path}/{key}")
        return found
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--measure", type=int, default=0, help="configurations measured per path and target")
    parser.add_argument("--compare", type=Path, help="an earlier output to compare with")
    args = parser.parse_args()
    result = fingerprint(args.measure)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.compare:
        found = differences(json.loads(args.compare.read_text()), result)
        for line in found:
            print(line)
        print(f"{len(found)} differences")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
