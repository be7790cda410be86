"""The bash sandbox: every command runs in its own bubblewrap container.

What the command sees, and nothing else (not the homes, not the host's /tmp, /run or /var):
- /usr and the /bin, /lib… links into it, read-only: installed software is public;
- /etc read-only, minus what an unprivileged user could not read there (the shadow files,
  TLS private keys…);
- the project at its own path, read-only, except the task's write directories: the fixed
  directory part of each `permissions.write` glob (`out/**` -> out/, `**` -> the whole
  project) and the directory of each declared output. Inside those, the protected paths
  (what decides what a run does: the clawfile, prompts, skills, .git…) can be neither
  changed nor made, and .claw/ is hidden (claw_batch.sandbox.mounts);
- the offered user-level and built-in skills' folders, read-only: claw chose those;
  nothing inside the project decides that anything else is mounted (a `.git` file naming
  another directory, a symlink, a repository above the project: git in the sandbox sees
  the project's own `.git` folder or no repository);
- a private /tmp (also HOME), a minimal /dev, the /proc of its own PID namespace.

It gets new PID, IPC, UTS, cgroup and network namespaces (the network stays only with
`permissions.network: true`), a new session, and dies with its parent. It holds no
capability at all, root or not: any mount mistake exposes only what its uid may read. A
seccomp filter (`setid`) keeps it from leaving a set-id program on the host, from making a user
namespace, and from taking disk or memory faster than the ceilings' watch sees.
bwrap reports the PID 1 of the namespace (`Command.leader`): when it exits, after the command
ended or was killed, the kernel has killed everything else in the namespace, `setsid` or
not, and the bash tool waits for that. Per process: at most `Limits.processes` processes,
CPU seconds as long as the call may last, files of at most `Limits.file_bytes`, memory
(RLIMIT_DATA) of at most `Limits.memory`; all processes together, `ceilings` watches memory
and disk. The output and the time are bash.py's.

RLIMIT_NPROC counts the processes of a user id, and the kernel never applies it to root,
in a user namespace or not. So a runner that is root starts bwrap without a user namespace
and the command as uid 65534 (nobody) with no capability; the limit then counts all of
nobody's processes. To write the task's write directories, the command sees the project
through an id-mapped mount that shows the owner's files as nobody's, and what it creates
gets the owner's uid on disk (`idmap`); where no such mount can be made, bash is refused with
the reason. Any other runner starts bwrap in a user namespace as itself (the project's
owner, as a rule), and the limit, set inside, counts only the sandbox's processes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from claw_batch.errors import ToolError
from claw_batch.safety.paths import Policy
from claw_batch.sandbox import host, idmap, setid
from claw_batch.sandbox.ceilings import Ceilings
from claw_batch.sandbox.command import Command
from claw_batch.sandbox.mounts import Plan

NOBODY = idmap.NOBODY
_GLOB_MAGIC = re.compile(r"[*?[{]")
REFUSAL = (
    "bash is refused: no sandbox can be started here ({why}); install bubblewrap, "
    "or let this task run bash unsandboxed with `sandbox: none`"
)
NO_IDMAP = (
    "bash is refused: as root, claw runs commands as nobody, with no capability, and lets "
    "them write the project as its owner through an id-mapped mount, which cannot be made "
    "here ({why}); run claw as the project's owner instead of root, or let this task run "
    "bash unsandboxed with `sandbox: none`"
)
MEMORY = 4 << 30  # limits.memory by default: a compiler or a test suite fits
DISK = 4 << 30  # limits.disk by default: four files of the largest size a call may write


@dataclass(frozen=True)
class Limits:
    processes: int = 256  # RLIMIT_NPROC
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: no file written larger than this
    tmp_bytes: int = 256 << 20  # the private /tmp (memory)
    memory: int = MEMORY  # RLIMIT_DATA of each process, and all processes' memory together
    disk: int = DISK  # free space the write directories' filesystems may lose in a call


def _is_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class Bubblewrap:
    root: Path  # the project root, resolved
    writable: tuple[str, ...] = ()  # project-relative directories, "" for the root
    protected: tuple[str, ...] = ()  # project-relative paths never changed nor made
    outside: tuple[str, ...] = ()  # absolute directories outside the project, read-only
    network: bool = False
    limits: Limits = Limits()
    privileged: bool = field(default_factory=_is_root)  # see the module docstring
    executable: str = "bwrap"
    name: str = "bubblewrap"

    @contextlib.contextmanager
    def wrap(self, command: Command, *, cwd: Path, seconds: float) -> Iterator[Command]:
        why = unavailable(self.privileged, self.executable)
        if why is not None:
            raise ToolError(REFUSAL.format(why=why))
        with self.command(command, cwd=cwd, seconds=seconds) as wrapped:
            yield wrapped

    @contextlib.contextmanager
    def command(
        self, command: Command, *, cwd: Path, seconds: float, idmapped: bool = True
    ) -> Iterator[Command]:
        """The confined command, without checking first that bwrap works here. As root, it
        starts in the project's id-mapped mount namespace, unless not `idmapped` (the
        probe: the command then cannot write the project)."""
        with contextlib.ExitStack() as fds:
            enter = self._enter() if self.privileged and idmapped else []
            try:
                plan = Plan(str(self.root), fds, self._owner())
                project, kept = plan.arguments(self.writable, self.protected)
            except OSError as e:
                raise ToolError(f"cannot prepare the sandbox: {e}") from None
            leader, status = os.pipe()
            fds.callback(os.close, leader)
            fds.callback(os.close, status)
            seccomp = _filter(fds, self.network)
            argv = [
                *enter,
                _which(self.executable) or self.executable,
                "--json-status-fd",
                str(status),
                "--seccomp",
                str(seccomp),
                *self._namespaces(),
                *host.system(self.network, self.limits.tmp_bytes),
                *[a for path in self.outside for a in host.ro(path)],
                *project,
                "--chdir",
                str(cwd),
                "--remount-ro",
                "/",
                *self._inside(seconds),
                *command.argv,
            ]
            passed = (*command.pass_fds, *kept, status, seccomp)
            ceilings = Ceilings(self.limits.memory, self.limits.disk, plan.filesystems())
            yield Command(tuple(argv), self._env(command.env), passed, leader, ceilings)

    def _enter(self) -> list[str]:
        """How to start in the mount namespace where the project is id-mapped (its
        descriptor is kept for the life of the process)."""
        try:
            ns = idmap.namespace(str(self.root))
        except (idmap.Unsupported, OSError) as e:
            raise ToolError(NO_IDMAP.format(why=e)) from None
        # By claw's own /proc entry, not an inherited descriptor, which the command would
        # hold too (nsenter closes what it opened itself).
        return [_helper("nsenter"), f"--mount=/proc/{os.getpid()}/fd/{ns}", "--"]

    def _owner(self) -> tuple[int, int] | None:
        """Who write directories claw makes belong to: as root, the project's owner (the
        command writes as that owner); otherwise the runner, as any mkdir does."""
        if not self.privileged:
            return None
        st = os.stat(self.root)
        return st.st_uid, st.st_gid

    def _namespaces(self) -> list[str]:
        common = ["--new-session", "--die-with-parent", "--cap-drop", "ALL"]
        if not self.privileged:
            net = ["--share-net"] if self.network else []
            return ["--unshare-all", "--unshare-user", "--disable-userns", *net, *common]
        net = [] if self.network else ["--unshare-net"]
        # Held from bwrap to setpriv only, which drops them all (see _inside): setpriv needs
        # SETUID, SETGID and SETPCAP to become nobody; bwrap enters the working directory
        # with DAC_READ_SEARCH (a 0700 project is its owner's, so nobody's, not root's).
        held = ("SETUID", "SETGID", "SETPCAP", "DAC_READ_SEARCH")
        caps = [a for c in held for a in ("--cap-add", f"CAP_{c}")]
        spaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        return [*spaces, *net, *common, *caps]

    def _inside(self, seconds: float) -> list[str]:
        """What runs inside before the command: (as root) the switch to nobody, the limits."""
        lim = self.limits
        limits = [
            _helper("prlimit"),
            f"--nproc={lim.processes}",
            f"--fsize={lim.file_bytes}",
            f"--data={lim.memory}",
            f"--cpu={max(1, math.ceil(seconds))}",
            "--core=0",
            "--",
        ]
        if not self.privileged:
            return limits
        become = [
            _helper("setpriv"),
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
        return [*become, *limits]

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Passed as bwrap's own environment, not as --setenv: a command line is readable by
        every user of the machine."""
        # Git stops at the project: nothing above it is mounted (not a repository either).
        ceiling = str(self.root.parent)
        return {**env, "HOME": "/tmp", "TMPDIR": "/tmp", "GIT_CEILING_DIRECTORIES": ceiling}


def _filter(fds: contextlib.ExitStack, network: bool) -> int:
    """A descriptor of the seccomp filter (`setid`), closed with `fds`."""
    try:
        fd = setid.descriptor(network=network)
    except setid.Unsupported as e:
        raise ToolError(str(e)) from None
    fds.callback(os.close, fd)
    return fd


def for_job(policy: Policy, *, network: bool, limits: Limits = Limits()) -> Bubblewrap:
    """The sandbox of a job's commands: it may write where its write tools may."""
    root = str(policy.root)
    return Bubblewrap(
        root=policy.root,
        writable=write_dirs(policy.write_globs, policy.outputs),
        protected=policy.read_only,
        outside=tuple(d for d in policy.skill_dirs if not host.under(d, root)),
        network=network,
        limits=limits,
    )


def write_dirs(write_globs: tuple[str, ...], outputs: tuple[str, ...]) -> tuple[str, ...]:
    """The directories a sandboxed command may write: the fixed part of each write glob
    (everything before its first wildcard; a glob without one names a file, so its
    directory) and the directory of each declared output. "" is the project root."""
    found = {_fixed_dir(g) for g in write_globs} | {_fixed_dir(o, literal=True) for o in outputs}
    return tuple(sorted(found))


def _fixed_dir(glob: str, *, literal: bool = False) -> str:
    parts = [p for p in glob.split("/") if p not in ("", ".")]
    fixed = parts if literal else list(_until_magic(parts))
    if len(fixed) == len(parts) and not glob.endswith("/"):  # no wildcard: a file's path
        fixed = fixed[:-1]
    return "/".join(fixed)


def _until_magic(parts: list[str]) -> Iterator[str]:
    for part in parts:
        if _GLOB_MAGIC.search(part):
            return
        yield part


def unavailable(privileged: bool, bwrap: str = "bwrap") -> str | None:
    """Why no sandbox can be started here, for a runner that is root (`privileged`) or not;
    None when one can."""
    return problem(privileged, _which(bwrap), _helpers(privileged))


@functools.cache
def problem(
    privileged: bool, bwrap: str | None, helpers: tuple[tuple[str, str | None], ...]
) -> str | None:
    """Why no sandbox can be started on this machine (None: it can), given where bwrap and
    the helpers the command needs inside are. Tried once per process: a container of an
    empty directory that runs `true` (without the id-mapped mount, which depends on the
    project's filesystem: see `Bubblewrap.command`)."""
    missing = [name for name, path in (("bwrap", bwrap), *helpers) if path is None]
    if missing:
        return "not installed: " + ", ".join(f"{m} ({PACKAGES[m]})" for m in missing)
    assert bwrap is not None
    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp).resolve()
        probe = Bubblewrap(real, writable=("",), privileged=privileged, executable=bwrap)
        try:
            cmd = Command(("true",), {})
            with probe.command(cmd, cwd=real, seconds=10, idmapped=False) as cmd:
                done = subprocess.run(
                    cmd.argv,
                    env=cmd.env,
                    pass_fds=cmd.pass_fds,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                )
        except (OSError, ToolError, subprocess.TimeoutExpired) as e:
            return f"bwrap did not start: {e}"
    if done.returncode == 0:
        return None
    said = (done.stderr + done.stdout).decode(errors="replace").strip().splitlines()
    return f"{bwrap} failed: {said[-1] if said else f'exit code {done.returncode}'}"


PACKAGES = {
    "bwrap": "package bubblewrap",
    **{name: "util-linux" for name in ("prlimit", "setpriv", "nsenter", "unshare")},
}


def _helpers(privileged: bool) -> tuple[tuple[str, str | None], ...]:
    """The programs the sandbox needs besides bwrap (as root: to enter the id-mapped mount
    namespace and to become nobody), and where they are."""
    names = ("prlimit", "setpriv", "nsenter", "unshare") if privileged else ("prlimit",)
    return tuple((name, _which(name)) for name in names)


def _helper(name: str) -> str:
    return _which(name) or name


def _which(name: str) -> str | None:
    """shutil.which, once per PATH: each call looks in every PATH folder (~0.1 ms)."""
    return _found(name, os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=64)
def _found(name: str, path: str) -> str | None:
    return shutil.which(name, path=path)
