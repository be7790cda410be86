"""The tool loop: ask the model, run the tool calls it makes, repeat until it answers.

Tool failures (unknown or disallowed tools, invalid arguments, refused paths) go back to the
model as error results and are never executed; limits and interrupts propagate.

Tool calls a server left in the reply's text as markup (`llm.toolmarkup`) become the turn's
tool calls and take the same path as native ones; markup that cannot be read is never an
answer. The answer leaves out thinking written into it (`llm.thinking`).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from claw_batch import cancel
from claw_batch.agent.budget import JobBudget
from claw_batch.errors import LimitExceeded, ReplayMismatch, TaskFailed, ToolError
from claw_batch.llm import thinking
from claw_batch.llm.base import LLM
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec, Usage
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import Tool

if TYPE_CHECKING:
    from claw_batch.llm import toolmarkup

REPEAT_LIMIT = 3  # the same tool calls this many turns in a row is a loop
# Tools whose calls in one turn run at the same time, each on a thread (a sub-job mostly
# waits for its model); the others run one after another, in the turn's order.
PARALLEL_TOOLS = frozenset({"delegate"})
MARKUP_CORRECTION = (
    "Your reply holds tool-call markup that could not be read ({problem}). Call the tool "
    "again with valid JSON arguments, or give your final answer as plain text."
)
UNREADABLE = "the model's reply was tool-call markup claw could not read ({problem})"

EventSink = Callable[..., None]  # on_event(kind, **fields)
# A call run beside others: its (output, ok) and the events its tool sent meanwhile.
Ran = tuple[tuple[str, bool], list[tuple[str, dict[str, Any]]]]
AnswerCheck = Callable[[str], "str | None"]  # returns a correction to send, or None if fine


@dataclass(frozen=True)
class LoopSettings:
    model: str
    temperature: float | None
    max_steps: int
    deadline: float  # time.monotonic()
    timeout: float  # for messages: the job's timeout in seconds
    job: str = ""
    key_messages: tuple[Message, ...] = ()  # see ChatRequest.key_messages
    corrections: int = 1  # how often check_answer may send the model back
    sample: int = 0  # see ChatRequest.sample


@dataclass(frozen=True)
class LoopResult:
    text: str
    usage: Usage
    steps: int


def _ignore(kind: str, **fields: Any) -> None:
    pass


class ToolLoop:
    def __init__(
        self,
        llm: LLM,
        tools: Mapping[str, Tool],
        ctx: ToolContext,
        settings: LoopSettings,
        *,
        on_event: EventSink = _ignore,
        before_call: Callable[[], None] | None = None,
        check_answer: AnswerCheck | None = None,
        budget: JobBudget | None = None,
    ) -> None:
        self.llm = llm
        self.tools = tools
        self.ctx = ctx
        self.settings = settings
        self.on_event = on_event
        self.before_call = before_call  # e.g. write the turn's events before a long wait
        self.check_answer = check_answer
        self.budget = budget or JobBudget.tokens_only()
        self.specs = tuple(t.spec() for t in tools.values())
        # The call cache's (llm.callcache.CachedLLM.peek): a replayed reply, asked first.
        self._peek: Callable[[ChatRequest], Completion | None] | None = getattr(llm, "peek", None)
        self._spec_chars = spec_chars(self.specs)  # the same in every request

    def run(self, messages: list[Message]) -> LoopResult:
        s = self.settings
        usage = Usage()
        corrections = s.corrections
        repeats: list[tuple[tuple[str, str], ...]] = []
        # The prompt's size, kept as messages are added: a turn never walks the old ones.
        chars = self._spec_chars + sum(message_chars(m) for m in messages)
        for step in range(1, s.max_steps + 1):
            self._check_deadline()
            request = self._request(messages)
            # A turn the call cache replays costs nothing: no budget is held for it, so a
            # job a budget stopped replays what it paid for before it stops again.
            replayed = self._peek(request) if self._peek is not None else None
            if replayed is None:
                self.budget.reserve(usage, chars // 4)
            reply, markup = self._ask(request, step, replayed)
            if not reply.replayed:  # a replayed turn paid nothing: no budget spent
                usage += reply.usage
            messages.append(reply.message)
            chars += message_chars(reply.message)
            calls = reply.message.tool_calls
            if calls:
                self._check_repeats(repeats, calls)
                results = self._run_calls(calls)
                messages.extend(results)
                chars += sum(message_chars(m) for m in results)
                continue
            apart = reply.message.reasoning is not None
            text = thinking.answer(reply.message.content or "", reasoning_apart=apart)
            correction, failure = self._refusal(text, markup)
            if correction is None:
                return LoopResult(text, usage, step)
            if corrections == 0:
                raise TaskFailed(failure)
            corrections -= 1
            self.on_event("correction", message=correction)
            messages.append(Message("user", correction))
            chars += len(correction)
        raise LimitExceeded(
            f"max_steps: no final answer after {s.max_steps} model "
            f"turn{'' if s.max_steps == 1 else 's'} "
            "(raise max_steps or simplify the task)"
        )

    def _refusal(self, text: str, markup: toolmarkup.Markup | None) -> tuple[str | None, str]:
        """Why `text` is no final answer: the correction to send and the failure once
        corrections ran out; (None, "") when it is one."""
        if markup is not None and markup.problem is not None:
            problem = markup.problem
            return MARKUP_CORRECTION.format(problem=problem), UNREADABLE.format(problem=problem)
        if not text:
            raise TaskFailed("the model's final answer was empty")
        correction = self.check_answer(text) if self.check_answer else None
        return correction, correction or ""

    def _request(self, messages: list[Message]) -> ChatRequest:
        s = self.settings
        return ChatRequest(
            model=s.model,
            messages=tuple(messages),
            tools=self.specs,
            temperature=s.temperature,
            job=s.job,
            key_messages=s.key_messages,
            sample=s.sample,
        )

    def _ask(
        self, request: ChatRequest, step: int, replayed: Completion | None = None
    ) -> tuple[Completion, toolmarkup.Markup | None]:
        """The model's reply to `request`, or `replayed`: what the call cache held for it."""
        if self.before_call is not None:
            self.before_call()
        started = time.monotonic()
        try:
            reply = replayed or self.llm.complete(request, deadline=self.settings.deadline)
        except BaseException:
            self.budget.settle(Usage())  # what a failed call cost is not known: nothing
            raise
        reply = _whole(reply)
        if reply.replayed:  # from the call cache: nothing paid, what it would have cost saved
            self.budget.settle(Usage())
            cost = self.budget.priced(reply.usage)
        else:
            cost = self.budget.settle(reply.usage)
        recovered, markup = self._recover(reply, step)
        seconds = time.monotonic() - started
        self._record(step, reply.message, recovered, markup, cost, seconds, reply.replayed)
        return recovered, markup

    def _recover(self, reply: Completion, step: int) -> tuple[Completion, toolmarkup.Markup | None]:
        """The reply with the tool calls it holds as markup made its tool calls."""
        message = reply.message
        if message.tool_calls or not message.content:
            return reply, None
        from claw_batch.llm import toolmarkup  # a reply's, read once it is in

        markup = toolmarkup.recover(
            message.content,
            self.tools,
            step,
            cut_off=reply.finish_reason == "length",  # max_tokens: a call in it may be half
            reasoning_apart=message.reasoning is not None,
        )
        if markup is None or not markup.calls:
            return reply, markup
        message = replace(message, content=markup.content, tool_calls=markup.calls)
        return replace(reply, message=message), markup

    def _record(
        self,
        step: int,
        sent: Message,
        reply: Completion,
        markup: toolmarkup.Markup | None,
        cost: float | None,
        seconds: float,
        replayed: bool = False,
    ) -> None:
        """The assistant event: the content as the model sent it, the calls as they run. A
        replayed turn (the call cache answered) says so, and its cost is what it saved."""
        self.on_event(
            "assistant",
            step=step,
            content=sent.content,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments, **self._server(c.name)}
                for c in reply.message.tool_calls
            ],
            **_dialect(markup, sent),
            usage={
                "prompt": reply.usage.prompt_tokens,
                "completion": reply.usage.completion_tokens,
                "cached": reply.usage.cached_tokens,
            },
            model=reply.model,
            seconds=round(seconds, 3),
            cost_usd=cost,
            **({"replayed": True} if replayed else {}),
        )

    def _run_calls(self, calls: tuple[ToolCall, ...]) -> list[Message]:
        together = [i for i, c in enumerate(calls) if c.name in PARALLEL_TOOLS]
        ran = self._together([calls[i] for i in together]) if len(together) > 1 else []
        done = dict(zip(together, ran, strict=False))
        results = []
        for i, call in enumerate(calls):
            if i in done:
                (output, ok), events = done[i]
                for kind, fields in events:  # in the calls' order, as if one after another
                    self.on_event(kind, **fields)
            else:
                self._check_deadline()
                output, ok = self._execute(call)
            # Redacted before the model sees it: a key it never got, it cannot pass on in a
            # form redaction would not know (reversed, decoded, split across its answer).
            output = self.ctx.redact(output)
            server = self._server(call.name)
            self.on_event(
                "tool_result", id=call.id, name=call.name, ok=ok, content=output, **server
            )
            results.append(Message("tool", output, tool_call_id=call.id))
        return results

    def _together(self, calls: list[ToolCall]) -> list[Ran]:
        """Run `calls` at the same time, on at most the delegate's width of threads (the
        run's -j), each with its own event buffer; their results and events, in their order.
        What ends the job (a limit, Ctrl-C) in any of them is raised once all have ended
        (none is left running; no call not yet started starts)."""
        import threading

        from claw_batch import baton

        self._check_deadline()
        ran: list[Ran] = [(("", False), []) for _ in calls]
        raised: list[BaseException] = []

        def one(i: int, call: ToolCall) -> None:
            events: list[tuple[str, dict[str, Any]]] = []
            ctx = replace(self.ctx, on_event=lambda kind, **f: events.append((kind, f)))
            try:
                with baton.held():
                    ran[i] = (self._execute(call, ctx), events)
            except BaseException as e:  # handed to the job's thread
                ran[i] = ((f"error: {type(e).__name__}", False), events)
                raised.append(e)

        todo = iter(list(enumerate(calls)))
        lock = threading.Lock()

        def worker() -> None:  # takes the next call until none is left
            while True:
                with lock:
                    i, call = next(todo, (-1, None))
                if call is None or raised:
                    return
                one(i, call)

        delegate = self.ctx.delegate
        width = min(len(calls), delegate.width if delegate is not None else len(calls))
        threads = [
            threading.Thread(target=worker, name=f"claw-call-{calls[0].name}", daemon=True)
            for _ in range(max(1, width))
        ]
        with baton.released():  # the job waits for its calls
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if raised:
            interrupt = [e for e in raised if isinstance(e, KeyboardInterrupt)]
            raise (interrupt or raised)[0]
        return ran

    def _server(self, name: str) -> dict[str, str]:
        """An MCP tool's server and its name there, for the transcript ({} for a built-in)."""
        tool = self.tools.get(name)
        server = getattr(tool, "server", None)
        return {"server": server, "tool": getattr(tool, "remote", name)} if server else {}

    def _execute(self, call: ToolCall, ctx: ToolContext | None = None) -> tuple[str, bool]:
        ctx = ctx or self.ctx
        tool = self.tools.get(call.name)
        taint = ctx.taint
        refused = taint.refusal(call.name)  # the job has read outside content, maybe just now
        if refused is not None and (tool is not None or taint.withheld(call.name)):
            return f"error: {refused}", False
        if tool is None:
            allowed = ", ".join(self.tools) or "none"
            return (
                f"error: tool '{call.name}' is not available to this task (allowed: {allowed})",
                False,
            )
        try:
            invoke = functools.partial(tool.invoke, ctx, call.arguments)
            return taint.run(call.name, str(ctx.root), invoke), True
        except ToolError as e:
            return (str(e) if e.fenced else f"error: {e}"), False
        except (LimitExceeded, ReplayMismatch, KeyboardInterrupt):
            raise  # a replayed MCP call not in the cassette ends the run, as a model reply's
        except Exception as e:  # the tool boundary: a bug in a tool must not end the run
            self.on_event("tool_crash", name=call.name, error=repr(e))
            return f"error: internal error in tool '{call.name}': {type(e).__name__}: {e}", False

    def _check_repeats(
        self, history: list[tuple[tuple[str, str], ...]], calls: tuple[ToolCall, ...]
    ) -> None:
        turn = tuple(sorted((c.name, _canonical_args(c.arguments)) for c in calls))
        if history and history[-1] != turn:
            history.clear()
        history.append(turn)
        if len(history) >= REPEAT_LIMIT:
            shown = ", ".join(f"{name}({args})" for name, args in turn)[:200]
            raise LimitExceeded(
                f"loop: the model made the same tool calls {REPEAT_LIMIT} turns in a row: {shown}"
            )

    def _check_deadline(self) -> None:
        cancel.check()
        if time.monotonic() >= self.settings.deadline:
            raise LimitExceeded(f"timeout: the job ran longer than {self.settings.timeout:g} s")


def prompt_tokens(messages: Sequence[Message], specs: Sequence[ToolSpec]) -> int:
    """A request's prompt, estimated at 4 characters a token (what a call costs is only
    known after it)."""
    return (sum(message_chars(m) for m in messages) + spec_chars(specs)) // 4


def message_chars(m: Message) -> int:
    """What a message adds to prompt_tokens' count of characters."""
    chars = len(m.content or "")
    if m.tool_calls:
        chars += sum(len(c.arguments) for c in m.tool_calls)
        chars += len(m.reasoning or "")  # sent back with its tool calls
    return chars


def spec_chars(specs: Sequence[ToolSpec]) -> int:
    """What the tools' descriptions add to prompt_tokens' count of characters: counted once
    for the jobs that are handed the same spec objects (Tool.spec), not once a job."""
    global _last_spec_chars
    counted, chars = _last_spec_chars
    if len(counted) == len(specs) and all(a is b for a, b in zip(counted, specs, strict=True)):
        return chars
    chars = sum(len(json.dumps(t.parameters)) + len(t.description) for t in specs)
    _last_spec_chars = (tuple(specs), chars)
    return chars


# The specs spec_chars counted last, and their characters (one tuple: threads read it whole).
_last_spec_chars: tuple[tuple[ToolSpec, ...], int] = ((), 0)


def _dialect(markup: toolmarkup.Markup | None, sent: Message) -> dict[str, str]:
    """The assistant event's fields for what the reply carried beside content and calls."""
    fields = {}
    if markup is not None and markup.calls:
        fields["parsed_from_content"] = markup.dialect  # the calls were markup in the text
    if sent.reasoning is not None:
        fields["reasoning"] = sent.reasoning
    return fields


_SURROGATE = re.compile("[\ud800-\udfff]")


def _whole(reply: Completion) -> Completion:
    """The reply with each lone surrogate (half an emoji a server cut, sent as `\\ud83d`)
    made U+FFFD: no file, note, transcript or ledger can hold one as UTF-8."""
    m = reply.message
    texts = [m.content, m.reasoning, *(c.arguments for c in m.tool_calls)]
    if all(t is None or t.isascii() or not _SURROGATE.search(t) for t in texts):
        return reply

    def fixed(text: str | None) -> str | None:
        return None if text is None else _SURROGATE.sub("\ufffd", text)

    calls = tuple(replace(c, arguments=fixed(c.arguments) or "") for c in m.tool_calls)
    message = replace(m, content=fixed(m.content), reasoning=fixed(m.reasoning), tool_calls=calls)
    return replace(reply, message=message)


def _canonical_args(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return arguments
