"""What a plan is checked against: a GPU's capacity times a fraction, minus named reservations.

A whole GPU is the default budget (fraction 1, nothing reserved), and every answer with it is
the one the GPU alone gives. A fraction says what a serving engine may take (vLLM's
``gpu_memory_utilization``, 0 < f ≤ 1); a reservation names memory something else holds
("another process, 2 GiB"). Usable bytes = ⌊capacity × fraction⌋ − Σ reservations, a whole
number: the fraction's share is rounded down, and a size that is not a whole number of bytes
(``20.24GiB``) is rounded down too for a capacity and up for a reservation, each with a note, so
the budget never claims a byte the GPU does not have.

Which total: a plan is checked against the catalogue's ``bytes`` (nvidia-smi's total). A serving
engine reads CUDA's total instead (vLLM's ``gpu_memory_utilization`` × ``cudaMemGetInfo``'s total,
SGLang's and llama.cpp's free memory), a few hundred MiB lower: ``over_cuda()`` is the same budget
over ``GPU.cuda_total``. Training plans keep nvidia-smi's number, a choice: PyTorch's allocator can
only get what CUDA gives, so a training verdict is an upper bound by the difference (0.47 GiB on an
H100), but every training verdict and table built on them (docs/accuracy.md) is stated against
nvidia-smi's total, and moving them all at once belongs with the training side, not with the
serving engines (``symbolic gpus`` shows both numbers; ``--gpu`` with CUDA's total gives the
strict verdict). ``--gpu 79.18GiB`` means exactly that many bytes in both::

    from symbolic.catalogs import make_budget
    b = make_budget("l4", fraction="0.9", reserve={"other-process": "1GiB"})
    b.bytes, b.gpu.name, b.describe(), b.notes, b.as_dict()
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from ..core.errors import UserError, quote, single_line
from ..core.units import exact_decimal_text, exact_size, floor_size, format_bytes, is_size
from ..core.values import parse_number
from .gpu import GPU
from .gpus import get

GIVEN_HERE = "given on the command line or in Python"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")  # a reservation's name: one short word


class BudgetError(UserError):
    """A fraction, a reservation or a budget that leaves nothing: one line, exit 2."""


@dataclass(frozen=True)
class Reservation:
    """Memory a plan may not use: a name, whole bytes, and where the number comes from."""

    name: str
    bytes: int
    source: str = GIVEN_HERE

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"name": self.name, "bytes": self.bytes, "human": format_bytes(self.bytes), "source": self.source}


@dataclass(frozen=True)
class Budget:
    """Usable bytes of one GPU: ⌊capacity × fraction⌋ − Σ reservations; ``gpu`` holds the rates."""

    gpu: GPU
    fraction: Fraction = Fraction(1)
    reservations: tuple[Reservation, ...] = ()
    size_notes: tuple[str, ...] = ()  # how sizes given as text were rounded to whole bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "fraction", as_fraction(self.fraction))
        names = [r.name for r in self.reservations]
        for name in names:
            if names.count(name) > 1:
                raise BudgetError(f"reservation {quote(name)} is given twice; give each name once")
        if self.bytes < 1:
            raise BudgetError(f"the reservations ({self.reserved:,} bytes = {format_bytes(self.reserved)}) leave "
                              f"nothing of {self._scaled_text()}: reserve less, or give a larger GPU or fraction")

    @property
    def capacity(self) -> int:
        """The GPU's whole memory in bytes, before the fraction and the reservations."""
        return self.gpu.bytes

    @property
    def scaled(self) -> int:
        """⌊capacity × fraction⌋: what the fraction leaves, before the reservations."""
        return math.floor(self.capacity * self.fraction)

    @property
    def reserved(self) -> int:
        """The reservations together, in bytes."""
        return sum(r.bytes for r in self.reservations)

    @property
    def bytes(self) -> int:
        """Usable bytes: what every plan is compared against."""
        return self.scaled - self.reserved

    @property
    def whole(self) -> bool:
        """Whether this is the whole GPU (fraction 1, nothing reserved): answers then read as the GPU's own."""
        return self.fraction == 1 and not self.reservations

    @property
    def label(self) -> str:
        """The GPU's name, or '90% of l4 less other-process': short, for answers and table headings."""
        text = self.gpu.name if self.fraction == 1 else f"{percent(self.fraction)} of {self.gpu.name}"
        if self.reservations:
            text += " less " + ", ".join(r.name for r in self.reservations)
        return text

    @property
    def notes(self) -> tuple[str, ...]:
        """How the number was reached wherever it is not plain: rounding, the fraction, each reservation."""
        out = list(self.size_notes)
        exact = self.capacity * self.fraction
        if self.fraction != 1:
            rounded = f"; rounded down to {self.scaled:,}" if exact.denominator != 1 else ""
            out.append(f"{percent(self.fraction)} of {self.gpu.name}'s {self.capacity:,} bytes is "
                       f"{exact_decimal_text(exact)} bytes{rounded}")
        out += [f"reserved {r.name}: {r.bytes:,} bytes = {format_bytes(r.bytes)} ({r.source})" for r in self.reservations]
        return tuple(out)

    def over_cuda(self) -> Budget:
        """This budget over CUDA's total memory (``GPU.cuda_total``), what serving engines read; itself where equal."""
        gpu = self.gpu
        if gpu.cuda_total == gpu.bytes:
            return self
        return Budget(replace(gpu, bytes=gpu.cuda_total, basis="cuda"), self.fraction, self.reservations,
                      self.size_notes)

    def lines(self) -> tuple[str, ...]:
        """What a command prints under its answer: ``describe()`` unless the whole GPU, then the notes."""
        return (() if self.whole else (self.describe(),)) + self.notes

    def describe(self) -> str:
        """One line: the usable bytes and how they follow from the GPU, the fraction and the reservations."""
        head = f"{self.bytes:,} bytes = {format_bytes(self.bytes)}"
        if self.whole:
            return f"{head}: all of {self.gpu.name} ({self.gpu.basis})"
        parts = [f"{self.gpu.name}'s {format_bytes(self.capacity)} ({self.gpu.basis})"]
        if self.fraction != 1:
            parts[0] = f"{percent(self.fraction)} of " + parts[0]
        parts += [f"less {r.name} {format_bytes(r.bytes)}" for r in self.reservations]
        return f"{head}: " + " ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON: the usable bytes and every part of them."""
        return {"bytes": self.bytes, "human": format_bytes(self.bytes), "gpu": self.gpu.name,
                "capacity_bytes": self.capacity, "fraction": _plain(self.fraction), "scaled_bytes": self.scaled,
                "reservations": [r.as_dict() for r in self.reservations], "describe": self.describe(),
                "notes": list(self.notes)}

    def _scaled_text(self) -> str:
        whose = f"{self.gpu.name}'s {self.capacity:,} bytes"
        return whose if self.fraction == 1 else f"{percent(self.fraction)} of {whose} ({self.scaled:,} bytes)"


def percent(fraction: Fraction) -> str:
    """'90%', '92.5%': a fraction as the percentage people write (up to 4 decimals)."""
    value = fraction * 100
    if value.denominator == 1:
        return f"{value.numerator}%"
    return f"{float(value):.4f}".rstrip("0").rstrip(".") + "%"


def _plain(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else float(value)


def as_fraction(value: object, what: str = "GPU fraction") -> Fraction:
    """0 < f ≤ 1 from a number or a decimal text ("0.9", "9/10"); a one-line error otherwise."""
    if isinstance(value, bool):
        raise BudgetError(f"{what} must be a number above 0 and at most 1, got {value!r}")
    if isinstance(value, Fraction):
        number = value
    elif isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BudgetError(f"{what} must be a number above 0 and at most 1, got {value!r}")
        number = Fraction(repr(value))  # 0.9 as written, not its binary neighbour
    elif isinstance(value, str):
        text = value.strip()
        try:
            rational = parse_number(text, what)
        except UserError:
            raise BudgetError(f"{what} must be a number above 0 and at most 1 (e.g. 0.9), got {quote(text)}") from None
        number = Fraction(int(rational.p), int(rational.q))
    else:
        raise BudgetError(f"{what} must be a number above 0 and at most 1, got {type(value).__name__}")
    if not 0 < number <= 1:
        raise BudgetError(f"{what} must be above 0 and at most 1 (like vLLM's gpu_memory_utilization), "
                          f"got {_plain(number):g}")
    return number


def reservation(name: str, size: object, source: str = GIVEN_HERE) -> tuple[Reservation, str]:
    """One reservation, and a note when its size was not whole bytes (rounded up: the budget must not grow)."""
    name = single_line(str(name).strip())
    if not _NAME.match(name):
        raise BudgetError(f"reservation name {quote(name)} must be one short word (letters, digits, - _ . : +), "
                          "e.g. other-process=2GiB")
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise BudgetError(f"reservation {name} must be a size such as 2GiB, got {type(size).__name__}")
    if isinstance(size, int):
        if size < 1:
            raise BudgetError(f"reservation {name} must be a positive size, got {size}")
        return Reservation(name, size, single_line(source)), ""
    text = size.strip()
    if text.startswith("-"):
        raise BudgetError(f"reservation {name} must be a positive size, got {quote(text)}")
    value = exact_size(text, flag=f"reservation {name}")
    whole = math.ceil(value)
    note = "" if value.denominator == 1 else (f"reservation {name} {quote(text)} is {exact_decimal_text(value)} bytes; "
                                              f"rounded up to {whole:,}")
    return Reservation(name, whole, single_line(source)), note


def parse_reserve(text: str) -> tuple[str, str]:
    """NAME=SIZE (the command line's ``--reserve``) as its two halves; a one-line error without '='."""
    name, sep, size = text.partition("=")
    if not sep or not name.strip() or not size.strip():
        raise BudgetError(f"--reserve expects NAME=SIZE, e.g. other-process=2GiB, got {quote(text)}")
    return name.strip(), size.strip()


Reserve = Mapping[str, object] | Iterable[Reservation | tuple[str, object] | tuple[str, object, str]]


def make_budget(gpu: object, fraction: object = 1, reserve: Reserve | None = None,
           source: str = GIVEN_HERE) -> Budget:
    """A Budget from a GPU, a Budget, a catalogue name, a size ("20.24GiB") or a custom GPU .toml file.

    ``reserve``: {name: size} or (name, size[, source]) pairs or Reservations; sizes are bytes or
    text such as "2GiB". A Budget given with a fraction or reservations gets them on top of its own.
    """
    notes: list[str] = []
    if isinstance(gpu, Budget):
        base = gpu
    else:
        if isinstance(gpu, str):
            record = get(gpu)
            text = gpu.strip()
            if text[:1].isdigit() and is_size(text):
                notes += [n for n in (floor_size(text, flag="GPU")[1],) if n]
        elif isinstance(gpu, GPU):
            record = gpu
        else:
            raise BudgetError(f"a budget needs a GPU, its name or a size such as 80GiB, got {type(gpu).__name__}")
        base = Budget(record, size_notes=tuple(notes))
    extra: list[Reservation] = []
    for item in (reserve.items() if isinstance(reserve, Mapping) else reserve or ()):
        if isinstance(item, Reservation):
            extra.append(item)
            continue
        res, note = reservation(item[0], item[1], item[2] if len(item) > 2 else source)  # type: ignore[misc]
        extra.append(res)
        if note:
            notes.append(note)
    if as_fraction(fraction) == 1 and not extra:
        return base
    return Budget(base.gpu, base.fraction * as_fraction(fraction), base.reservations + tuple(extra),
                  tuple(dict.fromkeys(base.size_notes + tuple(notes))))


def as_budget(value: GPU | Budget) -> Budget:
    """``value`` as a Budget: a GPU becomes the whole of it."""
    return value if isinstance(value, Budget) else Budget(value)
