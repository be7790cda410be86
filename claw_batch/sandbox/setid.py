"""The seccomp filter of every sandboxed command: it makes no set-id file and gains no capability.

What a command creates in a write directory stays on the host, owned by the project's owner
(as root, through the id-mapped mount: see `idmap`) or by the runner. The owner of a file may
set its set-uid and set-gid bits, so a command could leave a program that makes whoever runs
it the owner — root, for a root-owned project. The sandbox's `nosuid` mounts protect only the
sandbox. The kernel has no switch against that; like systemd's `RestrictSUIDSGID=`, this
filter refuses (EPERM) every system call that would set S_ISUID or S_ISGID: chmod, fchmod,
fchmodat, fchmodat2 with such a mode; creat and mknod(at) with one; open(at) that create
(O_CREAT, O_TMPFILE) with one. That covers `chmod u+s`, `cp -p`, `tar -p`, `install -m 4755`,
Python's `os.chmod`. mkdir(at) is let through: Linux ignores those bits in its mode (mkdir(2),
NOTES), and a directory is set-gid only below one that already is (the owner's choice).

A file capability (`setcap`, the `security.capability` attribute) is the other way to leave a
program more powerful than its caller: it needs CAP_SETFCAP, which the command can gain only in
a user namespace of its own, whose root is, through the id-mapped mount, the owner on disk.
So the filter also refuses (EPERM) unshare and clone with CLONE_NEWUSER (bwrap's
`--disable-userns` did that only for a runner that is not root).

What the filter cannot read, it refuses with ENOSYS, which makes libc fall back to a call it
can read: openat2 and clone3 (their mode and flags are in a struct in memory), io_uring_setup
(io_uring opens files without system calls).

Two more calls would pass the ceilings (`ceilings`: memory and disk, watched every 0.1 s)
faster than a watch can see: fallocate takes any amount of disk at once, in a file that may
show 0 bytes (EOPNOTSUPP: `posix_fallocate` falls back to writing, at the disk's speed), and
a SysV shared memory segment, which RLIMIT_DATA does not bound, could be of any size, filled
between two checks (shmget of more than `SHM_MOST` refused, ENOMEM; all segments together,
the memory ceiling counts: `sysvshm`).

The kernel's keyrings are not namespaced: a command would read the runner's session keyring
(Kerberos tickets, fscrypt keys, tokens) and, as root, share nobody's user keyring with every
later call; add_key, keyctl and request_key (whose upcall runs a helper on the host, as root)
answer ENOSYS. And without `permissions.network`, a command makes no Unix socket (socketpair
still works): a socket file of the host's in the project (a database's, Docker's, an ssh
master's) is a service the network namespace does not hide.

The rules are in the system-call numbers of x86_64 and aarch64; the filter checks the
architecture of each call and kills the process for any other (i386 through `int 0x80`, x32,
32-bit ARM), whose numbers mean other calls. On a machine of another architecture no filter
is made and bash is refused (`Unsupported`): better no bash than a sandbox that lets a command
leave a set-uid program behind.
"""

from __future__ import annotations

import errno
import functools
import os
import struct

# classic BPF (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ, _JGT, _JGE, _JSET = 0x15, 0x25, 0x35, 0x45
_RET = 0x06
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARGS = 0, 4, 16
_KILL_PROCESS, _ERRNO, _ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_X86_64, _AARCH64 = 0xC000003E, 0xC00000B7  # AUDIT_ARCH_*: the ELF machine, 64-bit, LE
_X32 = 0x40000000  # __X32_SYSCALL_BIT: x32 calls come with x86_64's arch
# The same values on both architectures (asm-generic/fcntl.h, linux/sched.h).
_SET_ID = 0o6000  # S_ISUID | S_ISGID
_CREATES = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE
_CLONE_NEWUSER = 0x10000000
SHM_MOST = 16 << 20  # bytes of one SysV segment: PostgreSQL's is a few dozen
KNOWN = ("x86_64", "aarch64")
UNKNOWN = (
    "claw's filter against set-id programs knows the system calls of {known}, not of "
    "this machine's {machine}"
)

_Instruction = tuple[int, int, int, int]  # struct sock_filter: code, jt, jf, k
_Rule = list[_Instruction]


class Unsupported(Exception):
    """No filter can be made for this machine; the text says why."""


def _ret(value: int) -> _Instruction:
    return (_RET, 0, 0, value)


def _arg(index: int) -> _Instruction:
    """Load the low 32 bits of argument `index` (both architectures are little-endian); the
    kernel reads a mode or flags of no more."""
    return (_LD_W_ABS, 0, 0, _ARGS + 8 * index)


def _refuse_if(index: int, bits: int) -> _Rule:
    """EPERM when argument `index` has any of `bits`."""
    return [_arg(index), (_JSET, 0, 1, bits), _ret(_ERRNO | errno.EPERM), _ret(_ALLOW)]


def _mode(index: int) -> _Rule:
    return _refuse_if(index, _SET_ID)


def _creating(flags: int, mode: int) -> _Rule:
    """EPERM when an open creates (argument `flags`) with a set-id mode (argument `mode`)."""
    check = _mode(mode)
    return [_arg(flags), (_JSET, 0, len(check) - 1, _CREATES), *check]


def _refuse_equal(index: int, value: int, err: int) -> _Rule:
    """`err` when argument `index` is `value`."""
    return [_arg(index), (_JEQ, 0, 1, value), _ret(_ERRNO | err), _ret(_ALLOW)]


def _new_user(index: int) -> _Rule:
    return _refuse_if(index, _CLONE_NEWUSER)


def _at_most(index: int, most: int, err: int) -> _Rule:
    """`err` when the 64-bit argument `index` is more than `most`."""
    return [
        (_LD_W_ABS, 0, 0, _ARGS + 8 * index + 4),  # the high 32 bits: must be 0
        (_JEQ, 1, 0, 0),
        _ret(_ERRNO | err),
        _arg(index),
        (_JGT, 0, 1, most),
        _ret(_ERRNO | err),
        _ret(_ALLOW),
    ]


def _unreadable() -> _Rule:
    return [_ret(_ERRNO | errno.ENOSYS)]


# What each call may not do; the argument positions are the kernel's, the same on both.
RULES = {
    "open": _creating(1, 2),  # open(path, flags, mode)
    "openat": _creating(2, 3),  # openat(dirfd, path, flags, mode)
    "creat": _mode(1),  # creat(path, mode)
    "mknod": _mode(1),  # mknod(path, mode, dev)
    "mknodat": _mode(2),  # mknodat(dirfd, path, mode, dev)
    "chmod": _mode(1),  # chmod(path, mode)
    "fchmod": _mode(1),  # fchmod(fd, mode)
    "fchmodat": _mode(2),  # fchmodat(dirfd, path, mode)
    "fchmodat2": _mode(2),  # fchmodat2(dirfd, path, mode, flags)
    "openat2": _unreadable(),
    "io_uring_setup": _unreadable(),
    "clone3": _unreadable(),
    "clone": _new_user(0),  # clone(flags, ...)
    "unshare": _new_user(0),  # unshare(flags)
    "fallocate": [_ret(_ERRNO | errno.EOPNOTSUPP)],
    "add_key": _unreadable(),
    "keyctl": _unreadable(),
    "request_key": _unreadable(),
    "shmget": _at_most(1, SHM_MOST, errno.ENOMEM),  # shmget(key, size, flags)
}
# Only without the network: a Unix socket (socket(AF_UNIX, ...)) reaches the host's services.
OFFLINE = {"socket": _refuse_equal(0, 1, errno.EACCES)}  # AF_UNIX
# The calls' numbers (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h).
X86_64 = {
    "open": 2,
    "openat": 257,
    "creat": 85,
    "mknod": 133,
    "mknodat": 259,
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "fchmodat2": 452,
    "openat2": 437,
    "io_uring_setup": 425,
    "clone3": 435,
    "clone": 56,
    "unshare": 272,
    "fallocate": 285,
    "shmget": 29,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "socket": 41,
}
AARCH64 = {  # asm-generic: no open, creat, mknod, chmod: only the *at calls
    "openat": 56,
    "mknodat": 33,
    "fchmod": 52,
    "fchmodat": 53,
    "fchmodat2": 452,
    "openat2": 437,
    "io_uring_setup": 425,
    "clone3": 435,
    "clone": 220,
    "unshare": 97,
    "fallocate": 47,
    "shmget": 194,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "socket": 198,
}


def _dispatch(numbers: dict[str, int], rules: dict[str, _Rule]) -> _Rule:
    """For each call of `numbers` that has one of `rules` (A holds the call's number) its
    rule; any other call passes. Every rule ends in a return, so a number that does not
    match jumps over it."""
    block: _Rule = []
    for name, number in numbers.items():
        rule = rules.get(name)
        if rule is not None:
            block += [(_JEQ, 0, len(rule), number), *rule]
    return [*block, _ret(_ALLOW)]


def _architecture(arch: int, block: _Rule) -> _Rule:
    """`block` for calls of `arch` (A holds the arch); any other arch jumps over it."""
    return [(_JEQ, 0, len(block), arch), *block]


def _instructions(network: bool) -> _Rule:
    rules = RULES if network else {**RULES, **OFFLINE}
    number = (_LD_W_ABS, 0, 0, _NR)
    x32 = [(_JGE, 0, 1, _X32), _ret(_KILL_PROCESS)]
    return [
        (_LD_W_ABS, 0, 0, _ARCH),
        *_architecture(_X86_64, [number, *x32, *_dispatch(X86_64, rules)]),
        *_architecture(_AARCH64, [number, *_dispatch(AARCH64, rules)]),
        _ret(_KILL_PROCESS),
    ]


@functools.cache
def program(machine: str = os.uname().machine, *, network: bool = False) -> bytes:
    """The compiled filter (an array of `struct sock_filter`) for a machine of `machine`'s
    architecture, for a command with or without the network; Unsupported for one whose system
    calls it does not know."""
    if machine not in KNOWN:
        raise Unsupported(UNKNOWN.format(known=" and ".join(KNOWN), machine=machine))
    code = _instructions(network)
    assert all(jt < 256 and jf < 256 for _, jt, jf, _ in code), "a jump too long for BPF"
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


def descriptor(*, network: bool = False) -> int:
    """A new descriptor that reads the filter from its start, for `bwrap --seccomp FD` (which
    reads it to its end): the caller closes it."""
    fd = os.memfd_create("claw-setid", os.MFD_CLOEXEC)
    try:
        os.write(fd, program(network=network))
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
