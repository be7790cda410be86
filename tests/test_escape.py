"""Out of the sandbox (issue 14, class 1): the negative matrix.

A job's own files must not decide what its sandbox mounts. Each case plants something in the
project — a `.git` file naming `/`, a `.git` symlink, a worktree-style `.git` file, a skill
folder that is a symlink out, a repository above the project — either before the run (as an
earlier job would have) or in the job's first command, and then the job's command tries what
the issue found: the host's `/etc/shadow` and `/root`, a 0600 file in a 0700 folder outside
the project, an env file with an API key, a root-owned unix socket. The model is the fake
OpenAI server scripted to obey. Nothing may be read, and no one may connect.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project

from claw_batch import sandbox

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
