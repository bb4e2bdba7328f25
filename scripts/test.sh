#!/usr/bin/env bash
# Set up, then run the whole test suite (QEMU and cross-compiler tests included), every tier:
# `-m ""` lifts the default selection (`not slow`, pyproject.toml), on every core (-n auto,
# pyproject.toml). Arguments go to pytest after these, so `-m smoke` or a file narrows the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -m "" "$@"
