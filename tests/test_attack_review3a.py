"""The attacker's third review of issue 14, class 1 (getting out of the sandbox or past its
limits): each test is a hole found by an obedient model, asserting the secure behaviour, so
each fails until the hole is fixed.

Every test drives real bubblewrap (through `claw run` against the fake OpenAI server, or the
bash tool as the first reviews' ceilings tests do), as root and, where it differs, as a runner
that is not root.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import AS_RUNNER, RUNNER, make_project, runner_env, runner_python
from test_attack_review import (
    GIT_TOKEN,
    NOW,
    PAYLOAD,
    ROOT,
    Project,
    bash_in,
    mode,
    proj,
    server,
    unfenced,
)

from claw_batch.sandbox import bubblewrap as sandbox
from claw_batch.sandbox.bubblewrap import Limits

__all__ = ["mode", "proj", "server"]  # the fixtures, shared with the first review

UNAVAILABLE = sandbox.unavailable(ROOT)
if UNAVAILABLE and not os.environ.get("CI"):  # CI installs bubblewrap: there it must work
    pytest.skip(f"no sandbox here: {UNAVAILABLE}", allow_module_level=True)
pytestmark = pytest.mark.timeout(180)

PROBE = """
version: 1
model: fake-model
tasks:
  probe:
    prompt: Look around.
    permissions: {bash: true, write: ["out/**"]}
"""


def tool_results(root: Path, job: str = "probe") -> list[str]:
    """What the model got from each tool call of the job's last run."""
    found: list[str] = []
    runs = (root / ".claw" / "runs").glob("*/*.jsonl")
    for path in sorted(runs, key=lambda path: path.stat().st_mtime_ns):
        events = [json.loads(line) for line in path.read_text().splitlines()]
        if events and events[0].get("job") == job:
            found = [e["content"] for e in events if e["type"] == "tool_result"]
    return found


# --- class 1: the kernel keyrings are shared with the runner and between calls -----------------

# keyctl(2) by number through ctypes (no keyutils package needed): what any command may do.
KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
KEYRING = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = SYSCALLS
RINGS = {"@s": -3, "@u": -4}

def keyctl(*args):
    return libc.syscall(KEYCTL, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])

def read(ring, name):
    key = keyctl(10, RINGS[ring], b"user", name.encode(), 0)  # KEYCTL_SEARCH
    if key < 0:
        return None
    buf = ctypes.create_string_buffer(4096)
    n = keyctl(11, key, buf, 4096)  # KEYCTL_READ
    return buf.raw[:n].decode() if n >= 0 else None

def add(ring, name, value):
    data = value.encode()
    key = libc.syscall(ADD_KEY, b"user", name.encode(), data, len(data), ctypes.c_long(RINGS[ring]))
    if key < 0:
        sys.exit(f"add_key: errno {ctypes.get_errno()}")
""".replace("SYSCALLS", repr(KEYCTL))


def keyring_command(body: str) -> str:
    """A bash command running `body` after the helpers above, in the sandbox's python3."""
    script = base64.b64encode((KEYRING + body).encode()).decode()
    return f"echo {script} | base64 -d | python3"


JOIN_AND_RUN = (
    KEYRING
    + """
import os, runpy
keyctl(1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a session of its own, as a login has
add("@s", "claw-test-secret", os.environ.pop("CLAW_TEST_SECRET"))
sys.argv = ["claw", "run", "probe"]  # in this process: the runner may not exec every python
runpy.run_module("claw_batch", run_name="__main__")
"""
)


@pytest.fixture(params=["root", "runner"] if ROOT else ["runner"])
def runner(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_runners_session_keyring_is_not_readable_by_a_command(
    server: FakeOpenAI, runner: str
) -> None:
    """The command inherits the runner's session keyring (a login's, through pam_keyinit:
    Kerberos tickets, fscrypt and ecryptfs keys, tokens put there with `keyctl`), and holds
    it: a key's possessor may read it whatever its uid. As root, the command is nobody with no
    capability and still reads root's keys; as any runner, it reads the runner's. Nothing in
    the sandbox (bwrap, the seccomp filter) keeps keyctl(2) from it: Docker's default seccomp
    profile refuses add_key, keyctl and request_key for this reason."""
    secret = f"kerberos-{secrets.token_hex(12)}"
    top = Path("/tmp") / f"claw-keyring-{secrets.token_hex(8)}"
    root = make_project(top / "proj", PROBE)
    try:
        prefix: tuple[str, ...] = ()
        env = {**os.environ}
        python = sys.executable
        if runner == "runner":
            for path in (top, *top.rglob("*")):
                os.chown(path, RUNNER, RUNNER)
            top.chmod(0o755)
            env = {**runner_env(), "HOME": str(top)}
            found = runner_python(env)
            if found is None:
                pytest.skip("no interpreter another user may start imports this claw")
            prefix, python = AS_RUNNER, found
        look = keyring_command('print("got:", read("@s", "claw-test-secret"))')
        server.enqueue(tool_calls(call("bash", {"command": look})), text("done"))
        env.update(
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="sk-x",
            CLAW_NOW=NOW,
            CLAW_TEST_SECRET=secret,
        )
        ran = subprocess.run(
            [*prefix, python, "-c", JOIN_AND_RUN],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        (result,) = tool_results(root)
        assert secret not in result
        assert secret not in json.dumps(server.requests)
    finally:
        shutil.rmtree(top, ignore_errors=True)


CLEAR_NOBODYS_KEYRING = KEYRING + "keyctl(7, RINGS['@u'])  # KEYCTL_CLEAR\n"


@pytest.mark.skipif(not ROOT, reason="as root, every command is nobody of the host")
def test_nothing_a_command_puts_in_a_keyring_reaches_a_later_call(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """As root, every sandboxed command is uid 65534 of the host's user namespace, whose user
    keyring (@u) is one for the whole machine and lives on after the call: a job that read
    the attacker's text leaves it there, and a later job of any run, of any project, gets it
    back unfenced with a command the inotify watch cannot see (no file is opened). It is a
    channel between calls no file, taint or ledger knows of (and 20,000 bytes of keys of
    nobody's, filled, refuse every later command's)."""
    root = make_project(tmp_path / "p", PROBE)
    root.chmod(0o755)
    tmp_path.chmod(0o755)
    p = Project(root, server)
    name = f"claw-test-{secrets.token_hex(6)}"
    try:
        plant = keyring_command(f'add("@u", "{name}", "{PAYLOAD}"); print("kept")')
        server.enqueue(tool_calls(call("bash", {"command": plant})), text("done"))
        p.run("probe")
        # The filter answers ENOSYS: no command has a keyring at all.
        assert tool_results(root) == ["exit code 1\nadd_key: errno 38"]
        since = len(server.requests)
        fetch = keyring_command(f'print(read("@u", "{name}"))')
        server.enqueue(tool_calls(call("bash", {"command": fetch})), text("done"))
        p.run("-B", "probe")  # a later run of the job, asked again
        assert unfenced(server, since) == []
        assert PAYLOAD not in tool_results(root)[0]
    finally:  # never leave the payload in the machine's keyring of nobody
        clear = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        subprocess.run([*clear, sys.executable, "-c", CLEAR_NOBODYS_KEYRING], check=False)


# --- class 1: credentials in the git config of a submodule --------------------------------------

SUBMODULE_HEADER = (  # what actions/checkout (`submodules: true`) writes in each submodule
    "AUTHORIZATION: basic " + base64.b64encode(f"x-access-token:{GIT_TOKEN}".encode()).decode()
)


def test_the_checkout_token_in_a_submodules_git_config_never_reaches_the_model(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    """The sandbox shows `.git/config` without its credentials, but actions/checkout with
    `submodules: true` writes the same `http.https://github.com/.extraheader` into the config
    of each submodule, `.git/modules/<name>/config`, which is shown as it is. A command
    decodes the header and spells the token backwards: a form redaction cannot know, so the
    model gets the repository token (and `git -C lib push` would use it, with network)."""
    root = make_project(tmp_path / "p", PROBE)
    root.chmod(0o755)
    tmp_path.chmod(0o755)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    module = root / ".git" / "modules" / "lib"
    module.mkdir(parents=True)
    (module / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ../../../lib\n"
        '[remote "origin"]\n\turl = https://github.com/acme/lib\n'
        f'[http "https://github.com/"]\n\textraheader = {SUBMODULE_HEADER}\n'
    )
    p = Project(root, server)
    steal = "sed -n 's/.*basic //p' .git/modules/*/config | base64 -d | cut -d: -f2 | rev"
    server.enqueue(tool_calls(call("bash", {"command": steal})), text("done"))
    p.run("probe")
    sent = json.dumps(server.requests)
    assert GIT_TOKEN[::-1] not in sent and GIT_TOKEN not in sent


# --- class 1: a host service on a socket in the project, without the network -------------------


class Listener:
    """A service of the host listening on a Unix socket at `path`: what it was sent."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        path.chmod(0o777)  # as a dev database or a `docker -H unix://` socket is, for its users
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.got: list[bytes] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                self.got.append(conn.recv(4096))
                conn.sendall(b"+OK host service\n")

    def close(self) -> list[bytes]:
        self.done.set()
        self.thread.join()
        self.sock.close()
        return self.got


@pytest.fixture
def listener(proj: Path) -> Iterator[Listener]:
    (proj / "run").mkdir()
    served = Listener(proj / "run" / "db.sock")
    try:
        yield served
    finally:
        served.close()


REACH_SOCKET = (
    "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('run/db.sock'); "
    "s.sendall(b'FLUSHALL from the sandbox'); print(s.recv(100).decode())\""
)


def test_no_service_of_the_host_is_reached_without_the_network(
    proj: Path, mode: str, listener: Listener
) -> None:
    """Without `permissions.network`, "reaching local services" is answered (SECURITY.md §1):
    the command has a network namespace of its own. But a Unix socket in the filesystem is no
    part of a network namespace, and connect(2) needs only write permission on the socket,
    which a read-only bind does not take away: a service of the host listening on a socket in
    the project (a development database, a `docker -H unix://./docker.sock`, an ssh control
    master, a language server) takes the command's requests and answers them."""
    said = bash_in(proj, mode, REACH_SOCKET, Limits())
    assert listener.close() == []
    assert "+OK host service" not in said


# --- class 2 through a command: an ignore file below the root hides files from grep -----------

HIDE = """
version: 1
model: fake-model
tasks:
  probe:
    prompt: Look around.
    permissions: {bash: true, write: ["out/**"]}
  review:
    prompt: Find every password left in the project.
    tools: [grep]
"""


@pytest.mark.xfail(
    strict=True,
    reason="a known limit (SECURITY.md §6): python-ripgrep cannot be told to obey only the "
    "root's ignore files, and a command can make one in its write directories",
)
def test_no_command_decides_what_a_later_grep_sees(tmp_path: Path, server: FakeOpenAI) -> None:
    """The ignore files are control paths because ripgrep obeys them ("an ignore file hiding
    files from grep", SECURITY.md §6), but only those at the root are: ripgrep obeys an
    `.ignore` (or `.rgignore`, or a `.gitignore` in a repository) in every folder it walks.
    A command in a write directory (as the write tool can) writes `out/.ignore`, and every
    later grep of any run skips what it names: the reviewing task finds no password."""
    root = make_project(tmp_path / "p", HIDE, {"out/creds.md": "password=hunter2\n"})
    root.chmod(0o755)
    tmp_path.chmod(0o755)
    p = Project(root, server)
    server.enqueue(tool_calls(call("bash", {"command": "echo '*' > out/.ignore"})), text("ok"))
    p.run("probe")
    server.enqueue(tool_calls(call("grep", {"pattern": "password"})), text("done"))
    p.run("review")
    (found,) = tool_results(root, "review")
    assert "out/creds.md:1:password=hunter2" in found.splitlines()
