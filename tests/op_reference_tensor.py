"""References for shape ops, broadcasting, reductions and softmax.

Plain NumPy, written from MXNet's documented semantics and apart from the
lowerings in symgraph/ops, so a wrong lowering cannot agree with itself.
``mx_reshape_shape`` is also the oracle of the Reshape property tests.
"""
import numpy as np

REFERENCE_TENSOR = {}


def registrar(table: dict):
    """A decorator ``@reg('OpA', 'OpB')`` that files a reference under each
    op name in ``table`` (every reference module keeps its own table)."""
    def reg(*names):
        def deco(fn):
            for n in names:
                table[n] = fn
            return fn
        return deco
    return reg


ref = registrar(REFERENCE_TENSOR)


# --------------------------------------------------------------------------
# broadcasting (NumPy's own rules are MXNet's for these ops)
# --------------------------------------------------------------------------
ref("broadcast_add")(lambda p, a, b: a + b)
ref("broadcast_sub")(lambda p, a, b: a - b)
ref("broadcast_mul")(lambda p, a, b: a * b)
ref("broadcast_div")(lambda p, a, b: a / b)
ref("broadcast_maximum")(lambda p, a, b: np.maximum(a, b))
ref("broadcast_minimum")(lambda p, a, b: np.minimum(a, b))
ref("broadcast_power")(lambda p, a, b: np.power(a, b))


def unbroadcast(x, shape):
    """x summed down to ``shape`` (the adjoint of np.broadcast_to)."""
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    for i, d in enumerate(shape):
        if d == 1 and x.shape[i] != 1:
            x = x.sum(axis=i, keepdims=True)
    return x


ref("_sum_to_like")(lambda p, x, like: unbroadcast(x, like.shape))


# --------------------------------------------------------------------------
# matrix products (MXNet's dot and batch_dot), from the math: dot contracts
# the last axis of lhs (its first if transpose_a) with the first axis of rhs
# (its last if transpose_b), the other axes in order make the output;
# batch_dot multiplies the matrices of the last two axes, batch by batch
# --------------------------------------------------------------------------
@ref("dot")
def dot(p, a, b):
    ta, tb = p.get("transpose_a", False), p.get("transpose_b", False)
    if a.ndim == 1 and b.ndim == 1:
        assert not ta and not tb, "MXNet refuses to transpose vectors"
        return np.einsum("k,k->", a, b).reshape(1)  # MXNet has no 0-d arrays: (1,)
    return np.tensordot(a, b, axes=([0] if ta else [a.ndim - 1], [b.ndim - 1] if tb else [0]))


@ref("batch_dot")
def batch_dot(p, a, b):
    if p.get("transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if p.get("transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    return np.einsum("...mk,...kn->...mn", a, b)


@ref("_linalg_gemm2")
def linalg_gemm2(p, a, b):
    """MXNet's linalg.gemm2: alpha * op(A) op(B), matrices on the last two axes."""
    return p.get("alpha", 1.0) * batch_dot(p, a, b)


# --------------------------------------------------------------------------
# Reshape: MXNet's special codes, read left to right over a queue of input dims
# --------------------------------------------------------------------------
def mx_reshape_shape(codes, in_shape, reverse=False):
    """MXNet's Reshape output shape. 0 copies the next input dim, -1 is the
    one inferred dim (it also consumes an input dim), -2 copies all remaining
    input dims, -3 multiplies the next two, -4 a b splits the next input dim
    into a x b (one of them may be -1). reverse=True runs the same rules on
    both lists reversed and reverses the result. Raises ValueError."""
    codes = list(codes)
    dims = list(in_shape)
    if reverse:
        codes, dims = codes[::-1], dims[::-1]
    queue = list(dims)
    result, infer_at = [], []
    pos = 0
    while pos < len(codes):
        code = codes[pos]
        if code > 0:
            result.append(code)
            queue = queue[1:]
        elif code == 0:
            if not queue:
                raise ValueError("0 with no input dim left")
            result.append(queue.pop(0))
        elif code == -1:
            infer_at.append(len(result))
            result.append(None)
            queue = queue[1:]
        elif code == -2:
            result.extend(queue)
            queue = []
        elif code == -3:
            if len(queue) < 2:
                raise ValueError("-3 needs two input dims")
            result.append(queue.pop(0) * queue.pop(0))
        elif code == -4:
            if reverse or not queue or pos + 2 >= len(codes):
                raise ValueError("bad -4")
            whole = queue.pop(0)
            a, b = codes[pos + 1], codes[pos + 2]
            if a == 0 or b == 0 or min(a, b) < -1 or a == b == -1:
                raise ValueError("-4 splits into two positive dims (one may be -1)")
            if a == -1:
                a = whole // b
            if b == -1:
                b = whole // a
            if a * b != whole:
                raise ValueError("-4 split does not multiply")
            result += [a, b]
            pos += 2
        else:
            raise ValueError("unknown code")
        pos += 1
    if len(infer_at) > 1:
        raise ValueError("two -1")
    total = int(np.prod(in_shape))
    if infer_at:
        known = int(np.prod([d for d in result if d is not None]))
        if known == 0 or total % known:
            raise ValueError("cannot infer")
        result[infer_at[0]] = total // known
    if int(np.prod(result)) != total:
        raise ValueError("size differs")
    return tuple(result[::-1] if reverse else result)


def _legacy_target_shape(p, shape):
    out = list(p.target_shape)
    if p.keep_highest:
        out[0] = shape[0]
    start = 1 if p.keep_highest else 0
    holes = [i for i in range(start, len(out)) if out[i] == 0]
    if holes:
        rest = int(np.prod([d for i, d in enumerate(out) if i != holes[0]]))
        out[holes[0]] = int(np.prod(shape)) // rest
    return tuple(out)


@ref("Reshape")
def _reshape(p, x):
    if p.shape:
        return x.reshape(mx_reshape_shape(p.shape, x.shape, p.reverse))
    return x.reshape(_legacy_target_shape(p, x.shape))


@ref("reshape_like")
def _reshape_like(p, a, b):
    lb = 0 if p.lhs_begin is None else p.lhs_begin % a.ndim
    le = a.ndim if p.lhs_end is None else (p.lhs_end % a.ndim if p.lhs_end < 0 else p.lhs_end)
    rb = 0 if p.rhs_begin is None else p.rhs_begin % b.ndim
    re = b.ndim if p.rhs_end is None else (p.rhs_end % b.ndim if p.rhs_end < 0 else p.rhs_end)
    return a.reshape(a.shape[:lb] + b.shape[rb:re] + a.shape[le:])


ref("Flatten")(lambda p, x: x.reshape(x.shape[0], int(np.prod(x.shape[1:]))))
ref("transpose")(lambda p, x: np.transpose(x, p.axes or None))
ref("expand_dims")(lambda p, x: np.expand_dims(x, p.axis))
ref("Concat")(lambda p, *xs: np.concatenate(xs, axis=p.dim))


@ref("SliceChannel")
def _slice_channel(p, x):
    parts = np.split(x, p.num_outputs, axis=p.axis)
    if p.squeeze_axis:
        parts = [np.squeeze(y, axis=p.axis) for y in parts]
    return tuple(parts)


@ref("slice_axis")
def _slice_axis(p, x):
    index = [slice(None)] * x.ndim
    index[p.axis] = slice(p.begin, p.end)
    return x[tuple(index)]


ref("Cast")(lambda p, x: x.astype(p.dtype))


# --------------------------------------------------------------------------
# reductions: MXNet gives (1,) for a reduction to a scalar without keepdims
# --------------------------------------------------------------------------
def _reduce(fn):
    def reference(p, x):
        if p.axis is None or p.axis == ():
            axes = tuple(range(x.ndim))
        else:
            axes = tuple(a % x.ndim for a in p.axis)
            if p.exclude:
                axes = tuple(i for i in range(x.ndim) if i not in axes)
        y = fn(x, axis=axes, keepdims=p.keepdims)
        return np.asarray(y).reshape(1) if np.ndim(y) == 0 else y
    return reference


ref("sum")(_reduce(np.sum))
ref("mean")(_reduce(np.mean))
ref("max")(_reduce(np.max))
ref("min")(_reduce(np.min))
ref("prod")(_reduce(np.prod))


def _softmax(x, axis, t):
    z = x / (1.0 if t is None else t)
    z = z - z.max(axis=axis, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=axis, keepdims=True)


def _softmax_ref(log):
    def reference(p, x, length=None):
        if length is not None:  # use_length: MXNet's masked rows
            from op_reference_math import masked_softmax
            return masked_softmax(p, x, length, log)
        y = _softmax(x.astype(p.get("dtype") or x.dtype), p.axis, p.temperature)
        return np.log(y) if log else y
    return reference


ref("softmax")(_softmax_ref(False))
ref("log_softmax")(_softmax_ref(True))
