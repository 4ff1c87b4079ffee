"""Operation counts of matmul- and convolution-like operators, from their tensor shapes.

A roofline compute model needs num_ops (and tensor_size) per compute node. Shapes allow an
exact count for the operators below (2 operations per multiply-accumulate); any other
operator gets no estimate (-1) rather than a guess. Only the innermost counted operator
keeps its count in the converted trace (aten::linear wraps aten::addmm), so totals are not
doubled; see chakra_core.convert.pytorch.
"""

from __future__ import annotations

from math import prod

NO_ESTIMATE = -1
MAX_OPS = 2**63 - 1  # num_ops is an int64 column


class OperationCountError(ValueError):
    """Shapes whose operation count no int64 holds: a corrupt trace, not a real operator."""


def _shapes(io: dict) -> list:
    shapes = io.get("shapes") if io else None
    return shapes if isinstance(shapes, list) else []


def _dims(shape) -> list[int] | None:
    if isinstance(shape, list) and shape and all(type(d) is int for d in shape):
        return shape
    return None


def _matmul_2d(a, b) -> int:
    if a and b and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2 * a[0] * a[1] * b[1]
    return NO_ESTIMATE


def _batched(a, b) -> int:
    if a and b and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return 2 * a[0] * a[1] * a[2] * b[2]
    return NO_ESTIMATE


def _conv(inputs: list, outputs: list, backward: bool) -> int:
    # forward: (input [N, C, *spatial], weight [O, C/groups, *kernel]) -> output [N, O, *out_spatial]
    # backward: (grad_output, input, weight) -> grad_input, grad_weight: twice the forward count
    if backward:
        grad_out, weight = (_dims(inputs[0]) if inputs else None), (_dims(inputs[2]) if len(inputs) > 2 else None)
        out = grad_out
    else:
        weight = _dims(inputs[1]) if len(inputs) > 1 else None
        out = _dims(outputs[0]) if outputs else None
    if not weight or not out or len(weight) < 3 or len(out) != len(weight):
        return NO_ESTIMATE
    forward = 2 * out[0] * prod(out[1:]) * prod(weight[1:])
    return 2 * forward if backward else forward


COST_OPS = frozenset("aten::" + op for op in (
    "mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "convolution_backward", "mkldnn_convolution",
    "cudnn_convolution", "_slow_conv2d_forward", "mkldnn_linear", "miopen_convolution", "_mkldnn_convolution"))


def compute_cost(name: str, inputs: dict, outputs: dict) -> int:
    """num_ops of one operator, or NO_ESTIMATE; OperationCountError beyond an int64."""
    ops = _operation_count(name, inputs, outputs)
    if ops > MAX_OPS:
        raise OperationCountError(f"{name}: its shapes make {ops:.3g} operations, beyond 2**63 (a corrupt shape)")
    return ops


def _operation_count(name: str, inputs: dict, outputs: dict) -> int:
    if name in COST_OPS:
        op = name[6:]
        shapes = _shapes(inputs)
        dims = [_dims(s) for s in shapes]
        if op == "mm":
            return _matmul_2d(dims[0], dims[1]) if len(dims) >= 2 else NO_ESTIMATE
        if op == "addmm":  # (bias, mat1, mat2)
            return _matmul_2d(dims[1], dims[2]) if len(dims) >= 3 else NO_ESTIMATE
        if op == "bmm":
            return _batched(dims[0], dims[1]) if len(dims) >= 2 else NO_ESTIMATE
        if op == "baddbmm":
            return _batched(dims[1], dims[2]) if len(dims) >= 3 else NO_ESTIMATE
        if op == "mkldnn_linear":  # (input [..., K], weight [N, K])
            if len(dims) >= 2 and dims[0] and dims[1] and len(dims[1]) == 2 and dims[0][-1] == dims[1][1]:
                return 2 * prod(dims[0]) * dims[1][0]
            return NO_ESTIMATE
        return _conv(shapes, _shapes(outputs), backward=op == "convolution_backward")
    return NO_ESTIMATE
