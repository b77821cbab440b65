"""symgraph.util: atomic writes (their permissions and their errors) and the
dimension lists of --shape and --image-shape."""
import os
import stat

import pytest

from symgraph.errors import SymgraphError
from symgraph.util import WriteError, atomic_write_bytes, atomic_write_text, parse_dims


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Sets the process umask for one test and restores it after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_new_file_gets_the_mode_a_plain_open_would(tmp_path, umask, mask):
    # mkstemp alone makes 0600 files that nobody else can read
    umask(mask)
    atomic_write_text(tmp_path / "net.json", "{}")
    with open(tmp_path / "plain.json", "w") as f:
        f.write("{}")
    assert mode_of(tmp_path / "net.json") == 0o666 & ~mask == mode_of(tmp_path / "plain.json")


def test_replaced_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "net.svg"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and mode_of(path) == 0o640
    os.chmod(path, 0o664)
    atomic_write_text(path, "newer")
    assert mode_of(path) == 0o664
    assert os.listdir(tmp_path) == ["net.svg"]  # no temporary file left


def test_unwritable_path_is_one_clear_error(tmp_path):
    # a file where a folder should be: root cannot write there either
    (tmp_path / "notes.txt").write_text("x")
    bad = tmp_path / "notes.txt" / "net.json"
    with pytest.raises(WriteError) as info:
        atomic_write_text(bad, "{}")
    msg = str(info.value)
    assert msg.startswith(f"cannot write {bad}: ") and "is a file, not a folder" in msg
    # a SymgraphError for the CLI's one line, an OSError for callers that catch that
    assert isinstance(info.value, SymgraphError) and isinstance(info.value, OSError)
    with pytest.raises(WriteError, match="it is a folder"):
        atomic_write_text(tmp_path, "{}")
    assert os.listdir(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("text,dims", [
    ("64,3,224,224", (64, 3, 224, 224)),
    ("64x3x224x224", (64, 3, 224, 224)),
    ("8", (8,)),
    (" 8, 784 ", (8, 784)),
])
def test_parse_dims(text, dims):
    assert parse_dims(text) == dims


@pytest.mark.parametrize("text,msg", [
    ("1,3,x", "an empty dimension"),      # once silently (1, 3)
    ("1,3,", "an empty dimension"),
    ("1,,3", "an empty dimension"),
    ("", "an empty dimension"),
    ("1,3,a", "'a' is not a positive whole number"),
    ("1,-3", "'-3' is not a positive whole number"),
    ("1,0", "'0' is not a positive whole number"),
    ("2.5", "'2.5' is not a positive whole number"),
])
def test_parse_dims_names_the_bad_part(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_dims(text)
