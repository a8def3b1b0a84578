"""Artifact.save never writes outside its directory: hostile relative paths
are refused, and nothing planted below the directory (symlinks to
directories or files, FIFOs, hard links) is followed or written through.
relative_path comes from the sandbox, so these are the inputs a hostile run
(or server) can choose; the end-to-end save of real artifacts is in
test_methods.py."""
import os
import threading

import pytest

from sandboxd import Artifact, UnsafePath


def art(path, content=b"data", omitted=False):
    return Artifact(name=os.path.basename(path), relative_path=path, size=len(content),
                    mime="text/plain", content=content, content_omitted=omitted)


@pytest.fixture
def layout(tmp_path):
    """out/ (the target), and outside it a victim file and directory."""
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    return out, victim, victim_dir


def untouched(victim, victim_dir):
    return victim.read_text() == "precious" and os.listdir(victim_dir) == []


@pytest.mark.parametrize("path", [
    "/etc/passwd", "../victim.txt", "a/../../victim.txt", "..", ".", "", "a//b", "./a",
    "a/./b", "a/", "/", "x\0y", "a/" * 3000 + "b", "n" * 256,
])
def test_hostile_paths_are_refused(layout, path):
    out, victim, victim_dir = layout
    with pytest.raises(UnsafePath):
        art(path).save(out)
    assert untouched(victim, victim_dir) and os.listdir(out) == []


def test_symlinked_directory_is_not_followed(layout):
    out, victim, victim_dir = layout
    os.symlink(victim_dir, out / "sub")
    with pytest.raises(UnsafePath, match="symlink"):
        art("sub/x.txt").save(out)
    os.makedirs(out / "a" / "b")
    os.symlink(victim_dir, out / "a" / "b" / "c")
    with pytest.raises(UnsafePath):
        art("a/b/c/d/x.txt").save(out)
    assert untouched(victim, victim_dir)


def test_symlinked_file_is_not_written_through(layout):
    out, victim, victim_dir = layout
    os.symlink(victim, out / "top.txt")
    with pytest.raises(UnsafePath, match="symlink"):
        art("top.txt", b"evil").save(out)
    os.symlink("/nonexistent-target-of-a-dangling-link", out / "dangling")
    with pytest.raises(UnsafePath):
        art("dangling", b"evil").save(out)
    assert untouched(victim, victim_dir)
    assert not os.path.exists("/nonexistent-target-of-a-dangling-link")


def test_fifo_is_refused_without_blocking(layout):
    out, victim, victim_dir = layout
    os.mkfifo(out / "f.txt")
    result = {}

    def save():
        try:
            art("f.txt").save(out)
        except UnsafePath as e:
            result["error"] = e

    t = threading.Thread(target=save, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "saving onto a FIFO blocked"
    assert "error" in result


def test_fifo_with_a_reader_is_not_written(layout):
    out, _, _ = layout
    os.mkfifo(out / "f.txt")
    reader = os.open(out / "f.txt", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UnsafePath, match="not a regular file"):
            art("f.txt", b"evil").save(out)
        assert os.read(reader, 100) == b""
    finally:
        os.close(reader)


def test_hard_link_is_not_written_through(layout):
    out, victim, victim_dir = layout
    os.link(victim, out / "linked.txt")
    with pytest.raises(UnsafePath, match="hard links"):
        art("linked.txt", b"evil").save(out)
    assert untouched(victim, victim_dir)


def test_plain_paths_are_saved_and_overwritten(layout):
    out, victim, victim_dir = layout
    path = art("deep/er/data.bin", b"\x00\xff" * 1000).save(out)
    assert path == os.path.join(out, "deep", "er", "data.bin")
    assert open(path, "rb").read() == b"\x00\xff" * 1000
    art("deep/er/data.bin", b"short").save(out)
    assert open(path, "rb").read() == b"short"
    art("caf\u00e9 \u65e5\u672c.txt", b"u").save(out)
    art("new\nline.txt", b"n").save(out)
    assert sorted(os.listdir(out)) == sorted(["deep", "caf\u00e9 \u65e5\u672c.txt", "new\nline.txt"])
    assert untouched(victim, victim_dir)


def test_missing_directory_is_created_and_may_be_a_symlink(tmp_path):
    """The directory itself is the caller's choice, so a symlink there is
    theirs to make; only what is below it is hostile."""
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    art("x.txt").save(tmp_path / "alias")
    art("y.txt").save(tmp_path / "new" / "dir")
    assert (real / "x.txt").read_bytes() == b"data"
    assert (tmp_path / "new" / "dir" / "y.txt").read_bytes() == b"data"


def test_omitted_content_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="left its content out"):
        art("big.bin", b"", omitted=True).save(tmp_path)
    assert os.listdir(tmp_path) == []
