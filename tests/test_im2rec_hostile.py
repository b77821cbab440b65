"""`symgraph im2rec` on hostile folders, lists and arguments: every failure
is one line (exit 2), and a failed or killed pack never leaves part of a
pack under the final .rec/.idx names."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from helpers import ROOT
from symgraph import recordio as rio
from symgraph.cli import main as cli


def _folder(root, n=6, size=(12, 10), corrupt=()):
    """``root/a/img000.png ...``: n small random images, the indexes in
    ``corrupt`` replaced by bytes no decoder reads."""
    rng = np.random.default_rng(0)
    os.makedirs(root / "a", exist_ok=True)
    for i in range(n):
        path = root / "a" / f"img{i:03d}.png"
        if i in corrupt:
            path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 3)
        else:
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(path)
    return root


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err
    assert err.startswith("symgraph: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


def _leftovers(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".tmp"))


# -- atomic packs -------------------------------------------------------------------

def test_failed_pack_keeps_the_previous_pair(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=8)
    prefix = str(tmp_path / "t")
    assert cli(["im2rec", "--list", "--recursive", "--no-shuffle", prefix, str(root)]) == 0
    assert cli(["im2rec", "--quiet", prefix, str(root)]) == 0
    before = {ext: (tmp_path / f"t{ext}").read_bytes() for ext in (".rec", ".idx")}
    capsys.readouterr()
    (root / "a" / "img005.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")  # after 5 good ones
    assert cli(["im2rec", prefix, str(root)]) == 2  # no --quiet: no bar off a terminal either
    err = _one_error_line(capsys, "img005.png", "cannot decode")
    assert "BytesIO" not in err and err.count("cannot decode") == 1
    for ext, data in before.items():
        assert (tmp_path / f"t{ext}").read_bytes() == data, ext
    assert _leftovers(tmp_path) == []
    # the old pair still reads whole
    r = rio.MXIndexedRecordIO(tmp_path / "t.idx", tmp_path / "t.rec", "r")
    assert len(r.keys) == 8 and all(rio.unpack_img(r.read_idx(k))[1].shape == (12, 10, 3)
                                    for k in r.keys)


def test_failed_first_pack_leaves_nothing(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=5, corrupt=(3,))
    prefix = str(tmp_path / "t")
    cli(["im2rec", "--list", "--recursive", "--no-shuffle", prefix, str(root)])
    assert cli(["im2rec", "--num-thread", "2", prefix, str(root)]) == 2
    _one_error_line(capsys, "img003.png")
    assert sorted(os.listdir(tmp_path)) == ["img", "t.lst"]


def test_success_prints_nothing_on_a_non_terminal_stderr(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=3)
    prefix = str(tmp_path / "t")
    cli(["im2rec", "--list", "--recursive", prefix, str(root)])
    capsys.readouterr()
    assert cli(["im2rec", prefix, str(root)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "3 images" in out


def test_sigkill_mid_pack_leaves_previous_content_or_nothing(tmp_path):
    """A pack killed while it writes: the final names hold what they held
    before (here: nothing, then a previous pair), never part of the pack."""
    root = _folder(tmp_path / "img", n=300, size=(48, 48))
    prefix = str(tmp_path / "t")
    assert cli(["im2rec", "--list", "--recursive", prefix, str(root)]) == 0
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "symgraph.cli", "im2rec", "--encoding", ".png", "--quality",
           "9", prefix, str(root)]
    for previous in (None, (b"old rec bytes", b"0\t0\n")):
        if previous:
            (tmp_path / "t.rec").write_bytes(previous[0])
            (tmp_path / "t.idx").write_bytes(previous[1])
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            caught = None
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                tmp = [f for f in _leftovers(tmp_path) if f.startswith(".t.rec.")]
                # records are being written: the pack is under way
                if tmp and os.path.getsize(tmp_path / tmp[0]) > 0:
                    os.kill(proc.pid, signal.SIGKILL)
                    caught = tmp[0]
                    break
                time.sleep(0.002)
        finally:
            proc.kill()
            proc.wait()
        assert caught, "the pack ended before it could be killed mid-way"
        assert proc.returncode == -signal.SIGKILL
        if previous:
            assert (tmp_path / "t.rec").read_bytes() == previous[0]
            assert (tmp_path / "t.idx").read_bytes() == previous[1]
        else:
            assert not (tmp_path / "t.rec").exists() and not (tmp_path / "t.idx").exists()
        for f in _leftovers(tmp_path):  # a kill cannot clean up; the next run ignores them
            os.unlink(tmp_path / f)
    # a whole run afterwards replaces the pair
    assert cli(["im2rec", "--quiet", prefix, str(root)]) == 0
    assert len(rio.MXIndexedRecordIO(tmp_path / "t.idx", tmp_path / "t.rec", "r").keys) == 300


# -- lists ----------------------------------------------------------------------------

def test_names_a_list_cannot_hold_are_left_out_and_counted(tmp_path, capsys):
    root = tmp_path / "img"
    os.makedirs(root / "a")
    png = _folder(tmp_path / "src", n=1)
    data = (png / "a" / "img000.png").read_bytes()
    good = ["ok.png", " inner space.png"]
    # in ROOT itself a leading space would start the list's path field
    bad = [b"a/new\nline.png", b"a/tab\tname.png", b"a/cr\rname.png", b"a/latin\xe9.png",
           b" lead.png"]
    for name in good:
        (root / "a" / name).write_bytes(data)
    for name in bad:
        with open(os.path.join(bytes(root), name), "wb") as f:
            f.write(data)
    prefix = str(tmp_path / "o")
    assert cli(["im2rec", "--list", "--recursive", "--no-shuffle", prefix, str(root)]) == 0
    out = capsys.readouterr().out
    assert f"left out {len(bad)} file(s)" in out
    lines = (tmp_path / "o.lst").read_text(encoding="utf-8").splitlines()
    assert sorted(line.split("\t")[-1] for line in lines) == sorted("a/" + n for n in good)
    assert cli(["im2rec", "--quiet", prefix, str(root)]) == 0
    assert "2 images" in capsys.readouterr().out


def test_folder_of_only_unlistable_names_and_empty_folder(tmp_path, capsys):
    root = tmp_path / "img"
    os.makedirs(root)
    assert cli(["im2rec", "--list", str(tmp_path / "o"), str(root)]) == 2
    _one_error_line(capsys, "no images")
    (root / "x\ny.png").write_bytes(b"")
    assert cli(["im2rec", "--list", str(tmp_path / "o"), str(root)]) == 2
    _one_error_line(capsys, "no images", "1 left out")
    assert not (tmp_path / "o.lst").exists()


def test_link_loop_is_walked_once(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=2)
    os.symlink(root, root / "a" / "loop")
    assert cli(["im2rec", "--list", "--recursive", str(tmp_path / "o"), str(root)]) == 0
    assert len((tmp_path / "o.lst").read_text().splitlines()) == 2


@pytest.mark.parametrize("content, words", [
    (b"0\t1\ta/img000.png\n1\t2\ta/img001.png\n0\t3\ta/img002.png\n",
     ["x.lst:3", "index 0", "line 1"]),
    (b"0\t1e300\ta/img000.png\n", ["x.lst:1", "1e+300", "float32"]),
    (b"0\tnan\ta/img000.png\n", ["x.lst:1", "nan"]),
    (b"-1\t0\ta/img000.png\n", ["x.lst:1", "index -1"]),
    (b"18446744073709551616\t0\ta/img000.png\n", ["x.lst:1", "2**64"]),
    (b"\xff\xfe0\t1\ta/img000.png\n", ["x.lst", "not UTF-8"]),
    (b"0\ta/img000.png\n", ["x.lst:1", "expected 'index<TAB>label(s)<TAB>path'"]),
])
def test_bad_lists_are_one_line_and_write_nothing(tmp_path, capsys, content, words):
    root = _folder(tmp_path / "img", n=3)
    (tmp_path / "x.lst").write_bytes(content)
    assert cli(["im2rec", str(tmp_path / "x"), str(root)]) == 2
    _one_error_line(capsys, *words)
    assert not (tmp_path / "x.rec").exists() and not (tmp_path / "x.idx").exists()


def test_too_many_chunks(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=3)
    assert cli(["im2rec", "--list", "--recursive", "--chunks", "4", str(tmp_path / "o"),
                str(root)]) == 2
    _one_error_line(capsys, "--chunks 4", "3 images")
    assert os.listdir(tmp_path) == ["img"]


# -- arguments ------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--quality", "101"], ["--quality", "1 to 100", "101"]),
    (["--quality", "0"], ["--quality", "1 to 100"]),
    (["--encoding", ".png", "--quality", "10"], ["PNG compression level", "0 to 9"]),
    (["--resize", "-5"], ["--resize", "-5"]),
    (["--resize", "100000"], ["--resize", "65535", "100000"]),
    (["--num-thread", "0"], ["--num-thread", "1 and 256"]),
    (["--num-thread", "1000"], ["--num-thread"]),
    (["--max-pixels", "0"], ["--max-pixels"]),
])
def test_arguments_out_of_range(tmp_path, capsys, args, words):
    root = _folder(tmp_path / "img", n=2)
    prefix = str(tmp_path / "t")
    cli(["im2rec", "--list", "--recursive", prefix, str(root)])
    capsys.readouterr()
    assert cli(["im2rec", *args, prefix, str(root)]) == 2
    _one_error_line(capsys, *words)
    assert not (tmp_path / "t.rec").exists()


def test_png_quality_defaults_to_a_compression_level(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=2)
    prefix = str(tmp_path / "t")
    cli(["im2rec", "--list", "--recursive", prefix, str(root)])
    assert cli(["im2rec", "--encoding", ".png", "--quiet", prefix, str(root)]) == 0
    r = rio.MXIndexedRecordIO(tmp_path / "t.idx", tmp_path / "t.rec", "r")
    src = np.asarray(Image.open(root / "a" / "img000.png"))
    got = {rio.unpack_img(r.read_idx(k))[1][:, :, ::-1].tobytes() for k in r.keys}
    assert src.tobytes() in got  # lossless


def test_images_beyond_max_pixels_as_read_or_resized(tmp_path, capsys):
    root = _folder(tmp_path / "img", n=2, size=(12, 10))  # 120 pixels each
    prefix = str(tmp_path / "t")
    cli(["im2rec", "--list", "--recursive", "--no-shuffle", prefix, str(root)])
    capsys.readouterr()
    assert cli(["im2rec", "--max-pixels", "119", prefix, str(root)]) == 2
    _one_error_line(capsys, "img000.png", "10x12 pixels", "--max-pixels")
    assert cli(["im2rec", "--max-pixels", "120", "--quiet", prefix, str(root)]) == 0
    capsys.readouterr()
    # short side 60000: 72000x60000 pixels would need 13 GB
    assert cli(["im2rec", "--resize", "60000", prefix, str(root)]) == 2
    _one_error_line(capsys, "img000.png", "60000x72000", "--max-pixels")
    assert cli(["im2rec", "--resize", "60000", "--skip-bad", "--quiet", prefix,
                str(root)]) == 0
    assert "0 images, skipped 2" in capsys.readouterr().out
