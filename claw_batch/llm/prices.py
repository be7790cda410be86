"""What a model call cost, in USD: the tokens the API reported times a price per million
tokens — the clawfile's `prices:` first, then a built-in table of common models. A model
neither knows costs None: claw reports its tokens only, never a guessed number.

The built-in prices are the providers' list prices for their own APIs (checked 2026-11);
they change, so `prices:` overrides them (and covers any model they miss, a local one at 0).

A call through a provider's Batch API (`batch: true`) costs the price's `batch:` entry; the
built-in table has none, and takes half of list where the provider documents that discount
(OpenAI's and Groq's Batch APIs: 50 %). A clawfile price without a `batch:` entry is taken at
its list price for batch calls too: never a discount nobody stated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from claw_batch.config import Price
from claw_batch.llm.usage import Usage

BUILT_IN: Mapping[str, Price] = {
    # OpenAI
    "gpt-5": Price(1.25, 10.00, 0.125),
    "gpt-5-mini": Price(0.25, 2.00, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "o3": Price(2.00, 8.00, 0.50),
    "o3-mini": Price(1.10, 4.40, 0.55),
    "o4-mini": Price(1.10, 4.40, 0.275),
    # DeepSeek (api.deepseek.com)
    "deepseek-chat": Price(0.28, 0.42, 0.028),
    "deepseek-reasoner": Price(0.28, 0.42, 0.028),
    # Groq
    "llama-3.3-70b-versatile": Price(0.59, 0.79),
    "llama-3.1-8b-instant": Price(0.05, 0.08),
}

# The built-in models whose provider's Batch API costs half of list (documented by OpenAI and
# Groq); DeepSeek has no Batch API.
BATCH_HALF = frozenset(BUILT_IN) - {"deepseek-chat", "deepseek-reasoner"}

# A dated snapshot of a model: gpt-4o-mini-2024-07-18, o3-mini-2025-01-31.
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}\Z")


def lookup(model: str, overrides: Mapping[str, Price] = {}, *, batch: bool = False) -> Price | None:
    """The price of `model` as the clawfile names it (`provider/model` or `model`): the
    clawfile's `prices:` under that name or the provider's model name, then the built-in
    table under the model name, a dated snapshot's base name, or, for a router's
    `vendor/model` id, its last part. `batch`: of a call through the Batch API."""
    name = model.split("/", 1)[1] if "/" in model else model
    for table, key in ((overrides, model), (overrides, name)):
        if key in table:
            price = table[key]
            return (price.batch or price) if batch else price
    for key in (name, _SNAPSHOT.sub("", name), name.rsplit("/", 1)[-1]):
        if key in BUILT_IN:
            return _half(BUILT_IN[key]) if batch and key in BATCH_HALF else BUILT_IN[key]
    return None


def _half(price: Price) -> Price:
    cached = None if price.cached_input is None else price.cached_input / 2
    return Price(price.input / 2, price.output / 2, cached)


def total(costs: Iterable[float | None]) -> float | None:
    """The sum; None when one of them is not known: a sum that leaves some out would be a
    wrong number."""
    known = list(costs)
    return None if None in known else sum(c for c in known if c is not None)


def plus(so_far: float | None, cost: float | None) -> float | None:
    """`total`, one cost at a time (start from 0.0): for sums kept as jobs end."""
    return None if so_far is None or cost is None else so_far + cost


def cost(usage: Usage, price: Price | None) -> float | None:
    """USD; cached prompt tokens (part of the prompt tokens, as the APIs count them) at the
    cached price where there is one."""
    if price is None:
        return None
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    micro = (
        (usage.prompt_tokens - cached) * price.input
        + cached * cached_rate
        + usage.completion_tokens * price.output
    )
    return micro / 1_000_000
