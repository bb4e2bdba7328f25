"""The kernel library, by name. One explicit table: no registration at import time."""
from __future__ import annotations

from .base import Buffer, Kernel, KernelError, KernelIO, RenderedKernel, render_glue
from .conv2d_s8 import Conv2dS8
from .dwconv2d_s8 import DwConv2dS8
from .fir import FirF32, FirQ15
from .matmul_f32 import MatmulF32
from .matmul_s8 import MatmulS8

KERNELS: dict[str, Kernel] = {kernel.name: kernel for kernel in (MatmulS8(), MatmulF32(), Conv2dS8(), DwConv2dS8(),
                                                                 FirQ15(), FirF32())}


def path_cflags() -> frozenset[str]:
    """Every flag a kernel's vector path compiles with (the build's allow-list takes them
    from the path tables, so a new path's flags need no second list)."""
    return frozenset(flag for kernel in KERNELS.values() for path in kernel.paths for flag in path.cflags)


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelError(f"unknown kernel {name!r} (known: {', '.join(sorted(KERNELS))})") from None


__all__ = ["Buffer", "KERNELS", "Kernel", "KernelError", "KernelIO", "RenderedKernel", "get_kernel", "path_cflags", "render_glue"]
