#!/usr/bin/env bash
# Set up, then the main job: tune an int8 matmul for the Cortex-M55 (QEMU, AN547 board)
# and bake the best variant into a C header + sources under build/export/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build
.venv/bin/edgetune tune matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --budget 40 --jobs 2 --db build/edgetune.db
.venv/bin/edgetune tune matmul_s8 --target cortex-m55 --shape m=64,n=64,k=64 --budget 40 --jobs 2 --db build/edgetune.db
.venv/bin/edgetune export --target cortex-m55 --out build/export --db build/edgetune.db
