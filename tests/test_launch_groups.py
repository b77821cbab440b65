"""``symgraph launch``: each worker's whole process group ends with the run
(what a worker leaves running in the background is stopped too, whether
the worker exited 0 or not), and -n / --devices-per-process are bounded."""
import io
import os
import sys
import time

import pytest

from symgraph.cli import main
from symgraph.errors import SymgraphError
from symgraph.parallel import launch

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc") or sys.platform == "win32",
                                reason="process groups and /proc (Linux)")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _spawner(tmp_path, code: int, rank_only=None) -> list:
    """A worker that starts a sleeping background child (its pid written to
    a file per rank), prints a line and exits with ``code`` (only rank
    ``rank_only`` when given; the others keep sleeping themselves)."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "rank = os.environ['SYMGRAPH_PROCESS_ID']\n"
        "child = subprocess.Popen(['sleep', '120'], stdout=sys.stdout)\n"
        f"open(os.path.join({str(tmp_path)!r}, 'child' + rank), 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        f"if {rank_only!r} is not None and rank != str({rank_only!r}):\n"
        "    time.sleep(120)\n"
        f"sys.exit({code})\n")
    return [sys.executable, str(script)]


def _children(tmp_path, n: int) -> list:
    return [int((tmp_path / f"child{r}").read_text()) for r in range(n)]


def test_background_children_end_with_a_run_that_succeeds(tmp_path):
    out, err = io.BytesIO(), io.BytesIO()
    t0 = time.monotonic()
    code, failure = launch.launch(_spawner(tmp_path, 0), 2, out=out, err=err, grace=5)
    assert (code, failure) == (0, None), err.getvalue()
    assert sorted(out.getvalue().decode().splitlines()) == ["[rank 0] started",
                                                            "[rank 1] started"]
    kids = _children(tmp_path, 2)
    assert not any(_running(p) for p in kids), kids
    # the children hold the workers' stdout: without ending them the
    # forwarding threads would wait for the sleep (120 s)
    assert time.monotonic() - t0 < 60


def test_background_children_end_when_a_rank_fails(tmp_path):
    out, err = io.BytesIO(), io.BytesIO()
    code, failure = launch.launch(_spawner(tmp_path, 3, rank_only=1), 2, out=out, err=err,
                                  grace=5)
    assert code == 1 and failure.startswith("rank 1 exited with code 3"), failure
    kids = _children(tmp_path, 2)
    assert not any(_running(p) for p in kids), kids


def _one_line(capsys, *argv) -> str:
    assert main(["launch", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symgraph: error: launch: "), lines
    return lines[0]


def test_process_counts_are_bounded(capsys):
    most = launch.MAX_PROCESSES
    line = _one_line(capsys, "-n", "99999999999999999999", "--", "true")
    assert f"-n is at most {most}" in line and "99999999999999999999" in line
    assert f"-n is at most {most}" in _one_line(capsys, "-n", str(most + 1), "--", "true")
    line = _one_line(capsys, "-n", "2", "--devices-per-process", "10" * 12, "--", "true")
    assert f"--devices-per-process is at most {launch.MAX_DEVICES_PER_PROCESS}" in line
    assert "-n must be at least 1, got -3" in _one_line(capsys, "-n", "-3", "--", "true")
    # the function checks too: nothing is started
    for num, dev in ((most + 1, 1), (1, 0), (True, 1), (2.0, 1)):
        with pytest.raises(SymgraphError, match="launch: (-n|--devices-per-process)"):
            launch.launch(["true"], num, dev)
