#!/usr/bin/env bash
# Set up, then run the whole test suite (QEMU and cross-compiler tests included), on every core
# (-n auto, pyproject.toml).
#
# Without arguments: the default tier (`not slow`, pyproject.toml), then the slow tier, each
# timed, so every run (CI's too) shows the default tier's wall time against its goal of 10
# minutes (docs/testing.md), and its slowest tests. The status is non-zero when either tier fails; the slow tier runs
# even when the default one failed, so one run shows every failure.
# With arguments: one run over both tiers (`-m ""` lifts the default selection), the arguments
# after it, so `-m smoke` or a file narrows the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pytest=(.venv/bin/python -m pytest)
if (($#)); then
    exec "${pytest[@]}" -m "" "$@"
fi

timed_tier() {  # NAME, then pytest's arguments; says the tier's wall time and exit status
    local name=$1 start status=0
    shift
    start=$(date +%s)
    "${pytest[@]}" "$@" || status=$?
    local seconds=$(($(date +%s) - start))
    printf 'test.sh: %s tier: %d min %02d s, exit %d\n' "$name" $((seconds / 60)) $((seconds % 60)) "$status"
    return "$status"
}

status=0
# --durations: each tier names its slowest tests, what to move to the slow tier or speed up next
timed_tier default --durations=40 || status=1
timed_tier slow -m slow --durations=15 || status=1
exit "$status"
