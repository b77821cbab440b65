"""``symgraph bench recompute --target h100``: the budgets' programs compiled
deviceless for a GPU, beside XLA:GPU's own rematerialization at the same
limit (``xla.gpu_remat``): the slop factor's limit, the FLOPs the remat
clones add, and the table that names the target."""
import json

import jax
import jax.numpy as jnp
import pytest

from symgraph import targets, xla
from symgraph.xla import gpu_remat

MIB = 2 ** 20

# a hand-made optimized HLO module: a fusion and a dot, their remat clones,
# a cuDNN convolution; FLOPs by hand below
HLO = """HloModule m, is_scheduled=true

%fused_add (p0: f32[4,8], p1: f32[4,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[4,8]{1,0} parameter(1)
  %m = f32[4,8]{1,0} multiply(%p0, %p1)
  ROOT %add = f32[4,8]{1,0} add(%m, %p1)
}

%fused_add.1 (p0.1: f32[4,8], p1.1: f32[4,8]) -> f32[4,8] {
  %p0.1 = f32[4,8]{1,0} parameter(0)
  %p1.1 = f32[4,8]{1,0} parameter(1)
  %m.1 = f32[4,8]{1,0} multiply(%p0.1, %p1.1)
  ROOT %add.1 = f32[4,8]{1,0} add(%m.1, %p1.1)
}

ENTRY %main (a: f32[4,8], b: f32[8,16], x: f32[2,4,4,5], w: f32[3,3,3,5]) -> (f32[4,16], f32[4,16], f32[2,4,4,3]) {
  %a = f32[4,8]{1,0} parameter(0)
  %b = f32[8,16]{1,0} parameter(1)
  %x = f32[2,4,4,5]{3,2,1,0} parameter(2)
  %w = f32[3,3,3,5]{3,2,1,0} parameter(3)
  %fusion = f32[4,8]{1,0} fusion(%a, %a), kind=kLoop, calls=%fused_add
  %dot = f32[4,16]{1,0} dot(%fusion, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[16,4]{1,0} transpose(%dot), dimensions={1,0}
  %fusion.remat = f32[4,8]{1,0} fusion(%a, %a), kind=kLoop, calls=%fused_add.1
  %dot.remat2 = f32[4,16]{1,0} dot(%fusion.remat, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %conv = (f32[2,4,4,3]{3,2,1,0}, u8[0]{0}) custom-call(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward", backend_config={"x":[1,2]}
  %y = f32[2,4,4,3]{3,2,1,0} get-tuple-element(%conv), index=0
  ROOT %out = (f32[4,16]{1,0}, f32[4,16]{1,0}, f32[2,4,4,3]{3,2,1,0}) tuple(%dot, %dot.remat2, %y)
}
"""


def test_hlo_flops_counts_the_remat_clones():
    fusion = 2 * 4 * 8                # a multiply and an add per element
    dot = 2 * 4 * 16 * 8              # 2 x output x contracted
    conv = 2 * (2 * 4 * 4 * 3) * (3 * 3 * 5)  # 2 x output x kernel window x input features
    got = gpu_remat.hlo_flops(HLO)
    assert got == {"total": 2 * (fusion + dot) + conv, "remat": fusion + dot,
                   "remat_instructions": 2}


@pytest.mark.parametrize("budget", [1, 5 * MIB, 700 * 10 ** 6, 3 * 2 ** 30, 20 * 2 ** 30])
def test_slop_factor_round_trips_to_the_budget(budget):
    """The factor's limit is the budget within one step of the integer
    percent, never above it (0 where even 1% is more)."""
    memory, io = targets.get("h100").memory, 400 * MIB
    s = gpu_remat.slop_factor_for(budget, memory, io)
    step = (gpu_remat.base_limit(memory) - io) / 100
    limit = gpu_remat.limit_for(s, memory, io)
    assert limit <= budget < gpu_remat.limit_for(s + 1, memory, io)
    assert budget - limit < step + 1
    assert gpu_remat.base_limit(memory) == memory * 80 // 100


def test_xla_logs_the_limit_the_formula_gives():
    """Compiled for the H100 with slop factor 1, a program of 3 GiB cannot
    get under XLA's limit; XLA names the limit plus the outputs' bytes,
    which is the formula's, and recomputes one instruction (a .remat clone)."""
    t = targets.get("h100")

    def f(x):
        a = jnp.sin(x) * 2.0
        b = jnp.cos(a * jnp.sum(a))
        return a * jnp.sum(b) + b
    step = xla.Step(f, (jax.ShapeDtypeStruct((256 * 2 ** 20,), jnp.float32),), donate=(0,),
                    target=t)
    plain = gpu_remat.program_figures(step)
    got = gpu_remat.at_budget(step, 2 ** 30, plain)
    assert got["slop_factor"] == 1 and got["limit"] == gpu_remat.limit_for(
        1, t.memory, gpu_remat.io_bytes(plain))
    said = got["cant_reduce"]
    assert said and said["limit_matches"]
    assert said["limit"] == got["limit"] + plain["output"]
    assert not got["holds"] and got["remat_instructions"] >= 1
    assert got["extra_flops_share"] > 0


def test_quick_run_on_the_h100_names_it_and_sets_xla_remat_beside(tmp_path):
    from symgraph.cli import main
    out = tmp_path / "rc"
    assert main(["bench", "recompute", "--quick", "--target", "h100", "--algorithms",
                 "solver", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["target"]["name"] == "h100" and res["target"]["deviceless"]
    assert "--no-time implied" in res["time_note"]
    (row,) = res["rows"]
    assert all(p["step_ratio"] is None for p in row["points"] if p["fits"])
    assert [r["fraction"] for r in row["xla_remat"]] == [1.0, 0.5]
    for r in row["xla_remat"]:
        # budgets of a few MiB: below 1% of the H100, so a limit of 0
        assert r["slop_factor"] == 0 and r["limit"] == 0 <= r["budget"]
        assert r["holds"] == (r["footprint"] <= r["budget"])
    md = (out / "results.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in md and "deviceless" in md
    assert "XLA:GPU's own rematerialization" in md and "| XLA remat |" in md
    assert (out / "frontier.png").stat().st_size > 0
