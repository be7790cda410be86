"""What one sandboxed bash call may use of memory and disk (issue 14): real bubblewrap, real
allocations and writes, through the bash tool and through `claw run` with `limits:`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import AS_RUNNER, RUNNER, claw, make_project, runner_env, runner_python

from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.sandbox.bubblewrap import Limits
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

ROOT = os.geteuid() == 0
MODES = ["privileged", "userns"] if ROOT else ["userns"]
UNAVAILABLE = sandbox.unavailable(ROOT)
if UNAVAILABLE and not os.environ.get("CI"):  # CI installs bubblewrap: there it must work
    pytest.skip(f"no sandbox here: {UNAVAILABLE}", allow_module_level=True)

pytestmark = pytest.mark.timeout(120)
MB = 1 << 20


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir(mode=0o755)
    return proj.resolve()


def run(root: Path, mode: str, command: str, limits: Limits) -> str:
    policy = Policy(root, write_globs=("out/**",))
    box = dataclasses.replace(
        sandbox.for_job(policy, network=False), privileged=mode == "privileged", limits=limits
    )
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 90, True, box)
    return TOOLS["bash"].invoke(ctx, json.dumps({"command": command, "timeout": 60}))


def test_one_allocation_past_the_memory_limit_is_refused(root: Path, mode: str) -> None:
    """RLIMIT_DATA: the kernel refuses it at once; the program says so."""
    command = "python3 -c 'bytearray(200 << 20)'"
    out = run(root, mode, command, Limits(memory=100 * MB))
    assert out == (
        "exit code 1\n"
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        "MemoryError"
    )


def test_processes_that_together_pass_the_memory_limit_are_stopped(root: Path, mode: str) -> None:
    """Each stays under its own RLIMIT_DATA; together they hold more than the limit."""
    hold = "python3 -c 'x = b\"x\" * (40 << 20); import time; time.sleep(60)'"
    command = f"for i in 1 2 3 4; do {hold} & done; wait"
    out = run(root, mode, command, Limits(memory=100 * MB))
    assert re.fullmatch(
        r"killed: its processes held \d+(\.\d)?M of memory, more than limits\.memory \(100M\) "
        r"\(the command and its children were killed\)\n\(no output\)",
        out,
    ), out


def test_writing_past_the_disk_limit_is_stopped(root: Path, mode: str) -> None:
    command = "for i in 1 2 3 4; do head -c 40M /dev/zero > out/$i; done; sleep 60"
    out = run(root, mode, command, Limits(disk=64 * MB))
    assert re.fullmatch(
        r"killed: the write directories' filesystem lost \d+(\.\d)?M of free space during the "
        r"call(, counting \d+(\.\d)?K for each file it made \(\d+\))?, more than limits\.disk "
        r"\(64M\) \(the command and its children were killed\)\n\(no output\)",
        out,
    ), out


def test_within_the_limits_nothing_is_stopped(root: Path, mode: str) -> None:
    command = "head -c 10M /dev/zero > out/a; python3 -c 'x = b\"x\" * (20 << 20)'; echo done"
    assert run(root, mode, command, Limits(memory=200 * MB, disk=64 * MB)) == "exit code 0\ndone"


KILLED_AT_100M = (
    r"killed: its processes held \d+(\.\d)?M of memory, more than limits\.memory \(100M\) "
    r"\(the command and its children were killed\)\n\(no output\)"
)
HOLD_MEMFD = """python3 -c '
import os, time
fd = os.memfd_create("held")
for _ in range(300):
    os.write(fd, bytes(1 << 20))
time.sleep(60)
'"""


def test_memory_files_count_against_the_memory_limit(root: Path, mode: str) -> None:
    """A memfd's pages are in no process's resident size and not in RLIMIT_DATA."""
    out = run(root, mode, HOLD_MEMFD, Limits(memory=100 * MB))
    assert re.fullmatch(KILLED_AT_100M, out), out


SHARE_MEMFD = """python3 -c '
import mmap, os, time
size = 50 << 20
fd = os.memfd_create("shared")
os.ftruncate(fd, size)
view = mmap.mmap(fd, size)
for at in range(0, size, 1 << 20):
    view[at : at + (1 << 20)] = bytes(1 << 20)
child = os.fork()
sum(view[at] for at in range(0, size, 4096))  # each process maps all of it
time.sleep(1.5)
if child:
    os.waitpid(child, 0)
    print("done")
'"""


def test_a_memory_file_counts_once_however_many_processes_hold_and_map_it(
    root: Path, mode: str
) -> None:
    """50M held and mapped by two processes: 50M, not 100M (held twice) nor 150M (held
    twice and mapped twice), which would pass the 100M limit."""
    out = run(root, mode, SHARE_MEMFD, Limits(memory=100 * MB))
    assert out == "exit code 0\ndone"


SYSV = """python3 - <<'EOF'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
libc.shmdt.argtypes = [ctypes.c_void_p]
views = []
for _ in range(SEGMENTS):
    view = libc.shmat(libc.shmget(0, 16 << 20, 0o1600), None, 0)
    ctypes.memset(view, 1, 16 << 20)
    views.append(view)
if DETACH:
    for view in views:
        libc.shmdt(view)
child = os.fork()
for view in [] if DETACH else views:  # each process touches every page of each segment
    sum(ctypes.string_at(view + at, 1)[0] for at in range(0, 16 << 20, 4096))
time.sleep(SLEEP)
if child:
    os.waitpid(child, 0)
    print("done")
EOF"""


def sysv(segments: int, *, detach: bool, sleep: float) -> str:
    """SysV segments of 16M (the most the sandbox may make), filled, kept attached by a
    process and its child or detached, then a sleep."""
    values = {"SEGMENTS": str(segments), "DETACH": str(detach), "SLEEP": str(sleep)}
    return re.sub("|".join(values), lambda m: values[m[0]], SYSV)


def test_detached_sysv_segments_count_against_the_memory_limit(root: Path, mode: str) -> None:
    """No process holds them; they last as long as the sandbox's IPC namespace."""
    out = run(root, mode, sysv(8, detach=True, sleep=60), Limits(memory=100 * MB))
    assert re.fullmatch(KILLED_AT_100M, out), out


def test_an_attached_sysv_segment_counts_once(root: Path, mode: str) -> None:
    """48M of segments, mapped by two processes: 48M, not 96M (as a segment and as the
    processes' mappings), which would pass the 100M limit with the processes themselves."""
    out = run(root, mode, sysv(3, detach=False, sleep=1.5), Limits(memory=100 * MB))
    assert out == "exit code 0\ndone"


def test_files_in_tmp_and_dev_shm_count_against_the_memory_limit(root: Path, mode: str) -> None:
    """Both are memory, held by no process once written."""
    command = "head -c 60M /dev/zero > /tmp/a; head -c 50M /dev/zero > /dev/shm/b; sleep 60"
    out = run(root, mode, command, Limits(memory=100 * MB))
    assert re.fullmatch(KILLED_AT_100M, out), out


def test_empty_files_in_tmp_count_against_the_memory_limit(root: Path, mode: str) -> None:
    """An empty file takes no block of /tmp's size, but about 1K of kernel memory: /tmp
    holds millions of them."""
    make = 'python3 -c \'for i in range(150_000): open(f"/tmp/{i}", "w").close()\''
    out = run(root, mode, f"{make}; sleep 60", Limits(memory=100 * MB))
    assert re.fullmatch(KILLED_AT_100M, out), out


def test_dev_is_read_only_but_for_a_dev_shm_of_a_fixed_size(root: Path, mode: str) -> None:
    """bwrap's /dev is a tmpfs of no size, which a runner that is not root owns."""
    command = (
        "echo x > /dev/null && touch /dev/x; head -c 100M /dev/zero > /dev/shm/x; du -m /dev/shm/x"
    )
    out = run(root, mode, command, Limits())
    assert out == (
        "exit code 0\n"
        "touch: cannot touch '/dev/x': Read-only file system\n"
        "head: error writing 'standard output': No space left on device\n"
        "64\t/dev/shm/x"
    )


def test_a_disk_write_that_ends_before_a_check_is_still_stopped(root: Path, mode: str) -> None:
    """A write of 64M is over in a few hundredths of a second, often before the first check
    (on a loaded machine a check may see it in flight, or between the write and the echo):
    the check made once the call has ended still sees it, and says that what it wrote stays.
    (fallocate, which takes any amount at once, is refused in the sandbox: see setid.)"""
    out = run(root, mode, "head -c 64M /dev/zero > out/f; echo made", Limits(disk=16 * MB))
    assert re.fullmatch(
        r"killed: the write directories' filesystem lost \d+(\.\d)?M of free space during the "
        r"call(, counting \d+(\.\d)?K for each file it made \(\d+\))?, more than limits\.disk "
        r"\(16M\)"
        r"( \(the command had ended, exit code 0, before a check saw it; what it wrote stays\)"
        r"\nmade| \(the command and its children were killed\)\n(\(no output\)|made))(\n.*)?",
        out,
        re.DOTALL,
    ), out


LINKS_AND_PIPES = """python3 -c '
import os
for i in range(20000):
    os.symlink("x", f"out/l{i}")
    os.mkfifo(f"out/p{i}")
'; sleep 60"""


def test_files_that_take_no_block_count_against_the_disk_limit(root: Path, mode: str) -> None:
    """A symlink or a named pipe takes an inode and no block (nor does an empty file): each
    counts as its share of the filesystem (at least 4K), so 40,000 pass 64M."""
    out = run(root, mode, LINKS_AND_PIPES, Limits(disk=64 * MB))
    assert re.fullmatch(
        r"killed: the write directories' filesystem lost \d+(\.\d)?M of free space during the "
        r"call, counting \d+(\.\d)?K for each file it made \(\d+\), more than limits\.disk \(64M\) "
        r"\(the command and its children were killed\)\n\(no output\)",
        out,
    ), out


RUN_AS_RUNNER = """
import dataclasses, json, sys, time
from pathlib import Path
from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

root = Path(sys.argv[1])
policy = Policy(root, write_globs=("out/**",))
limits = sandbox.Limits(memory=100 << 20)
box = dataclasses.replace(sandbox.for_job(policy, network=False), limits=limits)
ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 90, True, box)
print(TOOLS["bash"].invoke(ctx, json.dumps({"command": sys.argv[2], "timeout": 60})))
"""


HOLD_IN_PROCESSES = "python3 -c 'x = b\"x\" * (40 << 20); import time; time.sleep(60)'"


@pytest.mark.skipif(not ROOT, reason="runs the bash tool as another user: needs root")
@pytest.mark.parametrize(
    "command",
    [
        f"for i in 1 2 3 4; do {HOLD_IN_PROCESSES} & done; wait",
        HOLD_MEMFD,
        sysv(8, detach=True, sleep=60),
    ],
    ids=["processes", "memfd", "sysv"],
)
def test_a_runner_that_is_not_root_is_watched_too(command: str) -> None:
    """Its claw reads the sandbox's /proc (and the memory files its processes hold) as the
    owner of the sandbox's user namespace, and the SysV segments from inside it."""
    proj = Path("/tmp") / f"claw-ceilings-{secrets.token_hex(8)}"
    proj.mkdir(mode=0o755)
    try:
        os.chown(proj, RUNNER, RUNNER)
        env = {**runner_env(), "HOME": str(proj)}
        python = runner_python(env)
        if python is None:
            pytest.skip("no interpreter another user may start imports this claw")
        ran = subprocess.run(
            [*AS_RUNNER, python, "-c", RUN_AS_RUNNER, str(proj), command],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        shutil.rmtree(proj, ignore_errors=True)
    assert re.fullmatch(
        r"killed: its processes held \d+(\.\d)?M of memory, more than limits\.memory \(100M\) "
        r"\(the command and its children were killed\)\n\(no output\)\n",
        ran.stdout,
    ), (ran.stdout, ran.stderr)


# --- limits: in the clawfile --------------------------------------------------------------------

CLAWFILE = """
    version: 1
    model: fake-model
    defaults:
      limits: {memory: 1G}
    tasks:
      probe:
        prompt: Look around.
        permissions: {bash: true}
        limits: LIMITS
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def env_for(server: FakeOpenAI) -> dict[str, str]:
    now = "2026-11-22T23:05:00+01:00"
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": now}


def tool_results(root: Path) -> list[str]:
    (run_dir,) = (root / ".claw/runs").iterdir()
    lines = (run_dir / "probe.jsonl").read_text().splitlines()
    return [str(e["content"]) for e in map(json.loads, lines) if e["type"] == "tool_result"]


@pytest.mark.parametrize(
    ("limits", "data_kb"),
    [("{memory: 512M, disk: 2G}", 512 * 1024), ("{disk: 2G}", 4 * 1024 * 1024)],
    ids=["task", "default"],
)
def test_the_task_limits_reach_the_sandbox(
    tmp_path: Path, server: FakeOpenAI, limits: str, data_kb: int
) -> None:
    """A task's `limits:` replaces the one of `defaults:`, key by key left at claw's own."""
    root = make_project(tmp_path / "p", CLAWFILE.replace("LIMITS", limits))
    server.enqueue(tool_calls(call("bash", {"command": "ulimit -d"})), text("done"))
    assert claw(root, "run", "probe", env=env_for(server)).exit_code == 0
    assert tool_results(root) == [f"exit code 0\n{data_kb}"]


def test_limits_are_not_part_of_the_fingerprint(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", CLAWFILE.replace("LIMITS", "{memory: 512M}"))
    server.enqueue(text("done"))
    assert claw(root, "run", "probe", env=env_for(server)).exit_code == 0
    clawfile = root / "clawfile.yaml"
    clawfile.write_text(clawfile.read_text().replace("512M", "3G"))
    r = claw(root, "run", "probe", "--json", env=env_for(server))
    assert [j["status"] for j in json.loads(r.stdout)["jobs"]] == ["up-to-date"]


SIZE_ADVICE = "expected a size such as 512M or 2G (K, M, G, T: powers of 1024) or a number of bytes"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("{memory: lots}", f"tasks.probe.limits.memory: {SIZE_ADVICE}, got 'lots'"),
        ("{disk: 1.5}", f"tasks.probe.limits.disk: {SIZE_ADVICE}, got 1.5"),
        ("{memory: true}", f"tasks.probe.limits.memory: {SIZE_ADVICE}, got true"),
        ("{memory: 2 G}", f"tasks.probe.limits.memory: {SIZE_ADVICE}, got '2 G'"),
        ("{memory: 1e400}", f"tasks.probe.limits.memory: {SIZE_ADVICE}, got '1e400'"),
        (
            "{memory: 1.0e+400}",
            f"tasks.probe.limits.memory: {SIZE_ADVICE}, got inf",
        ),
        (
            "{disk: 512K}",
            "tasks.probe.limits.disk: '512K' is out of range: a size from 1M to 1024T",
        ),
        (
            "{memory: 99999999999999999999999T}",
            "tasks.probe.limits.memory: '99999999999999999999999T' is out of range: a size "
            "from 1M to 1024T",
        ),
        ("{disk: 0}", "tasks.probe.limits.disk: 0 is out of range: a size from 1M to 1024T"),
        ("{cpu: 2}", "tasks.probe.limits: unknown key 'cpu' (valid keys: memory, disk)"),
        ("4G", "tasks.probe.limits: expected a mapping, got '4G'"),
    ],
)
def test_limits_are_checked(tmp_path: Path, limits: str, message: str) -> None:
    root = make_project(tmp_path / "p", CLAWFILE.replace("LIMITS", limits))
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (2, f"claw: clawfile.yaml:9: {message}\n")


def test_sizes_are_read_in_powers_of_1024(tmp_path: Path) -> None:
    from claw_batch.clawfile.load import load_project

    root = make_project(tmp_path / "p", CLAWFILE.replace("LIMITS", "{memory: 1.5G, disk: 1048576}"))
    limits = load_project(root, None).config.tasks["probe"].limits
    assert (limits.memory, limits.disk) == (3 << 29, 1 << 20)
