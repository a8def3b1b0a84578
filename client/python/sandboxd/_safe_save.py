"""_safe_save.py: writes an artifact's content below a directory, never outside it.

An artifact's relative_path comes from the sandbox through the server: it is
hostile. The rules are the C client's (client/artifacts.c, sbxc_artifact_save,
which sandbox-run --artifacts-dir uses):
only plain relative paths (no empty, "." or ".." component, not absolute, no
NUL); every directory opened with O_NOFOLLOW relative to the one above it, so
a symlink planted anywhere below the directory is never followed; the file
created with O_NOFOLLOW | O_NONBLOCK (an existing symlink is refused, a FIFO
never blocks) and checked to be a regular file; an existing file with other
hard links is refused, since truncating it would write to a file that may
live outside the directory.

This file must never resolve a path from the artifact as a whole string.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import List, Union

PATH_MAX = 4096
NAME_MAX = 255


class UnsafePath(ValueError):
    """A relative_path that could leave the directory, or that meets a
    symlink, a non-regular file or a hard-linked file there."""


def split_relative_path(relative_path: str) -> List[str]:
    """The components of a safe relative path; raises UnsafePath otherwise."""
    if not isinstance(relative_path, str) or relative_path == "":
        raise UnsafePath(f"artifact path {relative_path!r}: empty or not a string")
    raw = relative_path.encode("utf-8", "surrogateescape")
    if len(raw) >= PATH_MAX or "\0" in relative_path:
        raise UnsafePath(f"artifact path {relative_path[:80]!r}: too long or holds a NUL")
    if relative_path.startswith("/"):
        raise UnsafePath(f"artifact path {relative_path!r}: absolute")
    parts = relative_path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePath(f"artifact path {relative_path!r}: empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise UnsafePath(f"artifact path {relative_path[:80]!r}: a component over "
                             f"{NAME_MAX} bytes")
    return parts


def _open_subdir(parent_fd: int, name: str) -> int:
    """Opens (creating it if absent) the directory name below parent_fd,
    never following a symlink."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{name!r} in the artifact's path is a symlink or not a "
                             "directory: not followed") from e
        raise


def _write_file(parent_fd: int, name: str, content: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise UnsafePath(f"{name!r} exists as a symlink, FIFO or directory: not "
                             "written") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{name!r} exists and is not a regular file: not written")
        if st.st_nlink > 1:
            raise UnsafePath(f"{name!r} exists with other hard links: not written")
        os.ftruncate(fd, 0)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def save_below(directory: Union[str, os.PathLike], relative_path: str, content: bytes) -> str:
    """Writes content to directory/relative_path (creating directory and the
    path's directories) and returns that path. The directory itself is the
    caller's: it may be a symlink; nothing below it is followed."""
    parts = split_relative_path(relative_path)
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    cur = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = _open_subdir(cur, part)
            os.close(cur)
            cur = nxt
        _write_file(cur, parts[-1], content)
    finally:
        os.close(cur)
    return os.path.join(directory, *parts)
