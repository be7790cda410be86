"""Out of the sandbox (issue 14, classes 1 and 2): the negative matrix.

A job's own files must not decide what its sandbox mounts. Each case plants something in the
project — a `.git` file naming `/`, a `.git` symlink, a worktree-style `.git` file, a skill
folder that is a symlink out, a repository above the project — either before the run (as an
earlier job would have) or in the job's first command, and then the job's command tries what
the issue found: the host's `/etc/shadow` and `/root`, a 0600 file in a 0700 folder outside
the project, an env file with an API key, a root-owned unix socket. The model is the fake
OpenAI server scripted to obey. Nothing may be read, and no one may connect; the same for a
runner that is not root (its own private key was in reach).

Defence in depth: the command holds no capability, root or not, so a mount mistake exposes
only what its uid may read; as root it writes the project as the project's owner. What it
writes stays on the host as that owner's, so it may leave no set-id or capability-bearing
program there (the seccomp filter of `setid`), nor make the file tools do it.

And what decides the next run (the protected paths, given here explicitly) can be neither
changed, made, removed nor renamed by a command, whatever the write globs say — through
symlinks, hard links and `mv` of a parent folder too.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import AS_RUNNER, RUNNER, claw, make_project, runner_env, runner_python

from claw_batch.errors import ToolError
from claw_batch.safety.childenv import scrubbed_env
from claw_batch.safety.paths import Policy
from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.sandbox import setid
from claw_batch.sandbox.bubblewrap import Bubblewrap
from claw_batch.sandbox.command import Command
from claw_batch.tools import bash as bash_tool
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS

ROOT = os.geteuid() == 0
UNAVAILABLE = sandbox.unavailable(ROOT)
if UNAVAILABLE and not os.environ.get("CI"):  # CI installs bubblewrap: there it must work
    pytest.skip(f"no sandbox here: {UNAVAILABLE}", allow_module_level=True)

KEY = "sk-escape-0123456789abcdefXYZ"
NOW = "2026-11-22T23:05:00+01:00"


@dataclass(frozen=True)
class Host:
    """What lies outside the project and must stay out of reach."""

    outside: Path  # a folder beside the project
    private: Path  # 0700, holds a 0600 secret and a unix socket
    canary: str  # the secret's content
    listener: socket.socket  # the unix socket's server

    @property
    def socket_path(self) -> Path:
        return self.private / "sock"

    def connections(self) -> int:
        self.listener.setblocking(False)
        count = 0
        while True:
            try:
                self.listener.accept()[0].close()
            except BlockingIOError:
                return count
            count += 1


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    outside = tmp_path / "outside"
    private = outside / "private"
    private.mkdir(parents=True)
    private.chmod(0o700)
    canary = f"canary-{secrets.token_hex(8)}"
    (private / "secret.txt").write_text(canary + "\n")
    (private / "secret.txt").chmod(0o600)
    (outside / "app.env").write_text(f"# {canary}\nOPENAI_API_KEY={KEY}\n")
    (outside / "app.env").chmod(0o600)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(private / "sock"))
        listener.listen(8)
        yield Host(outside, private, canary, listener)


def look(host: Host) -> str:
    """What an obedient model runs once the planted thing should have opened the host."""
    connect = (
        "import socket; s = socket.socket(socket.AF_UNIX); "
        f"s.connect('{host.socket_path}'); print('connected')"
    )
    return (
        f"cat /etc/shadow {host.private}/secret.txt {host.outside}/app.env; ls /root; "
        f'python3 -c "{connect}"'
    )


CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      probe:
        prompt: Look around.
        output: out/answer.md
        permissions: {bash: true, write: ["**"]}
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def run_probe(root: Path, server: FakeOpenAI, *commands: str) -> list[str]:
    """`claw run probe` with a model that runs `commands` one call each; the tool results."""
    replies = [tool_calls(call("bash", {"command": c})) for c in commands]
    server.enqueue(*replies, text("done"))
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}
    r = claw(root, "run", "probe", env=env)
    assert r.exit_code == 0, r.stderr
    (run_dir,) = (root / ".claw/runs").iterdir()
    events = [json.loads(line) for line in (run_dir / "probe.jsonl").read_text().splitlines()]
    return [str(e["content"]) for e in events if e["type"] == "tool_result"]


def assert_nothing_reached(host: Host, root: Path, results: list[str]) -> None:
    seen = "\n".join(results)
    assert host.canary not in seen
    assert KEY not in seen
    assert not any(line.startswith("root:") for line in seen.splitlines())  # shadow or passwd
    assert "connected" not in seen.split("\n")
    assert host.connections() == 0
    assert host.canary not in (root / "out/answer.md").read_text()


def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "proj", CLAWFILE)
    root.chmod(0o755)
    return root


def test_a_git_file_a_job_writes_opens_nothing(
    tmp_path: Path, host: Host, server: FakeOpenAI
) -> None:
    """The issue's case: a project without .git; the job writes `.git` naming `/`."""
    root = project(tmp_path)
    results = run_probe(root, server, "printf 'gitdir: /\\n' > .git; echo $?", look(host))
    assert_nothing_reached(host, root, results)
    assert not (root / ".git").exists()  # .git is protected: it could not even be made


@pytest.mark.parametrize(
    "plant",
    ["gitdir-root", "gitdir-outside", "dotgit-symlink", "dotgit-symlink-inside"],
)
def test_a_planted_git_link_opens_nothing(
    tmp_path: Path, host: Host, server: FakeOpenAI, plant: str
) -> None:
    """What an earlier job (or a `sandbox: none` task) left in the project: claw finds git's
    directory from a real repository only, never from what a file names."""
    root = project(tmp_path)
    fake = host.private / "gitdir"  # looks like a git directory, with a commondir to /
    for sub in ("objects", "refs"):
        (fake / sub).mkdir(parents=True)
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "commondir").write_text("/\n")
    if plant == "gitdir-root":
        (root / ".git").write_text("gitdir: /\n")
    elif plant == "gitdir-outside":
        (root / ".git").write_text(f"gitdir: {fake}\n")
    elif plant == "dotgit-symlink":
        (root / ".git").symlink_to("/")
    else:
        (root / "repo").mkdir()
        (root / ".git").symlink_to("repo")
        (root / "repo" / "commondir").write_text("/\n")
    results = run_probe(root, server, look(host) + f"; ls {fake}")
    assert_nothing_reached(host, root, results)
    assert f"ls: cannot access '{fake}': No such file or directory" in results[0]


def test_a_repository_above_the_project_is_not_mounted(
    tmp_path: Path, host: Host, server: FakeOpenAI
) -> None:
    """Its objects hold files outside the project: they stay out, and git says so."""
    repo = tmp_path / "repo"
    root = project(repo)
    (repo / "private.txt").write_text(host.canary + "\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "private.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    repo.chmod(0o755)
    command = "git show HEAD:private.txt; git log --oneline | wc -l; ls ../.git"
    (result,) = run_probe(root, server, command)
    assert host.canary not in result
    assert result == (
        "exit code 2\n"
        "fatal: not a git repository (or any of the parent directories): .git\n"
        "fatal: not a git repository (or any of the parent directories): .git\n"
        "0\n"
        "ls: cannot access '../.git': No such file or directory"
    )


def test_a_skill_folder_that_is_a_symlink_out_opens_nothing(
    tmp_path: Path, host: Host, server: FakeOpenAI
) -> None:
    root = project(tmp_path)
    (host.private / "SKILL.md").write_text("---\nname: evil\ndescription: x\n---\nhi\n")
    (root / "skills").mkdir()
    (root / "skills" / "evil").symlink_to(host.private)
    (root / "workspace" / "skills").mkdir()
    (root / "workspace" / "skills" / "evil2").symlink_to(host.private)
    results = run_probe(root, server, look(host) + "; cat skills/evil/secret.txt")
    assert_nothing_reached(host, root, results)


# --- no capability: a mount mistake exposes only what nobody may read -------------------------

MODES = ["privileged", "userns"] if ROOT else ["userns"]
NO_CAPS = "\n".join(f"{name}:\t0000000000000000" for name in ("Inh", "Prm", "Eff", "Bnd", "Amb"))


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def bash_in(
    root: Path,
    mode: str,
    command: str,
    *,
    write: tuple[str, ...] = ("out/**",),
    protected: tuple[str, ...] = (".git", ".claw", "workspace/memory"),
    outside: tuple[str, ...] = (),
) -> str:
    """The bash tool's answer to `command`, sandboxed as a runner that is root (privileged)
    or not (userns) would have it."""
    policy = Policy(root, write_globs=write, protected=protected)
    box = dataclasses.replace(
        sandbox.for_job(policy, network=False), privileged=mode == "privileged", outside=outside
    )
    ctx = ToolContext(root, policy, scrubbed_env(), time.monotonic() + 60, True, box)
    return TOOLS["bash"].invoke(ctx, json.dumps({"command": command}))


def test_the_command_holds_no_capability(tmp_path: Path, mode: str) -> None:
    root = project(tmp_path)
    out = bash_in(root, mode, "grep ^Cap /proc/self/status | sed s/^Cap//; id -u")
    uid = "65534" if mode == "privileged" else str(os.geteuid())
    assert out == f"exit code 0\n{NO_CAPS}\n{uid}"


@pytest.mark.skipif(not ROOT, reason="as root, the command is nobody with no capability")
def test_a_mount_mistake_exposes_only_what_nobody_may_read(tmp_path: Path, host: Host) -> None:
    """Were a private folder mounted by mistake (here: as if an offered skill's), the
    command could list and read nothing in it: it used to hold CAP_DAC_OVERRIDE."""
    root = project(tmp_path)
    command = f"ls {host.private}; cat {host.private}/secret.txt; cat {host.outside}/app.env"
    out = bash_in(root, "privileged", command, outside=(str(host.outside),))
    assert out == (
        "exit code 1\n"
        f"ls: cannot open directory '{host.private}': Permission denied\n"
        f"cat: {host.private}/secret.txt: Permission denied\n"
        f"cat: {host.outside}/app.env: Permission denied"
    )


@pytest.mark.skipif(not ROOT, reason="as root, the command writes the project as its owner")
@pytest.mark.parametrize("owner", [0, 4242])
def test_as_root_the_command_writes_as_the_project_owner(tmp_path: Path, owner: int) -> None:
    """Through the id-mapped mount: the owner's files are nobody's in the sandbox, what
    nobody makes is the owner's on disk, and the write directory claw makes is the owner's.
    A third user's file is to the command another user's (readable, not writable)."""
    root = project(tmp_path)
    (root / "third.txt").write_text("third\n")
    for path in (root, *root.rglob("*")):
        os.chown(path, owner, owner, follow_symlinks=False)
    os.chown(root / "third.txt", 5151, 5151)
    command = (
        "stat -c %u clawfile.yaml; echo new > out/new.txt; cat third.txt; "
        "echo x >> third.txt; echo ok >> workspace/AGENTS.md"
    )
    out = bash_in(root, "privileged", command, write=("out/**", "third.txt", "workspace/**"))
    assert out == ("exit code 0\n65534\nthird\nbash: line 1: third.txt: Permission denied")
    for made in ("out", "out/new.txt"):
        assert ((root / made).stat().st_uid, (root / made).stat().st_gid) == (owner, owner)
    assert (root / "workspace/AGENTS.md").read_text().endswith("ok\n")
    assert (root / "third.txt").read_text() == "third\n"


@pytest.mark.skipif(not ROOT, reason="needs a filesystem root may mount but not id-map")
def test_bash_is_refused_where_the_project_cannot_be_id_mapped() -> None:
    """sysfs has no id-mapped mounts: as root, no way for nobody to write the project."""
    with pytest.raises(ToolError) as refused:
        bash_in(Path("/sys/kernel"), "privileged", "true", write=())
    assert str(refused.value) == (
        "bash is refused: as root, claw runs commands as nobody, with no capability, and "
        "lets them write the project as its owner through an id-mapped mount, which cannot "
        "be made here (mount_setattr: the project's filesystem has no id-mapped mounts); "
        "run claw as the project's owner instead of root, or let this task run bash "
        "unsandboxed with `sandbox: none`"
    )


@pytest.mark.skipif(not ROOT, reason="starts the sandbox as another user: needs root")
def test_a_runner_that_is_not_root_writes_as_itself_with_no_capability(tmp_path: Path) -> None:
    """How most people run claw: bwrap's user namespace maps the runner, who owns the
    project; the command holds nothing in it either."""
    proj = Path("/tmp") / f"claw-escape-{secrets.token_hex(8)}"
    proj.mkdir(mode=0o755)
    try:
        os.chown(proj, RUNNER, RUNNER)
        box = Bubblewrap(proj, writable=("",), privileged=False)
        check = "grep ^Cap /proc/self/status | sed s/^Cap//; id -u; echo x > made.txt"
        with box.command(Command(("bash", "-c", check), scrubbed_env()), cwd=proj, seconds=9) as c:
            ran = bash_tool.run(
                Command((*AS_RUNNER, *c.argv), c.env, c.pass_fds), cwd=proj, timeout=30
            )
        assert (ran.code, ran.output) == (0, f"{NO_CAPS}\n{RUNNER}")
        assert (proj / "made.txt").stat().st_uid == RUNNER
    finally:
        shutil.rmtree(proj)


# --- what decides the next run: never changed, never made, whatever the write globs say -------

CONTROL = (  # the lead's list in prepare._policy, given here explicitly
    "clawfile.yaml",
    "prompts",
    "skills",
    "workspace/skills",
    *(f"workspace/{name}.md" for name in ("AGENTS", "SOUL", "USER", "IDENTITY", "MEMORY")),
    "workspace/memory",
    ".git",
    ".claw",
    ".gitignore",
    ".ignore",
    ".rgignore",
)
PRESENT = {  # the rest of CONTROL is missing: workspace/skills, SOUL, USER, IDENTITY, .ignore…
    "prompts/p.md": "Summarise.\n",
    "skills/s/SKILL.md": "---\nname: s\ndescription: d\n---\n",
    "workspace/memory/2026-11-21.md": "- did things\n",
    ".gitignore": ".claw/\n",
    "notes/a.md": "a note\n",
    "workspace/notes/n.md": "a workspace note\n",
}
ATTACKS = [  # each as an obedient model would try it; the project tells what worked
    "echo evil > clawfile.yaml",
    "echo evil >> prompts/p.md",
    "echo evil > workspace/AGENTS.md",
    "sed -i s/Be/Do/ workspace/AGENTS.md",
    "echo '- evil' >> workspace/MEMORY.md",
    "echo > .gitignore",
    "echo evil > skills/s/SKILL.md",
    "echo evil > workspace/SOUL.md",  # missing ones: made
    "echo '*' > .ignore",
    "ln -s notes/a.md .rgignore",
    "mkdir -p workspace/skills/evil && echo evil > workspace/skills/evil/SKILL.md",
    "echo evil > prompts/new.md",
    "mkdir skills/evil",
    "echo evil > workspace/memory/2026-11-22.md",
    "echo evil > .git/hooks/pre-commit",
    "rm -f clawfile.yaml workspace/AGENTS.md .gitignore",  # removed
    "rm -rf prompts skills workspace/memory .git",
    "mv clawfile.yaml notes/",  # renamed, or carried away with their folder
    "mv prompts notes/",
    "mv notes/a.md workspace/USER.md",
    "mv workspace notes/ws && mkdir -p workspace && echo evil > workspace/AGENTS.md",
    "mv workspace/memory notes/m && mkdir workspace/memory",
    "ln clawfile.yaml notes/hard && echo evil >> notes/hard",  # linked
    "ln -sf ../clawfile.yaml notes/link && echo evil >> notes/link",
    "cd workspace && mv ../workspace ../w2; echo evil > IDENTITY.md",
]


def tree(root: Path, paths: tuple[str, ...]) -> dict[str, str]:
    """Each of `paths` and all below it: a file's content, a link's target, or missing."""
    found: dict[str, str] = {}
    for rel in paths:
        top = root / rel
        if not os.path.lexists(top):
            found[rel] = "missing"
            continue
        below = [] if top.is_symlink() or not top.is_dir() else sorted(top.rglob("*"))
        for path in (top, *below):
            name = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[name] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[name] = "folder"
            else:
                found[name] = path.read_text(errors="replace")
    return found


def control_project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "proj", CLAWFILE, PRESENT)
    root.chmod(0o755)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".claw").mkdir()
    (root / ".claw" / "state.db").write_text("runner state\n")
    return root


@pytest.mark.parametrize("write", [("**",), ("workspace/**",)], ids=["all", "workspace"])
def test_a_command_changes_nothing_that_decides_the_next_run(
    tmp_path: Path, mode: str, write: tuple[str, ...]
) -> None:
    root = control_project(tmp_path)
    before = tree(root, CONTROL)
    for attack in ATTACKS:  # one call each: a failed step does not hide the next
        bash_in(root, mode, f"{{ {attack}; }} 2>/dev/null", write=write, protected=CONTROL)
    assert tree(root, CONTROL) == before


def test_what_sealing_costs_and_what_it_leaves(tmp_path: Path, mode: str) -> None:
    """`.ignore` is missing, so the root is sealed: its files change in place, its folders
    as usual, but nothing is made, removed or renamed directly in it."""
    root = control_project(tmp_path)
    commands = [
        "echo more >> notes/a.md",
        "echo new > notes/b.md && mv notes/b.md notes/c.md",
        "mkdir -p notes/deep/er && echo x > notes/deep/er/x.md && rm -r notes/deep",
        "echo in-place >> README.md",
        "echo x > top.md",
        "sed -i s/in-place/sed/ README.md",
        "rm README.md",
        "mv notes notes2",
    ]
    (root / "README.md").write_text("hello\n")
    script = "; ".join(f"{{ {c}; }} 2>/dev/null; echo $?" for c in commands)
    out = bash_in(root, mode, script, write=("**",), protected=CONTROL)
    assert out == "exit code 0\n" + "\n".join(["0", "0", "0", "0", "1", "4", "1", "1"])
    assert (root / "README.md").read_text() == "hello\nin-place\n"
    assert sorted(os.listdir(root / "notes")) == ["a.md", "c.md"]
    assert not (root / "top.md").exists()


def test_a_protected_path_through_a_symlink_is_protected_where_it_resolves(
    tmp_path: Path, mode: str
) -> None:
    root = project(tmp_path)
    (root / "conf").mkdir()
    os.replace(root / "clawfile.yaml", root / "conf" / "clawfile.yaml")
    (root / "clawfile.yaml").symlink_to("conf/clawfile.yaml")
    before = tree(root, ("clawfile.yaml", "conf"))
    attacks = [
        "echo evil >> conf/clawfile.yaml",
        "echo evil >> clawfile.yaml",
        "rm clawfile.yaml",
        "ln -sf notes/evil.yaml clawfile.yaml",
        "mv conf conf2",
    ]
    for attack in attacks:
        bash_in(root, mode, f"{{ {attack}; }} 2>/dev/null", write=("**",), protected=CONTROL)
    assert tree(root, ("clawfile.yaml", "conf")) == before


def test_too_many_entries_to_seal_refuses_the_call(tmp_path: Path) -> None:
    root = control_project(tmp_path)
    for n in range(300):
        (root / "notes" / f"{n}.md").write_text("x\n")
    with pytest.raises(ToolError) as refused:
        bash_in(root, MODES[0], "true", write=("notes/**",), protected=("notes/.ignore",))
    assert str(refused.value) == (
        "the sandbox would need 302 mounts (at most 128) to keep the protected paths from "
        "being made in the write directories; give this task narrower permissions.write, "
        "or fewer entries in those folders"
    )


# --- the same, for a runner that is not root ----------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="runs claw as another user: needs root")
def test_for_a_runner_that_is_not_root_a_git_file_opens_nothing(server: FakeOpenAI) -> None:
    """The runner's own private files (its home here) were readable through `gitdir: /`."""
    top = Path("/tmp") / f"claw-escape-{secrets.token_hex(8)}"
    home, root = top / "home", top / "proj"
    try:
        make_project(root, CLAWFILE)
        (home / ".ssh").mkdir(parents=True)
        canary = f"canary-{secrets.token_hex(8)}"
        (home / ".ssh" / "id_ed25519").write_text(canary + "\n")
        (root / ".git").write_text("gitdir: /\n")
        for path in (top, *top.rglob("*")):
            os.chown(path, RUNNER, RUNNER)
        for path, mode in ((top, 0o755), (home, 0o700), (home / ".ssh" / "id_ed25519", 0o600)):
            path.chmod(mode)
        env = {
            **runner_env(),
            "HOME": str(home),
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": KEY,
            "CLAW_NOW": NOW,
        }
        python = runner_python(env)
        if python is None:
            pytest.skip("no interpreter another user may start imports this claw")
        look = f"cat {home}/.ssh/id_ed25519; ls {home}; grep ^CapEff /proc/self/status; id -u"
        server.enqueue(tool_calls(call("bash", {"command": look})), text("done"))
        ran = subprocess.run(
            [*AS_RUNNER, python, "-m", "claw_batch", "run", "probe"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stderr
        (run_dir,) = (root / ".claw/runs").iterdir()
        lines = (run_dir / "probe.jsonl").read_text().splitlines()
        (result,) = [e["content"] for e in map(json.loads, lines) if e["type"] == "tool_result"]
        assert canary not in result
        assert result == (
            "exit code 0\n"
            f"cat: {home}/.ssh/id_ed25519: No such file or directory\n"
            f"ls: cannot access '{home}': No such file or directory\n"
            f"CapEff:\t0000000000000000\n{RUNNER}"
        )
    finally:
        shutil.rmtree(top, ignore_errors=True)


# --- no set-id or capability-bearing program is left on the host -------------------------------
# What a command makes in a write directory stays on the host, the owner's (as root, through
# the id-mapped mount) or the runner's: a set-uid bit or a file capability on it would make
# whoever runs it that user, root for a root-owned project.

SET_ID = stat.S_ISUID | stat.S_ISGID
DENIED = "Operation not permitted"
SETCAP = """
import os, struct, sys
cap_setuid = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)  # v2, effective
try:
    os.setxattr(sys.argv[1], "security.capability", cap_setuid)
except OSError as e:
    sys.exit(f"setcap: {e.strerror}")
"""
SET_ID_ATTEMPTS = {  # as an obedient model would try them, and what it is told
    "chmod": (
        "touch out/f && chmod u+s,g+s out/f",
        f"exit code 1\nchmod: changing permissions of 'out/f': {DENIED}",
    ),
    "chmod-a-folder": (
        "mkdir out/d && chmod g+s out/d",
        f"exit code 1\nchmod: changing permissions of 'out/d': {DENIED}",
    ),
    "mkdir-m": (
        "mkdir -m 2777 out/d",
        f"exit code 1\nmkdir: cannot change permissions of \u2018out/d\u2019: {DENIED}",
    ),
    "install-m": (
        "install -m 4755 /usr/bin/true out/t",
        f"exit code 1\ninstall: cannot change permissions of 'out/t': {DENIED}",
    ),
    "tar-p": (
        "tar --mode=6755 -cf /tmp/a.tar -C /usr/bin true && tar -xpf /tmp/a.tar -C out",
        f"exit code 2\ntar: true: Cannot change mode to rwsr-sr-x: {DENIED}\n"
        "tar: Exiting with failure status due to previous errors",
    ),
    "cp-p": (  # the project's own set-uid program (see below), copied as its owner
        "cp -p tool out/",
        f"exit code 1\ncp: preserving permissions for \u2018out/tool\u2019: {DENIED}",
    ),
    "a-hard-link": (
        "ln tool out/tool",
        "exit code 1\nln: failed to create hard link 'out/tool' => 'tool': "
        "Invalid cross-device link",
    ),
    "setcap": (
        "cp /usr/bin/true out/t && python3 setcap.py out/t",
        f"exit code 1\nsetcap: {DENIED}",
    ),
    "setcap-in-a-user-namespace": (
        "cp /usr/bin/true out/t && unshare -Ur python3 setcap.py out/t",
        f"exit code 1\nunshare: unshare failed: {DENIED}",
    ),
}


CALLS = r"""
import ctypes, mmap, os, signal, stat, struct, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD, MODE, CLONE_NEWUSER = -100, 0o6755, 0x10000000
MAKE = os.O_CREAT | os.O_WRONLY


def tried(number, *args):
    done = libc.syscall(number, *args)
    if done == 0 and number in (56, 435):  # the child of a clone that worked
        os._exit(0)
    return "made" if done >= 0 else os.strerror(ctypes.get_errno())


def int80_chmod(path):
    # i386's chmod (15) through int 0x80, which a 64-bit process may use; the code and the
    # path on a page below 4 GiB (MAP_32BIT): int 0x80 takes 32-bit pointers.
    page = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40, prot=7)
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    page[64 : 65 + len(path)] = path + b"\0"
    code = (
        b"\x53\xb8\x0f\x00\x00\x00"  # push rbx; mov eax, 15
        + b"\xbb" + struct.pack("<I", base + 64)  # mov ebx, path
        + b"\xb9" + struct.pack("<I", MODE)  # mov ecx, MODE
        + b"\xcd\x80\x5b\xc3"  # int 0x80; pop rbx; ret
    )
    page[: len(code)] = code
    ctypes.CFUNCTYPE(ctypes.c_int)(base)()


def killed(how):
    code = subprocess.run([sys.executable, __file__, how]).returncode
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


if sys.argv[1:] == ["i386"]:
    int80_chmod(b"out/fd")
elif sys.argv[1:] == ["x32"]:
    libc.syscall(0x40000000 | 90, b"out/fd", MODE)  # x32's chmod
else:
    fd = os.open("out/fd", MAKE, 0o755)
    how = struct.pack("<3Q", MAKE, MODE, 0)  # struct open_how
    clone_args = struct.pack("<11Q", CLONE_NEWUSER, 0, 0, 0, signal.SIGCHLD, *[0] * 6)
    results = {
        "open": tried(2, b"out/a", MAKE, MODE),
        "open O_TMPFILE": tried(2, b"out", os.O_TMPFILE | os.O_WRONLY, MODE),
        "openat": tried(257, AT_FDCWD, b"out/b", MAKE, MODE),
        "creat": tried(85, b"out/c", MODE),
        "mknod": tried(133, b"out/d", stat.S_IFREG | MODE, 0),
        "mknodat": tried(259, AT_FDCWD, b"out/e", stat.S_IFREG | MODE, 0),
        "chmod": tried(90, b"out/fd", MODE),
        "fchmod": tried(91, fd, MODE),
        "fchmodat": tried(268, AT_FDCWD, b"out/fd", MODE),
        "fchmodat2": tried(452, AT_FDCWD, b"out/fd", MODE, 0),
        "openat2": tried(437, AT_FDCWD, b"out/g", how, len(how)),
        "io_uring_setup": tried(425, 8, ctypes.create_string_buffer(120)),
        "clone3": tried(435, clone_args, len(clone_args)),
        "clone": tried(56, CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0),
        "open without O_CREAT": tried(2, b"out/fd", os.O_RDONLY, MODE),
        "mkdir": tried(83, b"out/dir", MODE),
        "i386 chmod": killed("i386"),
        "x32 chmod": killed("x32"),
        "unshare": tried(272, CLONE_NEWUSER),  # last: it would move this process
    }
    print("\n".join(f"{name}: {result}" for name, result in results.items()))
"""


def left_behind(folder: Path) -> list[tuple[str, str, bool]]:
    """What in `folder` is set-id or bears capabilities: name, mode, capabilities."""
    found = []
    for path in (folder, *folder.rglob("*")):
        st = path.lstat()
        caps = not path.is_symlink() and "security.capability" in os.listxattr(path)
        if st.st_mode & SET_ID or caps:
            found.append((path.name, oct(st.st_mode), caps))
    return found


@pytest.fixture
def with_tools(tmp_path: Path) -> Iterator[Path]:
    """A project holding its owner's set-uid program (`tool`, a copy of true) and helper
    scripts; on the way out, nothing set-id or capable is left in it (nor in the
    machine's /tmp, whatever the test found)."""
    root = project(tmp_path)
    shutil.copy("/usr/bin/true", root / "tool")
    (root / "tool").chmod(0o4755)
    (root / "setcap.py").write_text(SETCAP)
    (root / "calls.py").write_text(CALLS)
    try:
        yield root
    finally:
        shutil.rmtree(root / "out", ignore_errors=True)
        (root / "tool").unlink()


@pytest.mark.parametrize("attempt", list(SET_ID_ATTEMPTS))
def test_a_command_leaves_no_set_id_or_capability_bearing_file(
    with_tools: Path, mode: str, attempt: str
) -> None:
    command, told = SET_ID_ATTEMPTS[attempt]
    out = bash_in(with_tools, mode, command)
    assert left_behind(with_tools / "out") == []
    assert out == told


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64's system call numbers")
def test_no_system_call_makes_a_set_id_file(with_tools: Path, mode: str) -> None:
    """Each call that sets a mode, tried with set-uid and set-gid, through the numbers of
    x86_64, of i386 (`int 0x80`, which any 64-bit process may use) and of x32; the calls
    whose mode the filter cannot read; the ways to a user namespace. What is harmless
    passes: a mode given without O_CREAT, a mkdir (Linux ignores the set-id bits there)."""
    out = bash_in(with_tools, mode, "python3 calls.py")
    assert left_behind(with_tools / "out") == []
    denied = ("open", "open O_TMPFILE", "openat", "creat", "mknod", "mknodat")
    denied += ("chmod", "fchmod", "fchmodat", "fchmodat2")
    assert out == "\n".join(
        [
            "exit code 0",
            *(f"{name}: {DENIED}" for name in denied),
            *(f"{name}: Function not implemented" for name in ("openat2", "io_uring_setup")),
            "clone3: Function not implemented",
            f"clone: {DENIED}",
            "open without O_CREAT: made",
            "mkdir: made",
            "i386 chmod: killed by SIGSYS",
            "x32 chmod: killed by SIGSYS",
            f"unshare: {DENIED}",
        ]
    )


HEADERS = {  # where Debian's linux-libc-dev keeps each table's numbers
    "X86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
    "AARCH64": "/usr/include/asm-generic/unistd.h",
}


@pytest.mark.parametrize("table", list(HEADERS))
def test_the_filter_numbers_are_the_kernel_headers(table: str) -> None:
    """The aarch64 table is never run here: the kernel's headers check it (a header older
    than Linux 6.6 lacks fchmodat2)."""
    header = Path(HEADERS[table])
    if not header.exists():
        pytest.skip(f"no {header} (linux-libc-dev)")
    defined = dict(re.findall(r"^#define __NR_(\w+)\s+(\d+)$", header.read_text(), re.M))
    numbers: dict[str, int] = getattr(setid, table)
    known = {name: number for name, number in numbers.items() if name in defined}
    assert known == {name: int(defined[name]) for name in known}
    assert set(numbers) - set(known) <= {"fchmodat2"}


def test_on_an_architecture_it_does_not_know_no_filter_is_made() -> None:
    with pytest.raises(setid.Unsupported) as refused:
        setid.program("riscv64")
    assert str(refused.value) == (
        "claw's filter against set-id programs knows the system calls of x86_64 and aarch64, "
        "not of this machine's riscv64"
    )


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_the_file_tools_keep_no_set_id_bit_on_a_file_they_change(
    with_tools: Path, tool: str
) -> None:
    """The runner writes for these tools, not the sandbox, and keeps a replaced file's mode:
    it kept the set-id bits too, so a job could fill the owner's set-uid program (in a write
    directory) with content of its own."""
    (with_tools / "out").mkdir()
    made = with_tools / "out/tool"
    made.write_text("#!/bin/sh\necho made by the owner\n")
    made.chmod(0o6755)
    policy = Policy(with_tools, write_globs=("out/**",), protected=(".git", ".claw"))
    ctx = ToolContext(with_tools, policy, scrubbed_env(), time.monotonic() + 60, True)
    edit = {"old_string": "made by the owner", "new_string": "a payload"}
    arguments = {"content": "a payload"} if tool == "write" else edit
    TOOLS[tool].invoke(ctx, json.dumps({"path": "out/tool", **arguments}))
    assert "a payload" in made.read_text()
    assert oct(made.stat().st_mode) == "0o100755"


# --- credentials git keeps: not for commands ------------------------------------------------

CHECKOUT_TOKEN = "ghs_" + "Z9" * 18  # what actions/checkout writes, base64'd in a header


def test_a_command_sees_git_config_without_its_credentials(tmp_path: Path, mode: str) -> None:
    """actions/checkout leaves `AUTHORIZATION: basic <b64 of x-access-token:TOKEN>` in
    .git/config. Tool results are redacted before the model sees them, but a command can
    decode and reverse the token first: the sandbox shows git's config without it."""
    root = tmp_path / "proj"
    root.mkdir(mode=0o755)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    header = (
        "AUTHORIZATION: basic "
        + base64.b64encode(f"x-access-token:{CHECKOUT_TOKEN}".encode()).decode()
    )
    git = ["git", "-C", str(root), "config"]
    subprocess.run([*git, "http.https://github.com/.extraheader", header], check=True)
    subprocess.run(
        [*git, "remote.origin.url", f"https://u:{CHECKOUT_TOKEN}@example.org/r"], check=True
    )
    before = (root / ".git/config").read_bytes()
    out = bash_in(root, mode, "cat .git/config; git config --get remote.origin.url | rev")
    assert CHECKOUT_TOKEN not in out and CHECKOUT_TOKEN[::-1] not in out, out
    assert header.split()[-1] not in out
    assert "[REDACTED]" in out and "repositoryformatversion = 0" in out
    assert (root / ".git/config").read_bytes() == before  # the host's copy is as it was
