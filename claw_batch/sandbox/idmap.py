"""How a root runner's sandboxed command writes the project without any capability.

As root, the command runs as nobody (65534) with no capability, so it may touch only what
nobody may. To let it write the task's write directories as the project's owner would, the
project is seen through an id-mapped mount (Linux >= 5.12) that shows the owner's files as
nobody's and gives what nobody creates the owner's uid on disk. That mount is made once per
project per process, in a mount namespace of its own:

- a user namespace that maps the owner to nobody (`uid_map`: "OWNER 65534 1", the same for
  the group), made by a child (`unshare --user cat`) that is gone once the map is written;
- `open_tree(root, OPEN_TREE_CLONE)`, a detached copy of the project's mount, made id-mapped
  with `mount_setattr(MOUNT_ATTR_IDMAP)`;
- a short-lived thread that `unshare`s a mount namespace of its own (with CLONE_FS, which a
  thread may), makes every mount in it private (so that nothing reaches the host) and moves
  the id-mapped copy over the project's own path; the namespace is then kept by a descriptor.

bwrap starts inside that namespace (`nsenter --mount=/proc/self/fd/N`). Its path-based binds
then take the id-mapped view, and its descriptor check (`--bind-fd`: the bound path must
have the descriptor's device and inode) still passes: an id-mapped mount keeps both.

Only the project's own mount is copied: a filesystem mounted inside the project is not seen
by commands. Files owned by anyone but the owner are, to the command, another user's.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import subprocess
import threading
import time

NOBODY = 65534
# Syscall numbers of the mount API: the same on every architecture since Linux 5.2 / 5.12.
_OPEN_TREE, _MOVE_MOUNT, _MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 0x1, os.O_CLOEXEC
_AT_FDCWD, _AT_EMPTY_PATH, _AT_SYMLINK_NOFOLLOW = -100, 0x1000, 0x100
_MOUNT_ATTR_IDMAP = 0x100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_CLONE_NEWNS, _CLONE_FS = 0x20000, 0x200
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_WAIT_SECONDS = 5.0


class Unsupported(Exception):
    """No id-mapped view of the project can be made here; the text says why."""


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


_lock = threading.Lock()
_made: dict[tuple[str, int, int, int, int], int | Unsupported] = {}


def namespace(root: str) -> int:
    """A descriptor of the mount namespace in which `root` (resolved) is seen id-mapped, its
    owner as nobody; made on first use and kept for the life of the process (one per
    project). Raises Unsupported with the reason."""
    st = os.stat(root)
    key = (root, st.st_dev, st.st_ino, st.st_uid, st.st_gid)
    with _lock:
        if key not in _made:
            try:
                _made[key] = _make(root, st.st_uid, st.st_gid)
            except Unsupported as e:
                _made[key] = e
        made = _made[key]
    if isinstance(made, Unsupported):
        raise made
    return made


def _make(root: str, uid: int, gid: int) -> int:
    userns = _mapping_namespace(uid, gid)
    try:
        tree = _syscall(
            "open_tree",
            _OPEN_TREE,
            _AT_FDCWD,
            root.encode(),
            _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_SYMLINK_NOFOLLOW,
        )
        attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns)
        size = ctypes.c_size_t(ctypes.sizeof(attr))
        _syscall(
            "mount_setattr", _MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr), size
        )
    finally:
        os.close(userns)
    try:
        return _private_namespace(root, tree)
    finally:
        os.close(tree)


def _mapping_namespace(uid: int, gid: int) -> int:
    """A descriptor of a new user namespace whose ids `uid`/`gid` are nobody's outside."""
    try:
        child = subprocess.Popen(["unshare", "--user", "cat"], stdin=subprocess.PIPE)
    except OSError as e:
        raise Unsupported(f"cannot start unshare: {e.strerror or e}") from None
    try:
        proc = f"/proc/{child.pid}"
        _await_own_namespace(child, proc)
        for name, text in (("uid_map", f"{uid} {NOBODY} 1\n"), ("setgroups", "deny")):
            _write(f"{proc}/{name}", text)
        _write(f"{proc}/gid_map", f"{gid} {NOBODY} 1\n")
        return os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise Unsupported(f"cannot map the project's owner: {e.strerror or e}") from None
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.kill()
        child.wait()


def _await_own_namespace(child: subprocess.Popen[bytes], proc: str) -> None:
    ours = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + _WAIT_SECONDS
    while os.readlink(f"{proc}/ns/user") == ours:
        if child.poll() is not None or time.monotonic() > deadline:
            raise Unsupported("unshare --user did not make a user namespace")
        time.sleep(0.001)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _private_namespace(root: str, tree: int) -> int:
    """Move `tree` over `root` in a new mount namespace, made by a thread of its own (the
    process keeps its own namespace); a descriptor of that namespace."""
    made: list[int | Unsupported] = []

    def inside() -> None:
        try:
            _syscall("unshare", None, _CLONE_NEWNS | _CLONE_FS)
            _syscall("mount", None, None, b"/", None, _MS_REC | _MS_PRIVATE, None)
            flags = _MOVE_MOUNT_F_EMPTY_PATH
            _syscall("move_mount", _MOVE_MOUNT, tree, b"", _AT_FDCWD, root.encode(), flags)
            made.append(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
        except (Unsupported, OSError) as e:
            made.append(e if isinstance(e, Unsupported) else Unsupported(str(e)))

    thread = threading.Thread(target=inside, name="claw-idmap")
    thread.start()
    thread.join()
    if isinstance(made[0], Unsupported):
        raise made[0]
    return made[0]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(name: str, number: int | None, *args: object) -> int:
    """The syscall (by number) or libc function `name`; Unsupported with its error."""
    libc = _libc()
    result = libc.syscall(number, *args) if number is not None else getattr(libc, name)(*args)
    if result < 0:
        code = ctypes.get_errno()
        raise Unsupported(f"{name}: {_WHY.get((name, code)) or os.strerror(code)}")
    return int(result)


_WHY = {
    ("open_tree", errno.ENOSYS): "this kernel has no id-mapped mounts (Linux 5.12 has)",
    ("mount_setattr", errno.ENOSYS): "this kernel has no id-mapped mounts (Linux 5.12 has)",
    ("mount_setattr", errno.EINVAL): "the project's filesystem has no id-mapped mounts",
    ("open_tree", errno.EPERM): "not permitted (a container without CAP_SYS_ADMIN?)",
}
