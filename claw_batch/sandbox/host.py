"""What a sandboxed command sees of the host besides the project: the system read-only,
/etc without what only root may read, a private /tmp and /dev/shm. Nothing here depends on
what is in the project."""

from __future__ import annotations

import functools
import os
import stat
from pathlib import PurePosixPath

TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SHM_BYTES = 64 << 20  # the private /dev/shm (memory), as large as Docker's


def system(network: bool, tmp_bytes: int) -> list[str]:
    """/usr and the links into it, /etc: read-only (installed software is public); a new
    /proc; a minimal /dev, read-only but for its devices, its ptys and a private /dev/shm
    of SHM_BYTES; a private /tmp of `tmp_bytes`. The only places the command may write in
    memory are those two, each of a fixed size (bwrap's /dev is a tmpfs of none, which a
    runner that is not root would own)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", "/etc", "/etc", *_etc_masks()]
    resolv = os.path.realpath("/etc/resolv.conf")
    if network and not resolv.startswith("/etc/"):  # systemd-resolved's, under /run
        args += ["--ro-bind-try", os.path.dirname(resolv), os.path.dirname(resolv)]
    shm = ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    dev = ["--dev", "/dev", *shm, "--remount-ro", "/dev"]  # not recursive: /dev/shm stays
    tmp = ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    return [*args, "--proc", "/proc", *dev, *tmp]


@functools.cache
def _etc_masks() -> tuple[str, ...]:
    """Hide what of /etc only some users may read: the command holds no capability, but in
    a user namespace it keeps the runner's uid and groups (a group such as ssl-cert)."""
    args: list[str] = []
    for top, dirs, files in os.walk("/etc"):
        for name in list(dirs):
            path = os.path.join(top, name)
            if not _public(path, stat.S_IROTH | stat.S_IXOTH):
                args += ["--tmpfs", path, "--remount-ro", path]
                dirs.remove(name)
        for name in files:
            path = os.path.join(top, name)
            if not _public(path, stat.S_IROTH):
                args += ["--ro-bind", "/dev/null", path]
    return tuple(args)


def _public(path: str, bits: int) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return True  # gone meanwhile: nothing to hide
    return stat.S_ISLNK(mode) or mode & bits == bits


def ro(path: str) -> list[str]:
    return [*parents(path), "--ro-bind-try", path, path]


def parents(path: str) -> list[str]:
    """Make the directories above a mount point searchable by all: bwrap makes them 0700,
    and as root the command runs as nobody."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(path).parents):
        if str(parent) not in ("/", "/tmp"):
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")
