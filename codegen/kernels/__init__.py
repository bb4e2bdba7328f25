"""The kernel library, by name. One explicit table: no registration at import time."""
from __future__ import annotations

from .base import Buffer, Kernel, KernelError, KernelIO, RenderedKernel, render_glue
from .bmm_s8 import BmmS8
from .conv2d_s8 import Conv2dS8
from .dwconv2d_s8 import DwConv2dS8
from .fir import FirF32, FirQ15
from .matmul_f32 import MatmulF32
from .matmul_s8 import MatmulS8
from .tconv2d_s8 import TConv2dS8

KERNELS: dict[str, Kernel] = {kernel.name: kernel for kernel in (MatmulS8(), MatmulF32(), Conv2dS8(), DwConv2dS8(),
                                                                 FirQ15(), FirF32(), TConv2dS8(),
                                                                 BmmS8())}

SHIPPED = frozenset(KERNELS)


def register_kernel(kernel: Kernel) -> Kernel:
    """Add a kernel defined outside edgetune (codegen/kernels/user.py) to the table, by an
    explicit call (the CLI's --kernel-file, installed entry points, the Python API). A
    shipped name cannot be taken; a name may be registered again only by the same definition."""
    if kernel.name in SHIPPED:
        raise KernelError(f"kernel {kernel.name!r}: the name of a shipped kernel; choose another name")
    known = KERNELS.get(kernel.name)
    if known is not None and known.definition != kernel.definition:
        raise KernelError(f"kernel {kernel.name!r} is already defined by another definition in this process")
    KERNELS[kernel.name] = kernel if known is None else known
    return KERNELS[kernel.name]


def unregister_kernel(name: str) -> None:
    """Remove a kernel added by register_kernel (shipped ones stay)."""
    if name not in SHIPPED:
        KERNELS.pop(name, None)


def path_cflags() -> frozenset[str]:
    """Every flag a kernel's vector path compiles with (the build's allow-list takes them
    from the path tables, so a new path's flags need no second list)."""
    return frozenset(flag for kernel in KERNELS.values() for path in kernel.paths for flag in path.cflags)


def get_kernel(name: str) -> Kernel:
    if name not in KERNELS:  # a kernel an installed package declares (e.g. on a cluster's worker)
        from .user_loader import installed_kernels

        for kernel in installed_kernels()[0]:
            if kernel.name == name:
                register_kernel(kernel)
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelError(f"unknown kernel {name!r} (known: {', '.join(sorted(KERNELS))}; a kernel of your own is "
                          "loaded from its folder: --kernel-file DIR)") from None


__all__ = ["Buffer", "KERNELS", "Kernel", "KernelError", "KernelIO", "RenderedKernel", "get_kernel", "path_cflags",
           "register_kernel", "render_glue", "unregister_kernel"]
