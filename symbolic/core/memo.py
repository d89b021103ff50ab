"""A bounded memo: a dict that forgets its oldest entry once it holds ``size`` entries.

The planner and the compiler remember answers per process (compiled formulas, terms with a
model's widths put in); a long session (a REPL, a server, a test run) plans many models, so
every such memo has a bound instead of growing with the session.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedMemo(dict[K, V]):
    """A dict of at most ``size`` entries: storing a new key when full drops the oldest one first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a memo holds at least one entry")
        super().__init__()
        self.size = size

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self and len(self) >= self.size:
            del self[next(iter(self))]  # dicts keep insertion order: the first key is the oldest
        super().__setitem__(key, value)
