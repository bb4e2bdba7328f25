"""Kernel Tuner's vector add, ported unchanged: vector_add.c takes its tunable parameters
as #defines, as Kernel Tuner's C kernels do."""
import edgetune as et


def reference(shape, inputs):
    return inputs["a"] + inputs["b"]


KERNEL = et.KernelDef(
    name="vector_add",
    shape=("size",),
    source="vector_add.c",
    args=[et.Output("c", "float32", "size"), et.Input("a", "float32", "size"), et.Input("b", "float32", "size"),
          et.Scalar("n", "size")],
    params={"block_size": [1, 2, 4, 8], "unroll": [1, 2, 4]},
    restrictions=["block_size * unroll <= 16"],
    reference=reference,
    tolerance=0,
    example_shape="size=256",
    description="float32 vector add, Kernel Tuner's C convention",
)
