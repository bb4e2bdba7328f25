"""Add compiled-code features to recorded spaces written before `edgetune record` stored them.

Each successful entry's configuration is compiled once with today's kernel (through the
build cache) and the features of its object (edgetune.targets.code_features) are written
into the entry; the file is rewritten in place. A parameter the kernel has gained since the
recording (matmul_s8's `layout`, added in its version 2) takes its first value, which is
what the recorded version compiled (the templates rendered byte-identical C for it).

usage: .venv/bin/python bench/code_features.py SPACE_FILE ...
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from edgetune.replay import code_features_of
from edgetune.codegen import get_kernel
from edgetune.targets import get_target
from edgetune.tuner.recorded import write_recorded


def add_features(path: Path) -> tuple[int, int]:
    """(entries given features, successful entries) after rewriting `path`."""
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    kernel, target = get_kernel(data["kernel"]), get_target(data["target"])
    shape = dict(data["shape"])
    space = kernel.space(target, shape)
    ok = [entry for entry in data["entries"] if entry.get("outcome", "ok") == "ok"]
    configs = {}
    for n, entry in enumerate(ok):
        values = {p.name: entry["config"].get(p.name, p.values[0]) for p in space.params}
        configs[n] = space.config_at(space.index_of(values))
    found = code_features_of(kernel, target, shape, list(configs.values()))
    for n, entry in enumerate(ok):
        if configs[n].key() in found:
            entry["features"] = found[configs[n].key()]
    data.setdefault("provenance", {})["features"] = "added by bench/code_features.py (compiled with today's kernel)"
    write_recorded(path, data)
    return sum("features" in entry for entry in ok), len(ok)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for name in argv:
        given, total = add_features(Path(name))
        print(f"{name}: features for {given} of {total} successful entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
