#!/usr/bin/env bash
# Set up everything edgetune needs on Debian 12, idempotently:
#   - system packages: Arm cross compilers (GCC + newlib, Clang/LLD), QEMU, a host C compiler
#   - edgetune itself in .venv (editable), with its test dependencies and the optional extras the
#     test suite exercises: the Ethos-U compiler Vela (`npu`), TFLite Micro (`model`: reading .tflite
#     files and the oracle) and Dask's distributed (`cluster`)
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    gcc-arm-none-eabi libnewlib-arm-none-eabi binutils-arm-none-eabi   # Cortex-M GCC 12 + newlib multilibs
    clang lld llvm                                                     # Clang 14, the second compiler knob
    qemu-system-arm                                                    # mps3-an547, mps2-an386/an500, virt (aarch64)
    gcc-aarch64-linux-gnu                                              # Cortex-A53/A72 bare-metal builds (freestanding)
    qemu-user libc6-dev-arm64-cross                                    # NEON kernels under ASan/UBSan (AArch64 Linux, tests)
    gcc libc6-dev                                                      # host builds and the QEMU plugin
    cmake make                                                         # tests build exports as user firmware does
    git                                                                # tests list the repository's files
    python3-dev                                                        # cmsisdsp (test extra) compiles CMSIS-DSP for the host
)
if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    packages+=(python3 python3-venv python3-pip)
fi

missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}" >&2
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# setuptools notes on every editable install of a package-dir layout like ours that folders
# named like the package (`edgetune`) could shadow it; there is none, so that notice alone
# is silenced (pip 25+ prints every build-backend warning).
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e '.[test,npu,model,cluster]'
echo "setup: ready ($(.venv/bin/edgetune --version))" >&2
