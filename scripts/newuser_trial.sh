#!/usr/bin/env bash
# A new user's first hour, on a fresh machine (run it through the fresh-machine tool CI provides):
# the README's set-up and quick start, timed, then its commands one by one (a kernel, a zoo
# model, a kernel of the user's own, a RAM bound) and bad input. Every step is timed and its
# exit status printed; a failing step does not stop the rest. Tunes are kept small (--budget)
# except the quick start's.
set -u
T=/tmp/nu; rm -rf $T; mkdir -p $T
step() { local name=$1; shift; local t0=$(date +%s); echo "=== STEP $name: $*"; "$@"; local rc=$?
         echo "=== END $name rc=$rc wall=$(( $(date +%s) - t0 ))s"; }

# 1. the README's two commands: set-up (timed alone), then the quick start
step setup bash scripts/setup.sh
step quickstart bash scripts/quickstart.sh
ls -la build/export
. .venv/bin/activate

# 1b. the README's first session by hand, verbatim (its code block after "A first session by hand")
awk '/^A first session by hand/ {f = 1} f && /^```$/ {n++; next} f && n == 1' README.md > $T/first_session.sh
cat $T/first_session.sh
step readme_first_session bash -ex $T/first_session.sh
ls build/model-report

# 2. the command table against --help
step help edgetune --help
step help_model edgetune model --help
step targets edgetune targets
step kernels_head bash -c 'set -o pipefail; edgetune kernels | head -20'

# 3. one kernel: tune, best, export, verify
step tune edgetune tune matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --budget 8 --jobs 2 --db $T/k.db
step tune_resume edgetune tune matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --budget 8 --jobs 2 --db $T/k.db
step best edgetune best matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --db $T/k.db
step export edgetune export --target cortex-m55 --db $T/k.db --out $T/kernels
step verify edgetune verify $T/kernels

# 4. zoo models: the fused LSTM and a 16x8 one
for M in tests/data/models/zoo/lstm_fused.tflite tests/data/models/zoo/kws_int16x8.tflite; do
    n=$(basename $M .tflite)
    step show_$n edgetune model show $M --target cortex-m55
    step mtune_$n edgetune model tune $M --target cortex-m55 --budget 4 --jobs 2 --db $T/$n.db
    step mexport_$n edgetune model export $M --target cortex-m55 --db $T/$n.db --out $T/$n
    step mverify_$n edgetune model verify $T/$n --target cortex-m55
done
step maxram edgetune model export tests/data/models/zoo/kws_int16x8.tflite --target cortex-m55 --db $T/kws_int16x8.db --max-ram 30000 --out $T/kws_ram
step maxram_verify edgetune model verify $T/kws_ram --target cortex-m55
step maxram_low edgetune model export tests/data/models/zoo/kws_int16x8.tflite --target cortex-m55 --db $T/kws_int16x8.db --max-ram 1000 --out $T/kws_low
ls $T/lstm_fused
step verify_layers_16x8 edgetune model verify $T/kws_int16x8 --target cortex-m55 --layers
step export_untuned edgetune model export tests/data/models/zoo/squeeze_excite.tflite --target cortex-m55 --out $T/se
step compare edgetune model compare tests/data/models/zoo/kws_int16x8.tflite --db $T/kws_int16x8.db --plain

# 5. kernels of one's own
step own_kernels edgetune kernels --kernel-file examples/kernels/qadd_s8 --target cortex-m55
step own_tune edgetune tune --kernel-file examples/kernels/qadd_s8 --shape n=100 --target cortex-m55 --budget 6 --db $T/own.db
step own_export edgetune export --kernel-file examples/kernels/qadd_s8 --target cortex-m55 --db $T/own.db --out $T/own
step own_verify edgetune verify $T/own --kernel-file examples/kernels/qadd_s8
L=examples/kernels/leaky_relu_s8
step own_model_show edgetune model show $L/leaky_net.tflite --kernel-file $L --target cortex-m55
(cd $T && step own_model_tune edgetune model tune /project/$L/leaky_net.tflite --kernel-file /project/$L --target cortex-m55 --budget 6 --db model.db \
   && step own_model_export edgetune model export /project/$L/leaky_net.tflite --kernel-file /project/$L --target cortex-m55 --db model.db --out leaky_module \
   && step own_model_verify edgetune model verify leaky_module --kernel-file /project/$L --target cortex-m55 --layers)
# a filter of one's own, written from docs/own-kernel.md, with a reference that disagrees with its C
mkdir -p $T/gain
cat > $T/gain/kernel.py <<'PY'
"""A gain stage: y = (x * 0.5 in Q15) >> 15."""
import numpy as np
import edgetune as et


def reference(shape, inputs):
    return ((inputs["x"].astype(np.int32) * 16384) >> SHIFT).astype(np.int16)


KERNEL = et.KernelDef(name="gain_q15", shape=("n",), source="gain_q15.c",
                      args=[et.Input("x", "int16", "n"), et.Output("y", "int16", "n"), et.Scalar("len", "n")],
                      params={"unroll": [1, 2, 4]}, reference=reference, example_shape="n=64",
                      description="Q15 gain stage")
PY
cat > $T/gain/gain_q15.c <<'C'
#include <stdint.h>
void gain_q15(const int16_t *x, int16_t *y, int len)
{
    int i = 0;
    for (; i + unroll <= len; i += unroll)
        for (int u = 0; u < unroll; u++)
            y[i + u] = (int16_t)(((int32_t)x[i + u] * 16384) >> 15);
    for (; i < len; i++)
        y[i] = (int16_t)(((int32_t)x[i] * 16384) >> 15);
}
C
sed -i 's/SHIFT/14/' $T/gain/kernel.py
step own_wrong_reference edgetune tune --kernel-file $T/gain --shape n=64 --target cortex-m55 --budget 3 --db $T/gain.db
sed -i 's/>> 14)/>> 15)/' $T/gain/kernel.py
step own_right_reference edgetune tune --kernel-file $T/gain --shape n=64 --target cortex-m55 --budget 3 --db $T/gain2.db
step own_model_show_nokf edgetune model show $L/leaky_net.tflite --target cortex-m55

# 6. bad input: each should be one line naming the fault, exit 2
step bad_budget edgetune tune matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --budget lots --db $T/k.db
step bad_target edgetune tune matmul_s8 --target cortex-m99 --shape m=16,n=16,k=32 --budget 2 --db $T/k.db
step bad_shape edgetune tune matmul_s8 --target cortex-m55 --shape m=16,n=16 --budget 2 --db $T/k.db
step bad_kernel edgetune tune matmul_s9 --target cortex-m55 --shape m=16,n=16,k=32 --budget 2 --db $T/k.db
step missing_model edgetune model show no/such.tflite --target cortex-m55
step missing_model_tune edgetune model tune no/such.tflite --target cortex-m55 --budget 2 --db $T/x.db
step not_a_model edgetune model show README.md --target cortex-m55
step unsupported edgetune model show tests/data/models/zoo/op_tile.tflite --target cortex-m55
step unsupported_tune edgetune model tune tests/data/models/zoo/op_tile.tflite --target cortex-m55 --budget 2 --db $T/x.db
step bad_maxram edgetune model export tests/data/models/zoo/lstm_fused.tflite --target cortex-m55 --db $T/lstm_fused.db --max-ram 1k --out $T/x
step missing_export edgetune verify $T/no_such_dir
step missing_model_verify edgetune model verify $T/no_such_dir --target cortex-m55
step not_a_db edgetune best matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --db README.md
cat > $T/evil.toml <<'TOML'
extends = "cortex-m55"
name = "evil"
[runner]
program = "bash"
TOML
step evil_runner edgetune targets show $T/evil.toml
cat > $T/evil2.toml <<'TOML'
extends = "cortex-m55"
name = "evil2"
[[compilers]]
name = "gcc"
command = "/tmp/nu/arm-none-eabi-gcc"
TOML
step evil_compiler edgetune tune matmul_s8 --target $T/evil2.toml --shape m=16,n=16,k=32 --budget 2 --db $T/e.db
step db_left_alone edgetune best matmul_s8 --target cortex-m55 --shape m=16,n=16,k=32 --db $T/k.db
echo ALLDONE
