"""``symgraph bench recompute``'s reading of its own figures: over or under
the budget, whether the footprint rises as the budget falls, and the race
that times two programs in turn."""
from symgraph.bench import recompute as rc


def point(alg, fraction, footprint, budget=100, fits=True):
    return {"algorithm": alg, "fraction": fraction, "budget": budget, "fits": fits,
            "xla_footprint": footprint}


def test_vs_budget_says_under_or_by_how_much_over():
    assert rc._vs_budget(point("solver", 0.5, 100)) == "under"
    assert rc._vs_budget(point("solver", 0.5, 112)) == "+12.0% over"
    assert rc._vs_budget(point("solver", 0.5, None)) == "-"


def test_monotone_finds_a_footprint_that_rises_as_the_budget_falls():
    falls = {"points": [point("solver", 1.0, 90 * 2**20), point("solver", 0.5, 60 * 2**20),
                        point("solver", 0.25, 40 * 2**20)]}
    assert rc._monotone(falls).endswith("solver: never rises.")
    rises = {"points": [point("sqrt", 0.25, 70 * 2**20), point("sqrt", 1.0, 90 * 2**20),
                        point("sqrt", 0.5, 60 * 2**20),
                        point("sqrt", 0.35, 0, fits=False)]}
    assert "sqrt: rises 1 time(s), by up to 10 MiB" in rc._monotone(rises)


def test_race_keeps_each_runners_best_round():
    class Fake:
        def __init__(self, times):
            self.times = list(times)

        def run(self, steps):
            return self.times.pop(0) * steps
    a, b = Fake([3.0, 1.0, 2.0]), Fake([5.0, 6.0, 4.0])
    assert rc.race([a, b], rounds=3, steps=2) == [1.0, 4.0]


def test_quick_run_gives_each_budget_the_program_a_module_runs(tmp_path):
    """Each point is the program ``Module(memory_budget=, recompute=ALG)``
    runs: under its budget where any program is, without recompute where
    that program fits (the planner alone would recompute at 0.5)."""
    import json
    from symgraph.cli import main
    out = tmp_path / "rc"
    assert main(["bench", "recompute", "--quick", "--no-time", "--no-checkpoint",
                 "--algorithms", "sqrt,solver", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    (row,) = res["rows"]
    plain = row["no_recompute"]["xla_footprint"]
    points = [p for p in row["points"] if p["fits"]]
    assert {p["fraction"] for p in points} == {1.0, 0.5}
    for p in points:
        assert p["xla_footprint"] <= p["budget"] or p["how"].startswith("over")
        if p["how"].startswith("no recompute"):
            assert p["recomputed"] == 0 and p["xla_footprint"] == plain
            assert p["first"]["recomputed"] > 0  # the algorithm's own plan recomputes
    assert any(p["how"].startswith("no recompute") for p in points)
    assert "| how |" in (out / "results.md").read_text()
