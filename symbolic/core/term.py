"""Term: one named, sourced SymPy expression — the unit every total is built from."""

from __future__ import annotations

from dataclasses import dataclass

import sympy

UNITS = ("params", "bytes", "elements", "flops", "seconds", "tokens/s", "gpu-hours", "usd")  # time: issue 15


@dataclass(frozen=True)
class Term:
    """An immutable named expression with its unit and source.

    ``where`` says which section or equation of the source it comes from; ``note`` says what
    the term assumes or where the source is wrong.
    """

    key: str
    title: str
    expr: sympy.Expr
    unit: str
    source: str
    where: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"term {self.key!r}: unit must be one of {UNITS}, not {self.unit!r}")
        if isinstance(self.expr, int):
            object.__setattr__(self, "expr", sympy.Integer(self.expr))
        if not isinstance(self.expr, sympy.Expr):
            raise TypeError(f"term {self.key!r}: expr must be a SymPy expression")

    def replace(self, **changes: object) -> Term:
        """A copy with some fields changed."""
        fields = {**self.__dict__, **changes}
        return Term(**fields)  # type: ignore[arg-type]
