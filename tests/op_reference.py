"""Plain NumPy/JAX references for every registered op, written apart from
the lowerings so a wrong lowering cannot agree with itself.

REFERENCE[name](p, *inputs) -> output or tuple of outputs (visible ones).
LOSS_GRAD[name](p, output, *inputs) -> gradient of the data input, for the
loss heads whose backward is not the vjp of their forward.
"""
import numpy as np

from op_reference_tensor import registrar  # noqa: E402

R = {}
ref = registrar(R)


REFERENCE = R

ref("exp")(lambda p, x: np.exp(x))
ref("log")(lambda p, x: np.log(x))
ref("sqrt")(lambda p, x: np.sqrt(x))
ref("square")(lambda p, x: x ** 2)
ref("abs")(lambda p, x: np.abs(x))
ref("relu")(lambda p, x: np.where(x > 0, x, 0))
ref("sigmoid")(lambda p, x: 1 / (1 + np.exp(-x)))
ref("tanh")(lambda p, x: np.tanh(x))
ref("negative")(lambda p, x: -x)
ref("clip")(lambda p, x: np.minimum(np.maximum(x, p.a_min), p.a_max))
_ACT = {"relu": lambda x: np.where(x > 0, x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh, "softrelu": lambda x: np.log1p(np.exp(x)),
        "softsign": lambda x: x / (1 + np.abs(x))}
ref("Activation")(lambda p, x: _ACT[p.act_type](x))
ref("elemwise_add")(lambda p, a, b: a + b)
ref("elemwise_sub")(lambda p, a, b: a - b)
ref("elemwise_mul")(lambda p, a, b: a * b)
ref("elemwise_div")(lambda p, a, b: a / b)
ref("ElementWiseSum")(lambda p, *xs: np.sum(xs, axis=0))
ref("_plus_scalar")(lambda p, x: x + p.scalar)
ref("_minus_scalar")(lambda p, x: x - p.scalar)
ref("_rminus_scalar")(lambda p, x: p.scalar - x)
ref("_mul_scalar")(lambda p, x: x * p.scalar)
ref("_div_scalar")(lambda p, x: x / p.scalar)
ref("_rdiv_scalar")(lambda p, x: p.scalar / x)
ref("_power_scalar")(lambda p, x: x ** p.scalar)
ref("_maximum_scalar")(lambda p, x: np.maximum(x, p.scalar))
ref("_minimum_scalar")(lambda p, x: np.minimum(x, p.scalar))
ref("identity")(lambda p, x: x)
ref("BlockGrad")(lambda p, x: x)
ref("_CrossDeviceCopy")(lambda p, x: x)
ref("zeros_like")(lambda p, x: np.zeros_like(x))


@ref("FullyConnected")
def _fc(p, x, w, b=None):
    if p.flatten:
        x = x.reshape(x.shape[0], -1)
    y = x @ w.T
    return y if b is None else y + b


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_output_matrix(p, shape):
    """MXNet's (rows, classes) view of the data without multi_output."""
    if p.preserve_shape:
        return int(np.prod(shape[:-1])), shape[-1]
    return shape[0], int(np.prod(shape[1:]))


@ref("SoftmaxOutput")
def _softmax_output(p, x, label):
    if p.multi_output:
        return _softmax(x, 1)
    return _softmax(x.reshape(_softmax_output_matrix(p, x.shape)), -1).reshape(x.shape)


ref("LinearRegressionOutput")(lambda p, x, label: x)

LOSS_GRAD = {}


# SoftmaxOutput's gradient reference is MXNet's kernel, in op_reference_loss.py
LOSS_GRAD["LinearRegressionOutput"] = lambda p, y, x, label: (
    (y - label.reshape(y.shape)) * p.grad_scale / (y.size // y.shape[0]))

# references of the other op families live beside this file
from op_reference_nn import LOSS_GRAD_NN, REFERENCE_NN  # noqa: E402
from op_reference_tensor import REFERENCE_TENSOR  # noqa: E402

REFERENCE.update(REFERENCE_NN)
REFERENCE.update(REFERENCE_TENSOR)
from op_reference_glue import REFERENCE_GLUE  # noqa: E402
REFERENCE.update(REFERENCE_GLUE)
from op_reference_normalize import REFERENCE_NORMALIZE  # noqa: E402
REFERENCE.update(REFERENCE_NORMALIZE)
LOSS_GRAD.update(LOSS_GRAD_NN)
from op_reference_loss import LOSS_GRAD_LOSS, REFERENCE_LOSS  # noqa: E402
REFERENCE.update(REFERENCE_LOSS)
LOSS_GRAD.update(LOSS_GRAD_LOSS)
from op_reference_math import REFERENCE_MATH  # noqa: E402
REFERENCE.update(REFERENCE_MATH)
from op_reference_onnx import REFERENCE_ONNX  # noqa: E402
REFERENCE.update(REFERENCE_ONNX)
from op_reference_rnn import REFERENCE_RNN  # noqa: E402
REFERENCE.update(REFERENCE_RNN)
from op_reference_detection import REFERENCE_DETECTION  # noqa: E402
REFERENCE.update(REFERENCE_DETECTION)
