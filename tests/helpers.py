"""Helpers shared by the tests (imported as ``from helpers import ...``)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(*parts):
    """A script of the repository (``load_script('examples', 'train_digits.py')``)
    imported as a module, without running its ``__main__`` block."""
    path = os.path.join(ROOT, *parts)
    spec = importlib.util.spec_from_file_location(os.path.splitext(parts[-1])[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_mean_loss(context, **module_kwargs):
    """A Module trained 3 steps (SGD, lr 0.1) on a net whose output is a mean
    squared error (no loss head: the head gradient is fed), float64, batch 8,
    fixed data and initial weights: runs that should agree can be compared."""
    import numpy as np

    import symgraph as sg
    S = sg.sym
    x = S.FullyConnected(S.Variable("data"), num_hidden=1, name="fc")
    net = S.mean(S.square(x - S.Variable("softmax_label")))
    rng = np.random.default_rng(0)
    data = [sg.io.DataBatch([rng.normal(size=(8, 3))], [rng.normal(size=(8, 1))])
            for _ in range(3)]
    mod = sg.mod.Module(net, context=context, **module_kwargs)
    mod.bind([sg.io.DataDesc("data", (8, 3), "float64")],
             [sg.io.DataDesc("softmax_label", (8, 1), "float64")])
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer_params={"learning_rate": 0.1, "rescale_grad": 1.0})
    for b in data:
        mod.train_step(b)
    return mod


def small_mlp():
    """data -> fc1 (5) -> relu1 -> fc2 (3) -> softmax: the MLP the symbol
    tests infer on."""
    import symgraph as sg
    S = sg.sym
    fc1 = S.FullyConnected(S.Variable("data"), num_hidden=5, name="fc1")
    act = S.Activation(fc1, act_type="relu", name="relu1")
    fc2 = S.FullyConnected(act, num_hidden=3, name="fc2")
    return S.SoftmaxOutput(fc2, name="softmax")
