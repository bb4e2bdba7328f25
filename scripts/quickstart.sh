#!/usr/bin/env bash
# Set up, then the main job: tune every layer of a TFLite model (DS-CNN keyword spotting,
# MLPerf Tiny) for the Cortex-M55 (QEMU, AN547 board), check each tuned layer against
# TFLite Micro, bake the whole model into one C module under build/export/, and run that
# module in the emulator, bit-exact with TFLite Micro.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build
model=tests/data/models/ds_cnn_kws.tflite
.venv/bin/edgetune model tune "$model" --target cortex-m55 --jobs 2 --db build/edgetune.db  # the default budget: 32 trials per distinct layer
.venv/bin/edgetune model export "$model" --target cortex-m55 --db build/edgetune.db --out build/export
.venv/bin/edgetune model verify build/export --target cortex-m55
