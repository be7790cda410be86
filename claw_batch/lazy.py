"""A sequence whose elements are made when they are read: a no-op's 100,000 jobs, their
results and their outputs are counted and handed on whole, seldom read one by one."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class Lazy(Sequence[T]):
    """`make(i)` for each i below `n`, made at each reading."""

    def __init__(self, n: int, make: Callable[[int], T]) -> None:
        self._n = n
        self._make = make

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:  # an index or a slice, as Sequence has it
        if isinstance(i, slice):
            return [self._make(n) for n in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._make(i % self._n)

    def __iter__(self) -> Iterator[T]:
        return map(self._make, range(self._n))
