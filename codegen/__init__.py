"""edgetune.codegen: kernel templates, their spaces and references, and header baking."""
from .kernels import KERNELS, Kernel, KernelError, KernelIO, RenderedKernel, get_kernel, render_glue
from .render import CodegenError, render

__all__ = ["CodegenError", "KERNELS", "Kernel", "KernelError", "KernelIO", "RenderedKernel", "get_kernel", "render", "render_glue"]
