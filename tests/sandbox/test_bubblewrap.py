"""The bash sandbox (issue 7): real bubblewrap, through the bash tool and through `claw run`.

Each test tries what a hostile command would: write outside, read the runner's environment,
reach the network, exhaust processes, outlive the call, flood the output. As root, both ways
of starting the sandbox are tried ("privileged": the command runs as nobody; "userns": as a
normal user runs it), so that the guarantees do not depend on who runs claw.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project

from claw_batch.errors import ToolError
from claw_batch.safety.childenv import git_read_only, scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.sandbox.bubblewrap import Bubblewrap, Limits
from claw_batch.sandbox.command import Command
from claw_batch.tools import bash
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

PROTECTED = (".git", ".claw", "workspace/memory")
DEFAULT_LIMITS = Limits()
ROOT = os.geteuid() == 0
MODES = ["privileged", "userns"] if ROOT else ["userns"]
SECRET = "sk-planted-0123456789abcdefXYZ"
UNAVAILABLE = sandbox.unavailable(ROOT)
if UNAVAILABLE and not os.environ.get("CI"):  # CI installs bubblewrap: there it must work
    pytest.skip(f"no sandbox here: {UNAVAILABLE}", allow_module_level=True)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / ".claw").mkdir(parents=True)
    (proj / ".claw" / "state.db").write_text("runner state\n")
    (proj / "workspace" / "memory").mkdir(parents=True)
    (proj / "README.md").write_text("hello\n")
    (tmp_path / "outside").mkdir()
    return proj.resolve()


def context(
    root: Path,
    mode: str,
    *,
    write: tuple[str, ...] = ("out/**",),
    network: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    allow: tuple[str, ...] | bool = True,
    env: dict[str, str] | None = None,
) -> ToolContext:
    policy = Policy(root, write_globs=write, protected=PROTECTED)
    box = sandbox.for_job(policy, network=network)
    box = dataclasses.replace(box, privileged=mode == "privileged", limits=limits)
    environ = scrubbed_env() if env is None else env
    return ToolContext(root, policy, environ, time.monotonic() + 60, allow, box)


def run(ctx: ToolContext, command: str, timeout: int = 30) -> str:
    return TOOLS["bash"].invoke(ctx, json.dumps({"command": command, "timeout": timeout}))


# --- files -------------------------------------------------------------------------------------


def test_the_project_is_read_only_but_its_write_directories(root: Path, mode: str) -> None:
    out = run(
        context(root, mode),
        "echo new > out/a.txt && cat out/a.txt; echo changed > README.md; rm README.md",
    )
    assert out == (
        "exit code 1\n"
        "new\n"
        "bash: line 1: README.md: Read-only file system\n"
        "rm: cannot remove 'README.md': Read-only file system"
    )
    assert (root / "out/a.txt").read_text() == "new\n"
    assert (root / "README.md").read_text() == "hello\n"


def test_a_project_only_its_owner_may_enter_works(root: Path, mode: str) -> None:
    """As root the command is nobody, who is the owner through the id-mapped mount; it, not
    bwrap (root without its rights), enters the working directory."""
    root.chmod(0o700)
    out = run(context(root, mode), "pwd; echo new > out/a.txt; cat README.md")
    assert out == f"exit code 0\n{root}\nhello"
    assert (root / "out/a.txt").read_text() == "new\n"


def test_writes_outside_the_project_never_reach_the_host(
    root: Path, mode: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (root / "out").mkdir()
    (root / "out" / "link").symlink_to(outside)  # a symlink in a write dir, pointing out
    host_tmp = Path("/tmp") / f"claw-sandbox-{uuid.uuid4().hex}"
    # 0: it worked, in the sandbox's own /tmp (the project is under /tmp here), where a
    # runner that is not root may write; as root the command is nobody, who may not
    beside = "1" if mode == "privileged" else "0"
    commands = [
        "echo x > ../escape.txt",  # beside the project
        f"echo x > {outside}/abs.txt",  # by absolute path
        "echo x > out/link/through-link.txt",  # through the symlink
        "ln -s .. out/up && echo x > out/up/../escape2.txt",  # a symlink made inside
        f"echo x > {host_tmp}",  # /tmp is the sandbox's own
        "echo x > $HOME/.profile",  # so is HOME
        "mkdir -p /var/tmp/x",
    ]
    out = run(context(root, mode), "; ".join(f"{{ {c}; }} 2>/dev/null; echo $?" for c in commands))
    assert out == "exit code 0\n" + "\n".join([beside, "1", "1", beside, "0", "0", "1"])
    assert sorted(os.listdir(outside)) == []
    assert sorted(os.listdir(tmp_path)) == ["outside", "proj"]
    assert not host_tmp.exists()
    assert sorted(os.listdir(root / "out")) == ["link", "up"]


def test_git_claw_and_memory_stay_read_only_when_the_whole_project_is_writable(
    root: Path, mode: str
) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    commands = [
        "echo x > new.txt",
        "echo x > .git/hooks/pre-commit",
        "mv .git gone",
        "echo x > workspace/memory/2026-11-22.md",
        "mv workspace/memory workspace/gone",
        "ls -A .claw",
        "echo x > .claw/state.db",
        "mv .claw gone",
    ]
    out = run(context(root, mode, write=("**",)), "; ".join(f"{c} 2>&1; echo $?" for c in commands))
    assert out == (
        "exit code 0\n"
        "0\n"
        "bash: line 1: .git/hooks/pre-commit: Read-only file system\n1\n"
        "mv: cannot move '.git' to 'gone': Device or resource busy\n1\n"
        "bash: line 1: workspace/memory/2026-11-22.md: Read-only file system\n1\n"
        "mv: cannot move 'workspace/memory' to 'workspace/gone': Device or resource busy\n1\n"
        "0\n"  # .claw looks empty: the runner's state is not even readable
        "bash: line 1: .claw/state.db: Read-only file system\n1\n"
        "mv: cannot move '.claw' to 'gone': Device or resource busy\n1"
    )
    assert (root / "new.txt").read_text() == "x\n"
    assert not (root / ".git/hooks/pre-commit").exists()
    assert (root / ".claw/state.db").read_text() == "runner state\n"
    assert sorted(os.listdir(root / "workspace/memory")) == []


def test_a_missing_write_directory_is_made_but_a_missing_protected_one_cannot_be(
    root: Path,
) -> None:
    shutil.rmtree(root / "workspace/memory")
    command = "echo x > workspace/memory/n.md; echo x > workspace/new.md; echo x > out/a.txt"
    out = run(context(root, MODES[0], write=("workspace/**", "out/**")), command)
    assert out == (
        "exit code 0\n"
        "bash: line 1: workspace/memory/n.md: No such file or directory\n"
        "bash: line 1: workspace/new.md: Read-only file system"
    )
    assert sorted(os.listdir(root / "workspace")) == []
    assert (root / "out/a.txt").read_text() == "x\n"


def test_a_write_directory_that_is_a_symlink_is_not_mounted(
    root: Path, mode: str, tmp_path: Path
) -> None:
    (root / "out").symlink_to(tmp_path / "outside")
    out = run(context(root, mode), "echo x > out/x.txt")
    assert out == "exit code 1\nbash: line 1: out/x.txt: No such file or directory"
    assert os.listdir(tmp_path / "outside") == []


def test_offered_skills_outside_the_project_are_readable_not_writable(
    root: Path, mode: str, tmp_path: Path
) -> None:
    skill = tmp_path / "home" / "skills" / "report"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: report\n---\nUse lists.\n")
    policy = Policy(root, protected=PROTECTED, skill_dirs=(str(skill),))
    box = dataclasses.replace(
        sandbox.for_job(policy, network=False), privileged=mode == "privileged"
    )
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 60, True, box)
    out = run(ctx, f"tail -1 {skill}/SKILL.md; echo x > {skill}/new.md; ls {skill}/..")
    assert out == (
        f"exit code 0\nUse lists.\nbash: line 1: {skill}/new.md: Read-only file system\nreport"
    )
    assert os.listdir(skill) == ["SKILL.md"]


def test_git_refs_index_and_config_cannot_change(root: Path, mode: str) -> None:
    """What a hook run's bash could do to the repository besides committing."""
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    (root / "app.py").write_text("x = 1\n")
    before = {p: (root / ".git" / p).read_bytes() for p in ("index", "config", "HEAD")}
    refs = subprocess.run([*git, "show-ref"], capture_output=True, text=True).stdout
    env = {**scrubbed_env(), **git_read_only(root)}  # what a hook run's tools get
    commands = [
        "git add app.py",
        "git update-ref refs/heads/evil HEAD",
        "git tag evil",
        "git config core.hooksPath /tmp",
        "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m evil",
        "git status --short",
    ]
    out = run(
        context(root, mode, write=("**",), env=env),
        "; ".join(f"{c} >/dev/null 2>&1; echo $?" for c in commands),
    )
    assert out == "exit code 0\n" + "\n".join(["128", "128", "128", "255", "128", "0"])
    assert {p: (root / ".git" / p).read_bytes() for p in before} == before
    assert subprocess.run([*git, "show-ref"], capture_output=True, text=True).stdout == refs


# --- the environment ----------------------------------------------------------------------------


def test_the_runner_environment_is_not_visible(
    root: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("CLAW_TEST_TOKEN", SECRET)
    command = (
        "cat /proc/$PPID/environ /proc/1/environ /proc/self/environ; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/task/*/environ; do cat $f; done; "
        "env; cat /proc/1/cmdline"
    )
    out = run(context(root, mode), command)
    assert SECRET not in out
    assert "PATH=" in out and "HOME=/tmp" in out  # environments were read: just not the key


def test_the_runner_processes_are_not_visible(root: Path, mode: str) -> None:
    out = run(context(root, mode), "cat /proc/[0-9]*/comm")
    seen = set(out.splitlines()[1:])
    assert {"cat"} <= seen <= {"bwrap", "cat"}  # its own (bash exec'd cat), none of the host's


@pytest.mark.skipif(not os.path.exists("/etc/shadow"), reason="no /etc/shadow here")
def test_what_only_root_may_read_in_etc_stays_hidden(root: Path, mode: str) -> None:
    """As root, the sandbox's nobody holds CAP_DAC_OVERRIDE: /etc's secrets are masked."""
    out = run(context(root, mode), "cat /etc/shadow; head -c 100 /etc/passwd | grep -c root")
    assert out == "exit code 0\ncat: /etc/shadow: Permission denied\n1"


def test_passed_variables_reach_the_command(root: Path, mode: str) -> None:
    env = scrubbed_env(["CLAW_PASSED"], {"PATH": os.defpath, "CLAW_PASSED": "yes"})
    assert run(context(root, mode, env=env), "echo $CLAW_PASSED $HOME $TMPDIR") == (
        "exit code 0\nyes /tmp /tmp"
    )


# --- the network --------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def accepted(sock: socket.socket) -> int:
    """How many connections reached the listener (the kernel completes them for it)."""
    sock.setblocking(False)
    count = 0
    while True:
        try:
            sock.accept()[0].close()
        except BlockingIOError:
            return count
        count += 1


def clients(port: int) -> dict[str, str]:
    """Ways to connect to 127.0.0.1:port, each printing what happened."""
    python = (
        "python3 -c \"import socket\ntry: socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=5); print('connected')\nexcept OSError as e: print(e.strerror)\""
    )
    ways = {
        "dev-tcp": f"echo hi > /dev/tcp/127.0.0.1/{port} && echo connected",
        "python": python,
        "curl": f"curl -sS --max-time 5 http://127.0.0.1:{port}/ 2>&1 | head -1",
    }
    return ways


EXPECTED_OFFLINE = {
    "dev-tcp": "bash: connect: Connection refused\nbash: line 1: /dev/tcp/127.0.0.1/PORT: "
    "Connection refused",
    "python": "Connection refused",
    "curl": "curl: (7) Failed to connect to 127.0.0.1 port PORT after N ms: "
    "Couldn't connect to server",
}


@pytest.mark.parametrize("way", ["dev-tcp", "python", "curl"])
def test_no_network_without_permission(
    root: Path, mode: str, listener: socket.socket, way: str
) -> None:
    program = {"python": "/usr/bin/python3", "curl": "/usr/bin/curl"}.get(way)
    if program and not os.path.exists(program):
        pytest.skip(f"{program} is not installed")
    port = listener.getsockname()[1]
    out = run(context(root, mode), clients(port)[way])
    shown = re.sub(r"after \d+ ms", "after N ms", out).replace(str(port), "PORT")
    assert shown.split("\n", 1)[1] == EXPECTED_OFFLINE[way]
    assert accepted(listener) == 0


def test_the_network_with_permission(root: Path, mode: str, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    out = run(context(root, mode, network=True), clients(port)["dev-tcp"])
    assert out == "exit code 0\nconnected"
    assert accepted(listener) == 1


# --- processes, time, output --------------------------------------------------------------------

BOMB = ":(){ :|:& };:"


def nobody_processes() -> int:
    return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == 65534)


def _uid(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="as root, the sandbox runs the command as nobody")
def test_a_fork_bomb_is_bounded(root: Path) -> None:
    before = nobody_processes()
    bomb = f"{BOMB}; sleep 3"
    out = run(context(root, "privileged", limits=Limits(processes=32)), bomb, timeout=10)
    assert "fork: retry: Resource temporarily unavailable" in out  # fork failed: the limit
    assert nobody_processes() <= before  # nothing of its own left (others may end meanwhile)


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="starts the sandbox as nobody: needs root to become it")
def test_a_fork_bomb_is_bounded_for_a_runner_that_is_not_root(tmp_path: Path) -> None:
    """How most people run claw: bwrap in a user namespace, the limit set inside it, where
    it counts only the sandbox's processes (nobody has some outside, which must not count)."""
    proj = Path("/tmp") / f"claw-sandbox-{uuid.uuid4().hex}"
    proj.mkdir(mode=0o755)
    os.chown(proj, 65534, 65534)
    idle = [_as_nobody(["sleep", "60"]) for _ in range(40)]
    try:
        box = Bubblewrap(proj, writable=("",), privileged=False, limits=Limits(processes=32))
        check = f"for i in $(seq 20); do sleep 5 & done; echo started; {BOMB}; sleep 3"
        with box.command(Command(("bash", "-c", check), scrubbed_env()), cwd=proj, seconds=3) as c:
            ran = bash.run(
                Command(("setpriv", *NOBODY, *c.argv), c.env, c.pass_fds), cwd=proj, timeout=10
            )
    finally:
        for p in idle:
            p.kill()
            p.wait()
        shutil.rmtree(proj)
    assert ran.output.startswith("started\n")
    assert "fork: retry: Resource temporarily unavailable" in ran.output


NOBODY = ("--reuid=65534", "--regid=65534", "--clear-groups")


def _as_nobody(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["setpriv", *NOBODY, *argv])


LATE = "sh -c 'cat out/fifo; echo late > out/late.txt'"


@pytest.mark.parametrize(
    "command",
    [
        f"setsid {LATE} &",
        f"nohup {LATE} >/dev/null 2>&1 &",
        f"({LATE} &) &",
        f"setsid {LATE} & sleep 100",  # ended by the time limit
    ],
    ids=["setsid", "nohup", "double-fork", "timeout"],
)
def test_nothing_started_outlives_the_call(root: Path, mode: str, command: str) -> None:
    """A background reader waits on a FIFO: while any is alive, a writer can open it."""
    (root / "out").mkdir()
    os.mkfifo(root / "out" / "fifo")
    run(context(root, mode), f"{command} sleep 0.2", timeout=2)
    with pytest.raises(OSError) as no_reader:
        os.close(os.open(root / "out" / "fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert no_reader.value.errno == errno.ENXIO
    assert not (root / "out" / "late.txt").exists()


def locked(path: Path) -> bool:
    """Whether another process holds a lock on `path` (asking does not disturb it)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


@pytest.mark.slow
def test_killing_claw_kills_what_its_command_started(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PROBE)
    (root / "out").mkdir()
    command = "setsid flock out/lock sleep 1000 & sleep 100"
    server.enqueue(tool_calls(call("bash", {"command": command})), text("done"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "claw_batch", "run", "probe"],
        cwd=root,
        env={**os.environ, **env_for(server)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert until(lambda: locked(root / "out" / "lock")), "the command never started"
        proc.kill()  # no cleanup of its own: the kernel ends the sandbox with its parent
    finally:
        proc.kill()
        proc.wait()
    assert until(lambda: not locked(root / "out" / "lock"))


def until(condition: Callable[[], bool], seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("command", ["yes", "head -c 1G /dev/zero", "cat /dev/urandom"])
def test_an_output_flood_is_cut_short(root: Path, mode: str, command: str) -> None:
    out = run(context(root, mode), command, timeout=600)
    head, note, _ = out.split("\n", 2)
    assert head == "killed: the output passed 64 MB (the command and its children were killed)"
    assert re.fullmatch(r"\[\.\.\. \d+ bytes cut \.\.\.\]", note)
    assert len(out.encode()) < 2 * bash.MAX_OUTPUT_BYTES


def test_limits_are_set_inside(root: Path, mode: str) -> None:
    limits = Limits(processes=50, file_bytes=10 * 1024, memory=64 << 20)
    out = run(context(root, mode, limits=limits), "ulimit -u -f -d -t -c", timeout=7)
    assert out == (
        "exit code 0\n"
        "max user processes                  (-u) 50\n"
        "file size                   (blocks, -f) 10\n"
        "data seg size               (kbytes, -d) 65536\n"
        "cpu time                   (seconds, -t) 7\n"
        "core file size              (blocks, -c) 0"
    )


def test_a_file_cannot_grow_past_the_limit(root: Path, mode: str) -> None:
    limits = Limits(file_bytes=100_000)
    out = run(context(root, mode, limits=limits), "head -c 200000 /dev/zero > out/big")
    assert out == (
        "exit code 153\n"
        "bash: line 1:     3 File size limit exceededhead -c 200000 /dev/zero > out/big"
    )
    assert (root / "out" / "big").stat().st_size == 100_000


# --- allow-list bypasses: the sandbox, not the pattern, is the boundary -------------------------

PATTERNS = ("sort *", "find *", "env *")


def test_allow_list_bypasses_stay_inside(
    root: Path, mode: str, listener: socket.socket, tmp_path: Path
) -> None:
    """Each command passes a pattern and runs a program or writes a file the pattern did
    not mean to allow; each also leaves a mark inside, which shows that it did run."""
    port = listener.getsockname()[1]
    outside = tmp_path / "outside"
    (root / "connect.py").write_text(  # as a dropped file could be
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print(e.strerror)\n"
    )
    (root / "out").mkdir()
    lines = [f"touch out/sort-ran {outside}/sort # {i:06d}\n" for i in range(20_000)]
    (root / "cmds.txt").write_text("".join(lines))
    ctx = context(root, mode, allow=PATTERNS)
    outputs = [
        run(ctx, f"env -S 'sh -c \"touch out/env-ran {outside}/env\"'"),
        run(ctx, "sort -S 1 --compress-program=sh cmds.txt"),
        run(ctx, f"find . -maxdepth 0 -fprint {outside}/find"),
        run(ctx, "find . -maxdepth 0 -fprint out/find-ran"),
        run(ctx, f"find . -maxdepth 0 -exec touch out/exec-ran {outside}/exec {{}} +"),
    ]
    assert sorted(os.listdir(root / "out")) == ["env-ran", "exec-ran", "find-ran", "sort-ran"]
    assert os.listdir(outside) == []
    codes = [out.split("\n", 1)[0] for out in outputs]
    assert codes == [f"exit code {n}" for n in (1, 2, 1, 0, 1)], outputs
    assert run(ctx, 'env -S "python3 connect.py"') == "exit code 0\nConnection refused"
    assert run(ctx, "find . -maxdepth 0 -exec python3 connect.py {} +") == (
        "exit code 0\nConnection refused"
    )
    assert accepted(listener) == 0


# --- no sandbox ---------------------------------------------------------------------------------


def test_bash_is_refused_when_bwrap_is_missing(root: Path) -> None:
    box = dataclasses.replace(
        sandbox.for_job(Policy(root), network=False), executable="/nonexistent/bwrap"
    )
    ctx = ToolContext(root, Policy(root), scrubbed_env(), time.monotonic() + 60, True, box)
    with pytest.raises(ToolError) as refused:
        run(ctx, "touch pwned")
    assert str(refused.value) == (
        "bash is refused: no sandbox can be started here (not installed: bwrap (package "
        "bubblewrap)); install bubblewrap, or let this task run bash unsandboxed with "
        "`sandbox: none`"
    )
    assert not (root / "pwned").exists()


def test_bash_is_refused_when_bwrap_cannot_make_namespaces(root: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    box = dataclasses.replace(sandbox.for_job(Policy(root), network=False), executable=str(fake))
    ctx = ToolContext(root, Policy(root), scrubbed_env(), time.monotonic() + 60, True, box)
    with pytest.raises(ToolError) as refused:
        run(ctx, "touch pwned")
    assert str(refused.value) == (
        f"bash is refused: no sandbox can be started here ({fake} failed: bwrap: No "
        "permissions to creating new namespace); install bubblewrap, or let this task run "
        "bash unsandboxed with `sandbox: none`"
    )


def test_write_directories() -> None:
    assert sandbox.write_dirs(
        ("out/**", "reports/*.md", "a/b/c.txt", "x/{a,b}/y", "docs/", "top.md"),
        ("workspace/reports/2026-11-22.md", "out/tickets/1.json"),
    ) == ("", "a/b", "docs", "out", "out/tickets", "reports", "workspace/reports", "x")
    assert sandbox.write_dirs(("**",), ()) == ("",)
    assert sandbox.write_dirs(("**/*.md",), ()) == ("",)
    assert sandbox.write_dirs((), ()) == ()


# --- through claw run ---------------------------------------------------------------------------

NOW = "2026-11-22T23:05:00+01:00"
PROBE = """
    version: 1
    model: fake-model
    tasks:
      probe:
        prompt: Look around.
        output: out/answer.md
        permissions: {bash: true, write: ["out/**"], env: [CLAW_PASSED]}
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def env_for(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": SECRET,
        "CLAW_PASSED": "passed",
        "CLAW_NOW": NOW,
    }


def transcript(root: Path) -> list[dict[str, object]]:
    (run_dir,) = (root / ".claw/runs").iterdir()
    return [json.loads(line) for line in (run_dir / "probe.jsonl").read_text().splitlines()]


def test_claw_run_confines_bash(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PROBE)
    port = server.base_url.split(":")[2].split("/")[0]
    host_tmp = Path("/tmp") / f"claw-sandbox-{uuid.uuid4().hex}"
    looks = (
        "{ cat /proc/*/environ; env; } > out/seen.txt 2>&1; "
        f"echo x > ../escape.txt; echo x > {host_tmp}; "
        f"echo GET > /dev/tcp/127.0.0.1/{port} || echo offline >> out/seen.txt"
    )
    server.enqueue(tool_calls(call("bash", {"command": looks})), text("done"))
    r = claw(root, "run", "probe", env=env_for(server))
    assert r.exit_code == 0, r.stderr
    seen = (root / "out/seen.txt").read_text()
    assert SECRET not in seen
    assert "CLAW_PASSED=passed" in seen and seen.endswith("offline\n")
    assert not (tmp_path / "escape.txt").exists() and not host_tmp.exists()
    assert len(server.requests) == 2  # the model's two calls: the command reached nothing
    assert "unsandboxed" not in [e["type"] for e in transcript(root)]


def test_claw_run_refuses_bash_without_a_sandbox(
    tmp_path: Path, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path / "p", PROBE)
    server.enqueue(tool_calls(call("bash", {"command": "touch out/pwned"})), text("done"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap (nor anything else)
    r = claw(root, "run", "probe", env=env_for(server))
    assert r.exit_code == 0, r.stderr
    (result,) = [e for e in transcript(root) if e["type"] == "tool_result"]
    assert result["content"] == (
        "error: bash is refused: no sandbox can be started here (not installed: bwrap "
        "(package bubblewrap), prlimit (util-linux)"
        + (", setpriv (util-linux), nsenter (util-linux), unshare (util-linux)" if ROOT else "")
        + "); install bubblewrap, or let this task run bash unsandboxed with `sandbox: none`"
    )
    assert not (root / "out/pwned").exists()


def test_sandbox_none_runs_unsandboxed_and_says_so(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PROBE.replace("output:", "sandbox: none\n        output:"))
    server.enqueue(tool_calls(call("bash", {"command": "echo x > ../outside.txt"})), text("done"))
    r = claw(root, "run", "probe", env=env_for(server))
    assert r.exit_code == 0, r.stderr
    events = [e for e in transcript(root) if e["type"] in ("unsandboxed", "tool_result")]
    assert [(e["type"], e.get("command")) for e in events] == [
        ("unsandboxed", "echo x > ../outside.txt"),
        ("tool_result", None),
    ]
    assert (tmp_path / "outside.txt").exists()  # what sandbox: none means
    shown = claw(root, "show", "last").stdout
    assert "! ran without a sandbox (the task says sandbox: none)" in shown


def test_sandbox_is_not_part_of_the_fingerprint(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PROBE)
    server.enqueue(text("done"))
    assert claw(root, "run", "probe", env=env_for(server)).exit_code == 0
    clawfile = root / "clawfile.yaml"
    clawfile.write_text(clawfile.read_text().replace("output:", "sandbox: none\n    output:"))
    r = claw(root, "run", "probe", "--json", env=env_for(server))
    assert [j["status"] for j in json.loads(r.stdout)["jobs"]] == ["up-to-date"]


# --- the clawfile -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("permissions", "message"),
    [
        (
            "{bash: true, env: [OPENAI_API_KEY]}",
            "clawfile.yaml:8: tasks.t.permissions.env[0]: OPENAI_API_KEY holds the API key of "
            "provider 'openai', which never reaches tool processes; pass only what the "
            "commands need",
        ),
        (
            "{bash: true, env: [PATH, LOCAL_KEY]}",
            "clawfile.yaml:8: tasks.t.permissions.env[1]: LOCAL_KEY holds the API key of "
            "provider 'local', which never reaches tool processes; pass only what the "
            "commands need",
        ),
        (
            "{bash: true, env: [sk-abcdef0123456789abcdef]}",
            "clawfile.yaml:8: tasks.t.permissions.env[0]: this looks like a secret ('sk-…'), "
            "not the name of an environment variable; list the names of variables for tool "
            "processes, e.g. env: [GITHUB_TOKEN]",
        ),
        (
            "{bash: true, env: [MY-VAR]}",
            "clawfile.yaml:8: tasks.t.permissions.env[0]: 'MY-VAR' is not the name of an "
            "environment variable (letters, digits and '_', not starting with a digit)",
        ),
    ],
)
def test_permissions_env_is_checked(tmp_path: Path, permissions: str, message: str) -> None:
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        providers:
          local: {{base_url: "http://127.0.0.1:1/v1", api_key_env: LOCAL_KEY}}
        tasks:
          t:
            prompt: hi
            model: local/m
            permissions: {permissions}
        """,
    )
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (2, f"claw: {message}\n")


def test_sandbox_key_is_checked(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: hi, sandbox: nope}
        """,
    )
    r = claw(root, "validate")
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: clawfile.yaml:3: tasks.t.sandbox: expected 'bubblewrap' or 'none', got 'nope'\n"
    )


def test_a_watch_task_does_not_take_sandbox_none_from_defaults(tmp_path: Path) -> None:
    from claw_batch.clawfile.load import load_project

    root = make_project(
        tmp_path / "p",
        """
        version: 1
        defaults: {sandbox: none}
        tasks:
          plain: {prompt: "x {{ task }}"}
          watched: {prompt: "y {{ item.name }}", watch: ["in/*.txt"]}
        """,
    )
    tasks = load_project(root, None).config.tasks
    assert (tasks["plain"].sandbox, tasks["watched"].sandbox) == ("none", "bubblewrap")
