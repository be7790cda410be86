"""claw's own stdio transport: the SDK's `stdio_client` cannot hand a process the descriptors
its sandbox needs (bwrap's seccomp filter, the project's directories), nor tie its life to
claw's. This one starts a ready `Command` (claw_batch.mcp.confine) and bridges its pipes to
the session's memory streams, as the SDK's does (mcp/client/stdio.py).

Nothing it starts outlives claw: the process gets PR_SET_PDEATHSIG (SIGKILL), which fires
when the thread that started it ends, and that is the hub's loop thread, which lives until
every server is stopped; it leads a process group of its own, killed whole at the stop; a
sandbox's PID 1 dies with bwrap (`--die-with-parent`) and takes its PID namespace along.
Its stderr goes to its log (`ErrLog`), never to claw's terminal, read at most STDERR_RATE
bytes a second: a server that floods it waits on its own full pipe, and claw's CPU stays
small.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import select
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.shared.message import SessionMessage

from claw_batch.mcp.errlog import ErrLog
from claw_batch.sandbox.command import Command

GRACE_SECONDS = 1.0  # after its stdin closes, how long a server has to exit on its own
REAP_SECONDS = 5.0  # after the kill, how long to wait for it (and its sandbox) to be gone
EXIT_SECONDS = 2.0  # after its stdout ends, how long to wait for its exit status
POLL_SECONDS = 0.01
PR_SET_PDEATHSIG = 1
STDERR_RATE = 1 << 20  # bytes a second claw reads of a server's stderr: a flood waits, not claw
LINE_LIMIT = 64 << 20  # a server that sends a longer message is ended (the call fails)


_LIBC = ctypes.CDLL(None)  # loaded before any fork: the child only calls into it


def _die_with_claw() -> None:  # pragma: no cover - runs in the child, between fork and exec
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class Server:
    """A running server process, as the hub sees it."""

    process: asyncio.subprocess.Process
    log: ErrLog
    leader_fd: int | None = None  # bwrap's status pipe: the sandbox's PID 1
    ended: anyio.Event = field(default_factory=anyio.Event)  # its stdout is closed
    fault: str | None = None  # why claw ended it: it broke the protocol
    _leader: int | None = None  # a pidfd of the sandbox's PID 1

    @property
    def pid(self) -> int:
        return self.process.pid

    def find_leader(self) -> None:
        """Open a pidfd of the sandbox's PID 1, which bwrap has reported by now (the server
        has answered); bwrap, its parent, still runs, so the pid is still its."""
        if self.leader_fd is None or self._leader is not None:
            return
        with contextlib.suppress(OSError):
            if not select.select([self.leader_fd], [], [], 0)[0]:
                return
            line = os.read(self.leader_fd, 4096).split(b"\n", 1)[0]
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._leader = os.pidfd_open(int(json.loads(line)["child-pid"]))

    async def status(self, seconds: float = EXIT_SECONDS) -> int | None:
        """Its exit status, waiting up to `seconds` for it (None: still running)."""
        with anyio.move_on_after(seconds):
            while self.process.returncode is None:
                await anyio.sleep(POLL_SECONDS)
        return self.process.returncode

    def died(self, code: int | None) -> str:
        """Why it stopped, in claw's words: its exit status, or what it did that made claw end
        it, and where its log is (its own last words are `log.tail()`)."""
        if self.fault is not None:
            how = f"was ended by claw: it {self.fault}"
        elif code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        where = f" (its log: {self.log.shown})" if self.log.path is not None else ""
        return f"{how}{where}"

    def broke(self, fault: str) -> None:
        """It broke the protocol: end it, saying why (its call fails at once)."""
        if self.fault is None:
            self.fault = fault
            self.log.note(f"ending the server: it {fault}")
        self.kill()

    async def stop(self) -> None:
        """End it: close its stdin, give it GRACE_SECONDS, then kill its group and its
        sandbox; wait until they are gone (bounded)."""
        proc = self.process
        if proc.stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                proc.stdin.close()
        if await self.status(GRACE_SECONDS) is None:
            self.kill()
        await self.status(REAP_SECONDS)
        if self._leader is not None:
            with anyio.move_on_after(REAP_SECONDS):
                while not select.select([self._leader], [], [], 0)[0]:
                    await anyio.sleep(POLL_SECONDS)
            os.close(self._leader)
            self._leader = None
        if self.leader_fd is not None:
            os.close(self.leader_fd)
            self.leader_fd = None
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()

    def kill(self) -> None:
        if self._leader is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                signal.pidfd_send_signal(self._leader, signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


async def spawn(command: Command, *, cwd: Path, log: ErrLog) -> Server:
    """Start the command with pipes on stdin, stdout and stderr, in a session of its own,
    to die with claw. OSError when it cannot be started."""
    process = await asyncio.create_subprocess_exec(
        *command.argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(command.env),
        cwd=cwd,
        pass_fds=command.pass_fds,
        start_new_session=True,
        preexec_fn=_die_with_claw,
        limit=LINE_LIMIT,
    )
    leader = None
    if command.leader is not None:
        leader = os.dup(command.leader)  # the Command's own copy is closed once started
    return Server(process, log, leader)


@contextlib.asynccontextmanager
async def streams(
    server: Server,
) -> AsyncIterator[
    tuple[
        anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
        anyio.abc.ObjectSendStream[SessionMessage],
    ]
]:
    """The session's streams over the server's pipes; at the exit, the server is stopped."""
    proc = server.process
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        lines = Lines()
        try:
            async with read_writer:
                while chunk := await stdout.read(65536):
                    for line in lines.feed(chunk):
                        message = _parse(line) if isinstance(line, bytes) else line
                        if isinstance(message, str):
                            server.broke(message)
                            return
                        await read_writer.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            server.ended.set()

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, RuntimeError):
            await read_writer.aclose()

    async def errors() -> None:
        with contextlib.suppress(OSError):
            while chunk := await stderr.read(65536):
                server.log.write(chunk)
                await anyio.sleep(len(chunk) / STDERR_RATE)  # a full pipe slows the server

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        tg.start_soon(errors)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop()
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


class Lines:
    """Splits what a server sends into lines, keeping an unfinished one as a list of chunks
    (joined once, when it ends: no copy per chunk) and counting its bytes: past `limit`, the
    last of the lines is why (a str) instead."""

    def __init__(self, limit: int = LINE_LIMIT) -> None:
        self.pending: list[bytes] = []
        self.size, self.limit = 0, limit

    def feed(self, chunk: bytes) -> list[bytes | str]:
        *ended, rest = chunk.split(b"\n")
        if ended and self.pending:
            ended[0] = b"".join((*self.pending, ended[0]))
            self.pending, self.size = [], 0
        if rest:
            self.pending.append(rest)
            self.size += len(rest)
        lines: list[bytes | str] = [line for line in ended if line.strip()]
        if self.size > self.limit:
            lines.append(f"sent a message longer than {self.limit >> 20} MB")
        return lines


def _parse(line: bytes) -> SessionMessage | Exception | str:
    """A line as a message; an exception the session skips (as the SDK's transport does), or,
    for a message that can never be read, why in claw's words (a str: the server is ended, so
    that the call it answers fails at once rather than at its timeout)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:
        error = e
    try:
        text = line.decode()
    except UnicodeDecodeError:
        return "sent a message that is not valid UTF-8"
    deep = "sent a message nested too deep to read"
    if "recursion limit" in str(error):
        return deep
    try:
        message = json.loads(text)
    except RecursionError:
        return deep
    except ValueError:
        return error  # not JSON at all: a stray line, skipped
    reply = isinstance(message, dict) and "id" in message
    if reply and ("result" in message or "error" in message):
        if "surrogate" in str(error) or "hex escape" in str(error):
            return "sent a reply that holds a lone surrogate (not valid Unicode)"
        return "sent a reply that is not a valid JSON-RPC message"
    return error
