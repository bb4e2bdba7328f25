"""The operators added for users' models (issue 28) inside whole models: each small model is
built with the model writer, exported as one C module and verified whole, layer by layer,
bit for bit against TFLite Micro on the host and on the M55 in QEMU."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.codegen.model.builder import build_model, constant
from edgetune.codegen.model.graph import Operator
from edgetune.model_export import export_model
from edgetune.model_verify import verify_model
from edgetune.targets import get_target
from op_checks import activation_tensor


def _op(index, name, inputs, outputs, options_type="", **options):
    return Operator(index, name, tuple(inputs), tuple(outputs), options_type, tuple(options.items()))


def conv1d_like(path: Path) -> Path:
    """A Keras Conv1D's wrapping: EXPAND_DIMS to 4-D, an element-wise operator, SQUEEZE back."""
    tensors = [activation_tensor(0, (1, 10, 8), 0.05, 3), constant(1, "axis", np.array([1], dtype=np.int32)),
               activation_tensor(2, (1, 1, 10, 8), 0.05, 3), activation_tensor(3, (1, 1, 10, 8), 0.04, -2),
               activation_tensor(4, (1, 10, 8), 0.04, -2)]
    ops = [_op(0, "EXPAND_DIMS", (0, 1), (2,)), _op(1, "LEAKY_RELU", (2,), (3,), "LeakyReluOptions", alpha=0.3),
           _op(2, "SQUEEZE", (3,), (4,), "SqueezeOptions", squeezeDims=(1,))]
    path.write_bytes(build_model(tensors, ops, [0], [4]))
    return path


def squeeze_excite(path: Path) -> Path:
    """A squeeze-excite gate: HARD_SWISH, a LOGISTIC gate per channel, MUL broadcast over the
    map, SUB and TANH after it."""
    tensors = [activation_tensor(0, (1, 6, 6, 8), 0.05, 3), activation_tensor(1, (1, 1, 1, 8), 0.04, -20),
               activation_tensor(2, (1, 6, 6, 8), 0.04, -10), activation_tensor(3, (1, 1, 1, 8), 1 / 256, -128),
               activation_tensor(4, (1, 6, 6, 8), 0.02, -2), activation_tensor(5, (1, 6, 6, 8), 0.03, 4),
               activation_tensor(6, (1, 6, 6, 8), 1 / 128, 0)]
    ops = [_op(0, "HARD_SWISH", (0,), (2,)), _op(1, "LOGISTIC", (1,), (3,)),
           _op(2, "MUL", (2, 3), (4,), "MulOptions"), _op(3, "SUB", (4, 0), (5,), "SubOptions", fusedActivationFunction=1),
           _op(4, "TANH", (5,), (6,))]
    path.write_bytes(build_model(tensors, ops, [0, 1], [6]))
    return path


def upsample_and_permute(path: Path) -> Path:
    """A decoder's nearest-neighbour upsampling, a TRANSPOSE to channels-first and a GATHER of
    some rows, with a TANH between them."""
    tensors = [activation_tensor(0, (1, 3, 4, 6), 0.05, 3), constant(1, "size", np.array([6, 8], dtype=np.int32)),
               activation_tensor(2, (1, 6, 8, 6), 0.05, 3), activation_tensor(3, (1, 6, 8, 6), 1 / 128, 0),
               constant(4, "perm", np.array([0, 3, 1, 2], dtype=np.int32)), activation_tensor(5, (1, 6, 6, 8), 1 / 128, 0),
               constant(6, "rows", np.array([5, 0, 2], dtype=np.int32)), activation_tensor(7, (1, 6, 3, 8), 1 / 128, 0)]
    ops = [_op(0, "RESIZE_NEAREST_NEIGHBOR", (0, 1), (2,), "ResizeNearestNeighborOptions", halfPixelCenters=True),
           _op(1, "TANH", (2,), (3,)), _op(2, "TRANSPOSE", (3, 4), (5,), "TransposeOptions"),
           _op(3, "GATHER", (5, 6), (7,), "GatherOptions", axis=2)]
    path.write_bytes(build_model(tensors, ops, [0], [7]))
    return path


def layer_norm(path: Path) -> Path:
    """A LayerNorm as the converter writes it (without gamma and beta): the mean over the
    channels, the squared difference, its mean, RSQRT, and the difference times it."""
    tensors = [activation_tensor(0, (1, 4, 16), 0.05, 3), constant(1, "axis", np.array([2], dtype=np.int32)),
               activation_tensor(2, (1, 4, 1), 0.05, 3), activation_tensor(3, (1, 4, 16), 0.02, -128),
               activation_tensor(4, (1, 4, 1), 0.02, -128), activation_tensor(5, (1, 4, 1), 0.03, -128),
               activation_tensor(6, (1, 4, 16), 0.06, 0), activation_tensor(7, (1, 4, 16), 0.1, 0)]
    ops = [_op(0, "MEAN", (0, 1), (2,), "ReducerOptions", keepDims=True),
           _op(1, "SQUARED_DIFFERENCE", (0, 2), (3,), "SquaredDifferenceOptions"),
           _op(2, "MEAN", (3, 1), (4,), "ReducerOptions", keepDims=True),
           _op(3, "RSQRT", (4,), (5,)), _op(4, "SUB", (0, 2), (6,), "SubOptions"),
           _op(5, "MUL", (6, 5), (7,), "MulOptions")]
    path.write_bytes(build_model(tensors, ops, [0], [7]))
    return path


MODELS = {"conv1d_like": conv1d_like, "layer_norm": layer_norm, "squeeze_excite": squeeze_excite, "upsample_and_permute": upsample_and_permute}


@pytest.mark.parametrize("target_name", ["host", "cortex-m55"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_exports_and_verifies_bit_exact(tmp_path, name, target_name, request):
    if target_name != "host":
        request.getfixturevalue("m55")  # the emulator and the Arm compilers
    target = get_target(target_name)
    model = MODELS[name](tmp_path / f"{name}.tflite")
    export_model(model, target, None, tmp_path / "m")
    outcome = verify_model(tmp_path / "m", target, 3, layers=True)
    assert outcome.ok, [i.problem for i in outcome.inferences]
