"""`symgraph bench cifar` (symgraph/bench/cifar.py): a tiny run end to end
and its report's fields (no timing asserted), and the hand-written
plain-JAX recipe (symgraph/bench/handwritten_cifar.py) computing the same
net as symgraph's resnet9-dawn: the forward at init and one NAG step with
weight decay, on the same weights, in float64."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.bench import handwritten_cifar as hc
from symgraph.cli import main
from symgraph.models import resnet9

WIDTHS = (4, 8, 8, 16)


def test_quick_run_reports_speed_data_path_and_memory(tmp_path):
    out = tmp_path / "cifar"
    assert main(["bench", "cifar", "--quick", "--batch", "8", "--images", "16", "--widths",
                 ",".join(map(str, WIDTHS)), "--memory-batch", "8", "--probe", "1",
                 "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    s = res["speed"]
    assert s["batches_per_epoch"] == 2 and s["images_per_epoch"] == 16
    for side in ("symgraph", "plain"):
        assert len(s["epoch_s"][side]) == 1 and s[f"{side}_images_per_s"] > 0
        assert s[f"{side}_data_ms"] > 0 and s[f"{side}_step_ms"] > 0
        assert s[f"{side}_data_share"] == pytest.approx(s[f"{side}_data_ms"] /
                                                        s[f"{side}_step_ms"])
        assert s[f"{side}_hlo"]["convolution"] >= 8  # eight convolutions forward
    assert s["ratio"] == pytest.approx(s["symgraph_images_per_s"] / s["plain_images_per_s"])
    m = res["memory"]
    assert m["batch"] == 8 and 0 < m["plan_arena"] <= m["plan_total"]
    for target in ("xla_cpu", "xla_h100"):
        assert m[target]["temp"] > 0 and m[target]["argument"] > 0
    assert m["plain_xla_cpu_temp"] > 0
    assert m["max_batch"]["batch"] > 8 and m["max_batch"]["plan_total"] <= m["max_batch"]["budget"]
    assert res["config"]["widths"] == list(WIDTHS) and res["load_average_1min"]["start"] is not None
    md = (out / "results.md").read_text()
    assert "symgraph bench cifar --quick" in md and "data path / step" in md
    assert "Largest batch in 16 GiB" in md


def test_bad_options_are_one_line_usage_errors(capsys):
    assert main(["bench", "cifar", "--widths", "1,2,3"]) == 2
    assert main(["bench", "cifar", "--batch", "64", "--images", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("bench cifar" in line for line in err)


# --------------------------------------------------------------------------
# the same net and the same step, float64
# --------------------------------------------------------------------------
def _module(batch, rng):
    sym = resnet9.get_symbol(10, widths=WIDTHS)
    mod = sg.mod.Module(sym, context=sg.cpu())
    mod.bind([sg.io.DataDesc("data", (batch, 3, 32, 32), "float64")],
             [sg.io.DataDesc("softmax_label", (batch,), "float64")])
    mod.init_params(sg.init.Xavier(), seed=0)
    arg, aux = mod.get_params()
    # gamma and beta away from 1 and 0, moving statistics not the defaults
    arg = {k: (rng.uniform(0.5, 1.5, v.shape) if k.endswith("gamma") else
               rng.normal(size=v.shape) * 0.1 if k.endswith("beta") else v.asnumpy())
           for k, v in arg.items()}
    aux = {k: (rng.uniform(0.5, 2, v.shape) if k.endswith("var") else
               rng.normal(size=v.shape) * 0.1) for k, v in aux.items()}
    mod.set_params({k: sg.nd.array(v, dtype="float64") for k, v in arg.items()},
                   {k: sg.nd.array(v, dtype="float64") for k, v in aux.items()})
    return mod, arg, aux


def test_handwritten_forward_at_init_equals_symgraphs():
    rng = np.random.default_rng(0)
    batch = 4
    mod, arg, aux = _module(batch, rng)
    x = rng.normal(size=(batch, 3, 32, 32))
    y = rng.integers(0, 10, batch).astype(np.float64)
    params, state = hc.from_mxnet(arg, aux)
    assert set(params) == set(arg) and set(state) == set(aux)
    xh = jnp.asarray(x.transpose(0, 2, 3, 1))
    for train in (False, True):  # inference first: the training forward moves the stats
        mod.forward(sg.io.DataBatch([sg.nd.array(x, dtype="float64")],
                                    [sg.nd.array(y, dtype="float64")]), is_train=train)
        want = mod.get_outputs()[0].asnumpy()
        logits, new_state = hc.forward(params, state, xh, train, jnp.float64)
        np.testing.assert_allclose(np.asarray(jax.nn.softmax(logits)), want, rtol=1e-10,
                                   atol=1e-13)
    # the moving statistics the training forward leaves
    _, sym_aux = mod.get_params()
    _, new_state = hc.forward(params, state, xh, True, jnp.float64)
    for k, v in sym_aux.items():
        np.testing.assert_allclose(np.asarray(new_state[k]), v.asnumpy(), rtol=1e-10,
                                   atol=1e-13, err_msg=k)


def test_handwritten_nag_step_equals_symgraphs():
    # label smoothing 0.2, NAG with momentum and weight decay (on weights and
    # gammas only), rescale 1/batch: two steps, so the momentum counts
    rng = np.random.default_rng(1)
    batch, lr, wd = 4, 0.1, 5e-4
    mod, arg, aux = _module(batch, rng)
    mod.init_optimizer(optimizer="nag", optimizer_params={"learning_rate": lr,
                                                          "momentum": 0.9, "wd": wd})
    params, state = hc.from_mxnet(arg, aux)
    mom = jax.tree.map(jnp.zeros_like, params)
    step = hc.make_step(batch, "float64", wd=wd, momentum=0.9)
    for _ in range(2):
        x = rng.normal(size=(batch, 3, 32, 32))
        y = rng.integers(0, 10, batch).astype(np.float64)
        mod.train_step(sg.io.DataBatch([sg.nd.array(x, dtype="float64")],
                                       [sg.nd.array(y, dtype="float64")]))
        params, mom, state, _ = step(params, mom, state, jnp.asarray(x.transpose(0, 2, 3, 1)),
                                     jnp.asarray(y), jnp.float64(lr))
    got_arg, got_aux = mod.get_params()
    for k, v in got_arg.items():
        want = v.asnumpy()
        have = np.asarray(params[k])
        if k.endswith("_conv_weight"):
            have = have.transpose(3, 2, 0, 1)
        assert not np.allclose(want, arg[k])  # it moved
        np.testing.assert_allclose(have, want, rtol=1e-9, atol=1e-12, err_msg=k)
    for k, v in got_aux.items():
        np.testing.assert_allclose(np.asarray(state[k]), v.asnumpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=k)


def test_handwritten_augment_crops_flips_and_cuts_out_inside():
    images = np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    out = np.asarray(hc.make_augment("float32")(jax.random.key(3), jnp.asarray(images)))
    assert out.shape == (16, 32, 32, 3) and out.dtype == np.float32
    # exactly one 8x8 hole per image (all channels zero); random pixels are never zero
    # after normalisation, so the zeros are the hole
    zeros = np.all(out == 0, axis=-1)
    assert (zeros.sum(axis=(1, 2)) == 64).all()
    norm = np.asarray(hc.normalize(jnp.asarray(images)))
    # every kept pixel comes from the image (padding reflects, so it is one of its values)
    for i in range(4):
        assert np.isin(out[i][~zeros[i]][:, 0], norm[i][..., 0]).all()
