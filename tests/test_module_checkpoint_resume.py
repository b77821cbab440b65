"""Resuming from a checkpoint: docs/training.md's snippet run as written
trains to the accuracy it shows and resumes from the saved parameters, and
``fit`` on a loaded Module uses them without logging that ``init_params``
was ignored."""
import logging
import re
import os

import numpy as np
import pytest

import symgraph as sg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = sg.sym


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def symgraph_log():
    handler = _Records()
    logger = logging.getLogger("symgraph")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _doc_blocks():
    with open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_doc_snippet_resumes_and_reaches_the_accuracy_it_shows(tmp_path, monkeypatch,
                                                                   capsys, symgraph_log):
    pytest.importorskip("sklearn")
    blocks = _doc_blocks()
    setup = blocks[0][:blocks[0].index("mod = sg.mod.Module")]  # the page's data and net
    snippet = next(b for b in blocks if "Module.load('run'" in b)
    shown = [float(v) for v in re.findall(r"# \[\('accuracy', ([0-9.]+?)\.\.\.\)\]", snippet)]
    assert len(shown) == 2, "the snippet shows the accuracy before and after resuming"
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(setup, "training.md (first example)", "exec"), scope)
    capsys.readouterr()
    exec(compile(snippet, "training.md (checkpoints)", "exec"), scope)
    printed = [float(v) for v in re.findall(r"\('accuracy', ([0-9.]+)\)",
                                            capsys.readouterr().out)]
    assert len(printed) == 2
    # "0.91..." means at least 0.91 and below 0.92
    for got, want in zip(printed, shown):
        assert want <= got < want + 0.01, (printed, shown)
    assert printed[1] > printed[0]  # training went on from the checkpoint
    assert not [m for m in symgraph_log if "ignored" in m], symgraph_log
    resumed, whole = scope["mod"].get_params()[0], scope["whole"].get_params()[0]
    for k in whole:
        np.testing.assert_array_equal(resumed[k].asnumpy(), whole[k].asnumpy(), err_msg=k)


def _net():
    x = S.FullyConnected(S.Variable("data"), num_hidden=8, name="fc1")
    x = S.Activation(x, act_type="relu", name="relu1")
    return S.SoftmaxOutput(S.FullyConnected(x, num_hidden=3, name="fc2"), name="softmax")


def _data():
    rng = np.random.default_rng(0)
    return sg.io.NDArrayIter(rng.normal(size=(24, 5)).astype(np.float32),
                             rng.integers(0, 3, 24).astype(np.float32), batch_size=8)


def _saved(tmp_path):
    mod = sg.mod.Module(_net())
    mod.fit(_data(), num_epoch=1, initializer=sg.init.Xavier(), seed=0,
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    prefix = str(tmp_path / "ck")
    mod.save_checkpoint(prefix, 1, save_optimizer_states=True)
    return prefix, {k: v.asnumpy() for k, v in mod.get_params()[0].items()}


def test_fit_on_a_loaded_module_starts_from_its_parameters_silently(tmp_path, symgraph_log):
    prefix, saved = _saved(tmp_path)
    mod = sg.mod.Module.load(prefix, 1, load_optimizer_states=True)
    # no epoch to run: what fit leaves is what it started from
    mod.fit(_data(), begin_epoch=1, num_epoch=1, initializer=sg.init.Uniform(5.0),
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    got = {k: v.asnumpy() for k, v in mod.get_params()[0].items()}
    assert sorted(got) == sorted(saved)
    for k in saved:
        np.testing.assert_array_equal(got[k], saved[k], err_msg=k)
    assert not [m for m in symgraph_log if "ignored" in m], symgraph_log
    assert mod.optimizer.num_update == 3  # the saved update count, loaded


def test_fit_with_arg_params_on_a_loaded_module_still_says_it_ignores_them(tmp_path,
                                                                          symgraph_log):
    """As MXNet: given parameters without force_init are not used, and said so."""
    prefix, saved = _saved(tmp_path)
    mod = sg.mod.Module.load(prefix, 1)
    other = {k: np.zeros_like(v) for k, v in saved.items()}
    mod.fit(_data(), begin_epoch=1, num_epoch=1, arg_params=other)
    assert [m for m in symgraph_log if "init_params call ignored" in m]
    np.testing.assert_array_equal(mod.get_params()[0]["fc1_weight"].asnumpy(),
                                  saved["fc1_weight"])
    # force_init: the given values replace the loaded ones
    mod.fit(_data(), begin_epoch=1, num_epoch=1, arg_params=other, force_init=True,
            allow_missing=True)
    assert not mod.get_params()[0]["fc1_weight"].asnumpy().any()
