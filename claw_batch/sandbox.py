"""The bash sandbox: every command runs in its own bubblewrap container.

What the command sees, and nothing else (not the homes, not the host's /tmp, /run or /var):
- /usr and the /bin, /lib… links into it, read-only: installed software is public;
- /etc read-only, minus what an unprivileged user could not read there (the shadow files,
  TLS private keys…);
- the project at its own path, read-only, except the task's write directories: the fixed
  directory part of each `permissions.write` glob (`out/**` -> out/, `**` -> the whole
  project) and the directory of each declared output. Inside those, .git and the
  workspace's memory/ stay read-only and .claw/ is hidden;
- the offered skills' folders outside the project and a worktree's git directories,
  read-only;
- a private /tmp (also HOME), a minimal /dev, the /proc of its own PID namespace.

It gets new PID, IPC, UTS, cgroup and network namespaces (the network stays only with
`permissions.network: true`), a new session, no capabilities, and dies with its parent.
bwrap reports the PID 1 of the namespace (`Command.leader`): when it exits, after the
command ended or was killed, the kernel has killed everything else in the namespace,
`setsid` or not, and the bash tool waits for that. Per process: at most
`Limits.processes` processes, CPU seconds as long as the call may last, files of at most
`Limits.file_bytes`; the output and the time are bash.py's.

RLIMIT_NPROC counts the processes of a user id, and the kernel never applies it to root,
in a user namespace or not. So a runner that is root starts bwrap without a user namespace
and the command as uid 65534 (nobody) holding only CAP_DAC_OVERRIDE, to read and write the
project's files where the mounts allow; the limit then counts all of nobody's processes,
and files the command creates belong to nobody. Any other runner starts bwrap in a user
namespace as itself, and the limit, set inside, counts only the sandbox's processes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from claw_batch import sandboxhost as host
from claw_batch.errors import ToolError
from claw_batch.paths import STATE_DIR, Policy
from claw_batch.tools.base import Command

NOBODY = 65534
_GLOB_MAGIC = re.compile(r"[*?[{]")
REFUSAL = (
    "bash is refused: no sandbox can be started here ({why}); install bubblewrap, "
    "or let this task run bash unsandboxed with `sandbox: none`"
)


@dataclass(frozen=True)
class Limits:
    processes: int = 256  # RLIMIT_NPROC
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: no file written larger than this
    tmp_bytes: int = 256 << 20  # the private /tmp (memory)


def _is_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class Bubblewrap:
    root: Path  # the project root, resolved
    writable: tuple[str, ...] = ()  # project-relative directories, "" for the root
    read_only: tuple[str, ...] = ()  # runner-owned directories never writable (made if missing)
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
    def command(self, command: Command, *, cwd: Path, seconds: float) -> Iterator[Command]:
        """The confined command, without checking first that bwrap works here."""
        with contextlib.ExitStack() as fds:
            try:
                project, kept = self._project(fds)
            except OSError as e:
                raise ToolError(f"cannot prepare the sandbox: {e}") from None
            leader, status = os.pipe()
            fds.callback(os.close, leader)
            fds.callback(os.close, status)
            argv = [
                shutil.which(self.executable) or self.executable,
                "--json-status-fd",
                str(status),
                *self._namespaces(),
                *host.system(self.network, self.limits.tmp_bytes),
                *[a for path in (*self.outside, *host.git_dirs(self.root)) for a in host.ro(path)],
                *project,
                "--chdir",
                str(cwd),
                "--remount-ro",
                "/",
                *self._inside(seconds),
                *command.argv,
            ]
            fds_passed = (*command.pass_fds, *kept, status)
            yield Command(tuple(argv), self._env(command.env), fds_passed, leader=leader)

    def _namespaces(self) -> list[str]:
        common = ["--new-session", "--die-with-parent", "--cap-drop", "ALL"]
        if not self.privileged:
            net = ["--share-net"] if self.network else []
            return ["--unshare-all", "--unshare-user", "--disable-userns", *net, *common]
        net = [] if self.network else ["--unshare-net"]
        # setpriv needs these to become nobody; nobody keeps only DAC_OVERRIDE (see _inside)
        caps = [
            a
            for c in ("DAC_OVERRIDE", "SETUID", "SETGID", "SETPCAP")
            for a in ("--cap-add", f"CAP_{c}")
        ]
        spaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        return [*spaces, *net, *common, *caps]

    def _inside(self, seconds: float) -> list[str]:
        """What runs inside before the command: (as root) the switch to nobody, the limits."""
        lim = self.limits
        limits = [
            _helper("prlimit"),
            f"--nproc={lim.processes}",
            f"--fsize={lim.file_bytes}",
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
            "--inh-caps=-all,+dac_override",
            "--ambient-caps=-all,+dac_override",
            "--bounding-set=-all,+dac_override",
            "--no-new-privs",
            "--",
        ]
        return [*become, *limits]

    def _project(self, fds: contextlib.ExitStack) -> tuple[list[str], list[int]]:
        """Mount arguments for the project, and the descriptors they name. Sources are bound
        from descriptors opened without following a symlink at any step: a directory
        swapped for a symlink meanwhile (by another job's command) is never mounted."""
        root = str(self.root)
        root_fd = _keep(fds, os.open(root, os.O_PATH | os.O_DIRECTORY))
        args, kept = [*host.parents(root), "--ro-bind-fd", str(root_fd), root], [root_fd]
        writable = [d for d in self.writable if not _under_any(d, (".git", STATE_DIR))]
        for rel in sorted(set(writable), key=lambda d: d.count("/") + bool(d)):
            fd = _open_dir(fds, root_fd, rel, make=True)
            if fd is not None:
                args += ["--bind-fd", str(fd), _join(root, rel)]
                kept.append(fd)
        for rel, make in [(".git", False), *((d, True) for d in self.read_only)]:
            if not _under_any(rel, writable):
                continue
            fd = _open_dir(fds, root_fd, rel, make=make, git=rel == ".git")
            if fd is not None:
                args += ["--ro-bind-fd", str(fd), _join(root, rel)]
                kept.append(fd)
        if os.path.isdir(_join(root, STATE_DIR)):
            hidden = _join(root, STATE_DIR)
            args += ["--tmpfs", hidden, "--remount-ro", hidden]
        return args, kept

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Passed as bwrap's own environment, not as --setenv: a command line is readable by
        every user of the machine."""
        # A repository above the project is across a mount point: git stops there otherwise.
        out = {**env, "HOME": "/tmp", "TMPDIR": "/tmp", "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1"}
        if self.privileged:  # git refuses a repository its user (nobody) does not own
            count = out.get("GIT_CONFIG_COUNT", "")
            n = int(count) if count.isdigit() else 0
            out |= {
                f"GIT_CONFIG_KEY_{n}": "safe.directory",
                f"GIT_CONFIG_VALUE_{n}": "*",
                "GIT_CONFIG_COUNT": str(n + 1),
            }
        return out


def for_job(policy: Policy, *, network: bool) -> Bubblewrap:
    """The sandbox of a job's commands: it may write where its write tools may."""
    root = str(policy.root)
    return Bubblewrap(
        root=policy.root,
        writable=write_dirs(policy.write_globs, policy.outputs),
        # The folders among them (the daily notes); files are for the sealing to come.
        read_only=tuple(
            p for p in policy.protected if p not in (".git", STATE_DIR) and not p.endswith(".md")
        ),
        outside=tuple(d for d in policy.skill_dirs if not host.under(d, root)),
        network=network,
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
    return problem(privileged, shutil.which(bwrap), _helpers(privileged))


@functools.cache
def problem(
    privileged: bool, bwrap: str | None, helpers: tuple[tuple[str, str | None], ...]
) -> str | None:
    """Why no sandbox can be started on this machine (None: it can), given where bwrap and
    the helpers the command needs inside are. Tried once per process: a container of an
    empty directory that runs `true`."""
    missing = [name for name, path in (("bwrap", bwrap), *helpers) if path is None]
    if missing:
        return "not installed: " + ", ".join(f"{m} ({PACKAGES[m]})" for m in missing)
    assert bwrap is not None
    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp).resolve()
        probe = Bubblewrap(real, writable=("",), privileged=privileged, executable=bwrap)
        try:
            with probe.command(Command(("true",), {}), cwd=real, seconds=10) as cmd:
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


PACKAGES = {"bwrap": "package bubblewrap", "prlimit": "util-linux", "setpriv": "util-linux"}


def _helpers(privileged: bool) -> tuple[tuple[str, str | None], ...]:
    """The programs that run inside before the command, and where they are."""
    names = ("prlimit", "setpriv") if privileged else ("prlimit",)
    return tuple((name, shutil.which(name)) for name in names)


def _helper(name: str) -> str:
    return shutil.which(name) or name


def _keep(fds: contextlib.ExitStack, fd: int) -> int:
    fds.callback(os.close, fd)
    return fd


def _open_dir(
    fds: contextlib.ExitStack, root_fd: int, rel: str, *, make: bool, git: bool = False
) -> int | None:
    """A descriptor of `rel` under the root, each missing directory made with `make`,
    reached without following a symlink at any step; None when a step is a symlink or not a
    directory (`git`: the last step may be a file, a worktree's .git)."""
    parts = PurePosixPath(rel).parts if rel else ()
    if ".." in parts:
        return None
    fd = _keep(fds, os.dup(root_fd))  # bwrap closes each descriptor once it has bound it
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        flags = os.O_PATH | os.O_NOFOLLOW | (0 if git and last else os.O_DIRECTORY)
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
        try:
            fd = _keep(fds, os.open(part, flags, dir_fd=fd))
        except OSError:  # missing, a symlink (ELOOP), not a directory
            return None
        if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW opens the link itself
            return None
    return fd


def _join(root: str, rel: str) -> str:
    return f"{root}/{rel}" if rel else root


def _under_any(rel: str, tops: list[str] | tuple[str, ...]) -> bool:
    return any(top == "" or host.under(rel, top) for top in tops)
