#!/usr/bin/env bash
# A new user's first hour (issue 31), run after scripts/setup.sh on a fresh machine:
# every step is timed and its exit status printed; a failing step does not stop the rest.
set -u
. .venv/bin/activate
T=/tmp/nu; rm -rf $T; mkdir -p $T
step() { local name=$1; shift; local t0=$(date +%s); echo "=== STEP $name: $*"; "$@"; local rc=$?
         echo "=== END $name rc=$rc wall=$(( $(date +%s) - t0 ))s"; }

# 1. own kernel: docs/own-kernel.md's tune_kernel example, verbatim
cat > $T/tk.py <<'PY'
import numpy as np
import edgetune

source = """
void vector_add(float *c, const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i += block_size)
        for (int j = 0; j < block_size && i + j < n; j++)
            c[i + j] = a[i + j] + b[i + j];
}
"""
size = 1000
a = np.random.randn(size).astype(np.float32)
b = np.random.randn(size).astype(np.float32)
c = np.zeros_like(a)
args = [c, a, b, np.int32(size)]
tune_params = {"block_size": [1, 2, 4, 8, 16]}
results, env = edgetune.tune_kernel("vector_add", source, size, args, tune_params,
                                    answer=[a + b, None, None, None], target="host", budget=5)
print(env["best_config"], len(results))
PY
step tune_kernel python $T/tk.py
step kernels edgetune kernels --kernel-file examples/kernels/vector_add --target host
step kernels_head bash -c 'set -o pipefail; edgetune kernels | head -1'
step tune_m55 edgetune tune --kernel-file examples/kernels/vector_add --shape size=256 --target cortex-m55 --budget 4
step export edgetune export --kernel-file examples/kernels/vector_add --target cortex-m55 --out $T/out
step verify edgetune verify $T/out --kernel-file examples/kernels/vector_add
step best_untuned edgetune best --kernel-file examples/kernels/vector_add --shape size=512 --target cortex-m55

# 2. own board: an M7 board file as docs/targets.md writes it
cat > $T/my-m7-board.toml <<'TOML'
extends = "cortex-m7"          # a shipped target, by name, wherever edgetune is installed
name = "my-m7-board"
description = "My Cortex-M7 board at 216 MHz"

[core]
clock_hz = 216_000_000
TOML
step board_show edgetune targets show $T/my-m7-board.toml
step board_tune edgetune tune --kernel-file examples/kernels/vector_add --shape size=256 --target $T/my-m7-board.toml --budget 4 --db $T/board.db
hint=$(edgetune best --kernel-file examples/kernels/vector_add --shape size=512 --target $T/my-m7-board.toml --db $T/board.db | sed 's/.*tune it first: //')
step hint_verbatim bash -c "$hint --budget 2"
cat > $T/bad-m7.toml <<'TOML'
extends = "cortex-m7"
name = "bad-m7"
[[memory]]
name = "flash"
kind = "flash"
base = 0x0000_0000
size = 0x10_0000
access = "rx"
[[memory]]
name = "sram"
kind = "sram"
base = 0x2400_0000
size = 0x8_0000
access = "rw"
[firmware]
code_region = "flash"
data_region = "sram"
io_regions = ["sram"]
TOML
step board_bad edgetune tune --kernel-file examples/kernels/vector_add --shape size=256 --target $T/bad-m7.toml --budget 4 --db $T/bad.db

# 3. Ctrl-C then resume
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    edgetune tune matmul_s8 --target cortex-m55 --shape m=8,n=8,k=16 --budget 40 --seed 3 --db $T/cc.db > $T/cc1.log 2>&1 &
ccpid=$!; sleep 4; kill -INT $ccpid 2>/dev/null; wait $ccpid; echo "ctrl-c run rc=$?"; tail -5 $T/cc1.log
step resume edgetune tune matmul_s8 --target cortex-m55 --shape m=8,n=8,k=16 --budget 40 --seed 3 --db $T/cc.db
step uninterrupted edgetune tune matmul_s8 --target cortex-m55 --shape m=8,n=8,k=16 --budget 40 --seed 3 --db $T/cc2.db
step best_cc edgetune best matmul_s8 --target cortex-m55 --shape m=8,n=8,k=16 --db $T/cc.db
step best_cc2 edgetune best matmul_s8 --target cortex-m55 --shape m=8,n=8,k=16 --db $T/cc2.db

# 4. a model: tune, report, compare, export into the user's own firmware, verify with vectors
M=tests/data/models/fc_autoencoder_ad.tflite
step model_tune edgetune model tune $M --target cortex-m55 --budget 10 --db $T/model.db
step model_tune_again edgetune model tune $M --target cortex-m55 --budget 10 --db $T/model.db
step report edgetune report --db $T/model.db --out $T/report --model $M
step compare edgetune model compare $M --db $T/model.db --plain --plot $T/compare.png
step model_export edgetune model export $M --target cortex-m55 --db $T/model.db --out $T/mod
step model_verify edgetune model verify $T/mod --save-vectors $T/vec
ls $T/mod $T/vec $T/report | head -60; cat $T/cc1.log
# the user's firmware: tests/data/user_firmware_m55's start-up and linker script, a main of its own
FW=$T/fw; mkdir -p $FW; cp tests/data/user_firmware_m55/{startup.c,link.ld,Makefile,CMakeLists.txt,toolchain.cmake} $FW/
cat > $FW/main.c <<'C'
#include <stdint.h>
#include <stddef.h>
#include "fc_autoencoder_ad.h"
#include "edgetune_vectors.h"
static int8_t out[FC_AUTOENCODER_AD_OUTPUT_ELEMENTS];
int main(void)
{
    fc_autoencoder_ad_invoke(et_case0_input0, out);
    for (int i = 0; i < ET_CASE0_EXPECTED0_COUNT; i++)
        if (out[i] != et_case0_expected0[i]) return 5;
    return 0;
}
C
cp $T/vec/edgetune_vectors.h $FW/
step fw_make make -C $FW EXPORT=$T/mod
step fw_run_make qemu-system-arm -M mps3-an547 -nographic -monitor none -serial none -semihosting-config enable=on,target=native -kernel $FW/firmware.elf
cat $FW/CMakeLists.txt
step fw_cmake bash -c "cmake -S $FW -B $FW/build -DCMAKE_TOOLCHAIN_FILE=$FW/toolchain.cmake -DEDGETUNE_EXPORT=$T/mod -DEXPORT=$T/mod && cmake --build $FW/build"
echo ALLDONE
