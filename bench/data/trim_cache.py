"""Trim a Kernel Tuner cache file to what a replay reads: the tuning parameters and the
objective per configuration (Kernel Tuner's caches also carry every repeat's time, compile
and framework times and a timestamp, ~90% of their size). Writes gzipped JSON, same format.

usage: python bench/data/trim_cache.py SOURCE.json[.gz] OUT.json.gz
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def trim(source: Path, out: Path) -> None:
    raw = source.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    keys, objective = data["tune_params_keys"], data.get("objective", "time")
    data["cache"] = {key: {**{k: entry[k] for k in keys}, objective: entry[objective]}
                     for key, entry in data["cache"].items()}
    out.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=9, mtime=0))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    trim(Path(sys.argv[1]), Path(sys.argv[2]))
