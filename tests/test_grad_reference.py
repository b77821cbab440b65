"""Gradients of Convolution, Deconvolution, FullyConnected, Pooling and
BatchNorm against NumPy references written from the math
(tests/op_reference_nn.py, GRAD_REFERENCE_NN), not against JAX applied to
the lowering their backward is built from. The references themselves are
checked against central finite differences of the NumPy forward
references, so a wrong reference cannot agree with a wrong backward."""
import numpy as np
import pytest

from grad_check import CASE_IDS, CASES, symgraph_gradients
from op_reference import REFERENCE
from op_reference_nn import GRAD_REFERENCE_NN, batchnorm_train


@pytest.mark.parametrize("opname,attrs,shape", CASES, ids=CASE_IDS)
def test_gradient_matches_numpy_reference(opname, attrs, shape):
    p, inputs, heads, grads = symgraph_gradients(opname, attrs, shape)
    want = GRAD_REFERENCE_NN[opname](p, inputs, heads)
    assert len(grads) == len(want)
    for k, (got, w) in enumerate(zip(grads, want)):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12 * scale,
                                   err_msg=f"{opname} {attrs}: gradient of input {k}")


@pytest.mark.parametrize("attrs", [{"fix_gamma": False}, {"fix_gamma": True}])
def test_batchnorm_inference_gradient_uses_the_moving_stats(attrs):
    # outside training the backward divides by the moving std, not the batch's
    p, inputs, heads, grads = symgraph_gradients("BatchNorm", attrs, (3, 2, 4), is_train=False)
    want = GRAD_REFERENCE_NN["BatchNorm"](p, inputs, heads, train=False)
    x, gamma, _, _, mv = inputs
    g = 1.0 if p.fix_gamma else gamma
    np.testing.assert_allclose(want[0], heads[0] * (g / np.sqrt(mv + p.eps))[None, :, None])
    for got, w in zip(grads, want):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)


def _forward(opname, p, inputs, train):
    """The NumPy forward reference's first output."""
    if opname == "BatchNorm" and train and not p.use_global_stats:
        return batchnorm_train(p, *inputs)[0]
    y = REFERENCE[opname](p, *inputs)
    return y[0] if isinstance(y, tuple) else y


@pytest.mark.parametrize("opname,attrs,shape", CASES, ids=CASE_IDS)
def test_numpy_gradient_reference_matches_finite_differences(opname, attrs, shape):
    # the directional derivative along a random v of sum(dy * f): central
    # differences, exact for the linear ops up to rounding
    p, inputs, heads, _ = symgraph_gradients(opname, attrs, shape)
    grads = GRAD_REFERENCE_NN[opname](p, inputs, heads)
    rng = np.random.default_rng(5)
    h = 1e-6
    for k, gk in enumerate(grads):
        if gk is None:
            continue
        v = rng.normal(size=inputs[k].shape)
        shifted = []
        for sign in (1, -1):
            xs = list(inputs)
            xs[k] = inputs[k] + sign * h * v
            shifted.append(np.sum(heads[0] * _forward(opname, p, xs, True)))
        fd = (shifted[0] - shifted[1]) / (2 * h)
        assert np.sum(gk * v) == pytest.approx(fd, rel=1e-6, abs=1e-7), (
            f"{opname} {attrs}: reference gradient of input {k} disagrees with "
            f"finite differences")
