"""The oracle of a whole model: TFLite Micro's interpreter on the model, or, when the model
has CUSTOM operators (served by kernels of the user's own, which TFLite Micro cannot run),
TFLite Micro on the runs of builtin operators between them and each custom operator's
kernel reference in between.

Each run of builtin operators is a sub-model built from the model's own tensors (as
app/model/oracle.py builds one-operator models; nothing edgetune derives goes in): its
inputs are the tensors it reads that an earlier part computed (or the model's input), its
outputs the tensors it computes that a later part reads (or the model's output). Shape
operands computed by folded SHAPE/STRIDED_SLICE/PACK chains become constants holding their
value, as `edgetune model verify` builds its one-operator models.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from edgetune.model import Model, ModelError
from edgetune.model.builder import build_model, constant
from edgetune.model.graph import Operator
from edgetune.model.oracle import oracle_output, reference_output, run_tflm
from edgetune.model.user_layers import REFERENCE
from edgetune.model.ops import constant_value


def has_reference_layers(model: Model) -> bool:
    return any(layer.oracle == REFERENCE for layer in model.layers)


def segments(model: Model) -> list[tuple[str, list[Operator]]]:
    """The operators in order, as ("tflm", a run of builtin ones) and ("reference", [one custom])."""
    parts: list[tuple[str, list[Operator]]] = []
    absorbed = dict(model.graph.absorbed)
    for layer in (layer for layer in model.layers if layer.index not in absorbed):
        kind = REFERENCE if layer.oracle == REFERENCE else "tflm"
        if kind == "tflm" and parts and parts[-1][0] == "tflm":
            parts[-1][1].append(layer.operator)
        else:
            parts.append((kind, [layer.operator]))
    return parts


def sub_model(model: Model, ops: Sequence[Operator], later_reads: set[int]) -> tuple[bytes, list[int], list[int]]:
    """The operators `ops` alone in a model with their real tensors: its bytes, and the
    original indices of its inputs and outputs, in order."""
    graph = model.graph
    produced = {i for op in ops for i in op.outputs}
    order = list(dict.fromkeys(i for op in ops for i in (*op.inputs, *op.outputs) if i >= 0))
    renumber = {old: new for new, old in enumerate(order)}
    tensors = []
    for new, old in enumerate(order):
        t = graph.tensors[old]
        folded = None if t.constant or old in produced else constant_value(graph, old)
        if folded is not None:
            t = constant(new, t.name, np.asarray(folded).astype(t.dtype).reshape(t.shape))
        tensors.append(replace(t, index=new, signature=None))
    inputs = [i for i in order if i not in produced and not tensors[renumber[i]].constant  # nor an LSTM's state
              and not tensors[renumber[i]].variable]
    outputs = [i for i in order if i in produced and (i in later_reads or i in graph.outputs)]
    single = [Operator(n, op.op, tuple(renumber.get(i, -1) for i in op.inputs), tuple(renumber[i] for i in op.outputs),
                       op.options_type, op.options) for n, op in enumerate(ops)]
    data = build_model(tensors, single, [renumber[i] for i in inputs], [renumber[i] for i in outputs],
                       description=f"edgetune oracle: operators {ops[0].index}-{ops[-1].index}")
    return data, inputs, outputs


def model_output(model: Model, data: bytes, x: np.ndarray) -> np.ndarray:
    """The model's (first) output for input `x`, by TFLite Micro (and kernel references for CUSTOM operators)."""
    return model_outputs(model, data, [x])[0]


def model_outputs(model: Model, data: bytes, xs: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs, in its order, for its inputs `xs` (in its order), by TFLite Micro
    (and kernel references for CUSTOM operators)."""
    graph = model.graph
    if not has_reference_layers(model):
        return [np.asarray(out) for out in run_tflm(data, list(xs), n_outputs=len(graph.outputs))]
    values = {t: np.asarray(x).reshape(graph.tensors[t].shape) for t, x in zip(graph.inputs, xs)}
    parts = segments(model)
    for n, (kind, ops) in enumerate(parts):
        if kind == REFERENCE:
            layer = model.layers[ops[0].index]
            values[ops[0].outputs[0]] = oracle_output(layer, values[layer.input_tensor]).reshape(
                graph.tensors[ops[0].outputs[0]].shape)
            continue
        later = {i for _, rest in parts[n + 1:] for op in rest for i in op.inputs}
        sub, inputs, outputs = sub_model(model, ops, later)
        try:
            got = run_tflm(sub, [values[i] for i in inputs], n_outputs=len(outputs))
        except RuntimeError as exc:  # the interpreter's own refusal, e.g. an operator it has no kernel for
            raise ModelError(f"{model.path}: TFLite Micro cannot run operators {ops[0].index} to {ops[-1].index} as a "
                             f"sub-model between the CUSTOM operators, so the model has no oracle: "
                             f"{str(exc).strip()[:300]}") from None
        values.update({i: np.asarray(v).reshape(graph.tensors[i].shape) for i, v in zip(outputs, got)})
    return [values[t] for t in graph.outputs]


def module_reference(model: Model, xs: list[np.ndarray]) -> list[np.ndarray]:
    """What edgetune's module computes for the inputs `xs` (in the model's order), by the numpy
    references of its steps (app/model/module.py's schedule): each tuned layer's kernel
    reference, each library operator's (ops/), folded values as export folds them. No C is
    built: a quick check of edgetune's arithmetic on a whole model against TFLite Micro's
    outputs (the C's own checks against these references are per operator)."""
    from edgetune.model.module import schedule
    from edgetune.model.operators import operator_params

    graph = model.graph
    values = {t: np.asarray(x).reshape(graph.tensors[t].shape) for t, x in zip(graph.inputs, xs)}

    def value(t: int) -> np.ndarray:
        if t not in values:
            known = constant_value(graph, t)
            if known is None:
                raise ModelError(f"{model.path}: tensor {t} is read before any step writes it")
            values[t] = known
        return values[t]

    for step in schedule(model, "reference"):
        layer = model.layers[step.index]
        if step.kernel is not None:
            got = (_kernel_reference(layer, [value(t) for t in step.inputs]),)
        else:
            got = operator_params(graph, layer.operator).reference(*[value(t) for t in step.inputs])
            got = tuple(got) if isinstance(got, tuple) else (got,)  # SPLIT, UNPACK: one array per output
        for t, array in zip(step.outputs, got):
            values[t] = np.asarray(array).reshape(graph.tensors[t].shape)
    return [value(t) for t in graph.outputs]


def _kernel_reference(layer, xs: list[np.ndarray]) -> np.ndarray:
    """A tuned layer's kernel reference on its buffers, its run-time inputs `xs` (the first,
    then the ones of `extra_inputs`, e.g. BATCH_MATMUL's right operand, in place of their
    stand-ins), in the shape of the kernel's output buffer."""
    if not layer.extra_inputs:
        return reference_output(layer, xs[0])
    from edgetune.codegen.kernels import get_kernel

    io = layer.io(np.asarray(xs[0], dtype=np.int8))
    real = {name: np.asarray(x) for (name, _), x in zip(layer.extra_inputs, xs[1:])}
    io = replace(io, buffers=tuple(replace(b, data=real[b.name].astype(b.data.dtype).reshape(b.data.shape))
                                   if b.name in real else b for b in io.buffers))
    outputs = get_kernel(layer.kernel).reference(layer.shape_dict, io)
    return outputs[[b.name for b in io.outputs()].index(layer.output_name)].reshape(layer.kernel_output)
