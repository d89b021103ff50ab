"""A GGUF file's header, read with bounds: its metadata and its tensors' names, shapes, types and bytes.

The tensor data is never read: only the header (magic, version, counts, key/value pairs, tensor
infos), which ends before the first tensor's bytes. The layout is ggml's, read from ggml-org/ggml
at commit d99724f2b141fed9e1a9f402213506c081433465 (the repository llama.cpp's ``ggml/`` is synced
with): ``include/gguf.h`` (the layout comment, ``enum gguf_type``, ``GGUF_VERSION 3``,
``GGUF_DEFAULT_ALIGNMENT 32``) and ``src/gguf.cpp`` (``gguf_init_from_reader``: what a reader must
refuse). Versions 2 and 3 have this layout on a little-endian machine; version 1 (32-bit counts) is
refused, as ggml refuses it.

Bounds, each a one-line ``GgufError`` (exit 2) when passed: the header is at most ``MAX_HEADER_BYTES``
(256 MiB: a tokenizer's arrays are the header's bulk, 262,144 token strings and their scores for
Gemma-3, some MB; a quarter GiB leaves two orders of magnitude), a string at most the rest of that
bound, an array at most ggml's ``GGUF_MAX_ARRAY_ELEMENTS`` (2^30) elements, a tensor name under
ggml's ``GGML_MAX_NAME`` (64), at most ``GGML_MAX_DIMS`` (4) dimensions whose product fits in an
int64, a known ggml type whose block divides the row. The file is read in chunks of 64 KiB, so at most
that much past the header is read. Arrays of more than ``KEEP_ARRAY`` elements
(``tokenizer.ggml.tokens``, ``merges``, ``scores``) are stepped over, only their length kept.
"""

from __future__ import annotations

import os
import stat
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import InputFileError, shorten, single_line
from ..core.userfiles import file_problem
from .ggml import GGML_TYPES

COMMIT = "d99724f2b141fed9e1a9f402213506c081433465"
WHERE = f"https://github.com/ggml-org/ggml/blob/{COMMIT}/src/gguf.cpp"
WHAT = "a GGUF file"

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # gguf.cpp refuses 1 (32-bit counts) and anything above GGUF_VERSION (3)
DEFAULT_ALIGNMENT = 32  # gguf.h GGUF_DEFAULT_ALIGNMENT
ALIGNMENT_KEY = "general.alignment"
MAX_HEADER_BYTES = 256 * 2**20
MAX_ARRAY = 2**30  # gguf.cpp GGUF_MAX_ARRAY_ELEMENTS
MAX_NAME = 64  # ggml.h GGML_MAX_NAME: a tensor name is shorter
MAX_DIMS = 4  # ggml.h GGML_MAX_DIMS
MAX_COUNT = 2**20  # tensors, and key/value pairs: DeepSeek-V3 has about 1,100 tensors
CHUNK = 2**16
KEEP_ARRAY = 4096  # arrays up to this many elements are kept (per-layer values); longer ones only counted
_INT64_MAX = 2**63 - 1

# enum gguf_type (gguf.h): id -> (name, struct format of one element; "" for string and array)
VALUE_TYPES: dict[int, tuple[str, str]] = {
    0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"), 4: ("u32", "<I"), 5: ("i32", "<i"),
    6: ("f32", "<f"), 7: ("bool", "<b"), 8: ("str", ""), 9: ("arr", ""), 10: ("u64", "<Q"), 11: ("i64", "<q"),
    12: ("f64", "<d"),
}
STRING, ARRAY, BOOL, U32 = 8, 9, 7, 4
_TYPE_BY_ID = {t.type_id: t for t in GGML_TYPES.values()}
_U64 = struct.Struct("<Q")


class GgufError(InputFileError):
    """A GGUF file that cannot be read as one (missing, malformed, truncated, over a bound): one line, exit 2."""


@dataclass(frozen=True)
class SkippedArray:
    """A long array the reader stepped over (a tokenizer's tokens, merges, scores): its element type and length."""

    element: str  # the gguf_type name ("str", "f32", "i32")
    length: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header lists it: name, ``ne`` (ne0 first, the row length), ggml type, offset and bytes."""

    name: str
    shape: tuple[int, ...]
    type: str  # the ggml type's name ("Q4_K")
    offset: int  # from the start of the data section
    nbytes: int  # ggml_nbytes: whole blocks, rows of ne0 / blck_size blocks

    @property
    def elements(self) -> int:
        """Numbers the tensor holds."""
        return prod(self.shape)


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF file's header: version, metadata, tensors, alignment, where the data starts and the file's size."""

    path: Path
    version: int
    metadata: Mapping[str, Any]  # key -> value (int, float, bool, str, a short list, or a SkippedArray)
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int  # the header's bytes, padded to the alignment
    file_bytes: int
    value_types: Mapping[str, str] = field(default_factory=dict)  # key -> gguf_type name ("u32", "arr[str]")

    @property
    def data_bytes(self) -> int:
        """The data section's bytes: every tensor padded to the alignment, as gguf.cpp sums them."""
        return sum(-(-t.nbytes // self.alignment) * self.alignment for t in self.tensors)

    @property
    def complete(self) -> bool:
        """Whether the file holds every tensor's bytes (a header-only or cut-off file does not)."""
        return self.file_bytes >= self.data_offset + self.data_bytes

    def bytes_by_type(self) -> dict[str, int]:
        """Tensor bytes by ggml type, most bytes first."""
        out: Counter[str] = Counter()
        for t in self.tensors:
            out[t.type] += t.nbytes
        return dict(out.most_common())


class _Reader:
    """Exact little-endian reads from a file, refused past ``MAX_HEADER_BYTES`` or the file's end.

    The file is read in chunks of ``CHUNK`` bytes (a tokenizer's hundreds of thousands of strings are
    then stepped over in memory), so at most one chunk past the header's end is ever read.
    """

    def __init__(self, handle: BinaryIO, path: Path, size: int) -> None:
        self.handle, self.path, self.size, self.pos = handle, path, size, 0
        self.limit = min(size, MAX_HEADER_BYTES)
        self.buf, self.start = b"", 0  # the bytes read and not yet passed, from file offset ``start``

    def fail(self, message: str) -> GgufError:
        return GgufError(f"{self.path}: {message} (at byte {self.pos:,}); not a readable GGUF file")

    def _room(self, n: int, what: str) -> None:
        if self.pos + n > self.limit:
            if self.pos + n > self.size:
                raise self.fail(f"truncated: {what} needs {n:,} bytes, {max(self.size - self.pos, 0):,} are left")
            raise self.fail(f"{what} of {n:,} bytes runs past the header bound of {MAX_HEADER_BYTES:,} bytes")

    def take(self, n: int, what: str) -> bytes:
        self._room(n, what)
        end = self.start + len(self.buf)
        if self.pos + n > end:  # read on from where the last chunk ended, keeping what is not yet passed
            self.handle.seek(end)
            more = self.handle.read(max(self.pos + n - end, CHUNK))
            self.buf, self.start = self.buf[self.pos - self.start:] + more, self.pos
            if len(self.buf) < n:
                raise self.fail(f"truncated: {what} needs {n:,} bytes, the file gave {len(self.buf):,}")
        i = self.pos - self.start
        self.pos += n
        return self.buf[i:i + n]

    def skip(self, n: int, what: str) -> None:
        self._room(n, what)
        self.pos += n
        if self.pos > self.start + len(self.buf):  # past the chunk: the next read starts there
            self.buf, self.start = b"", self.pos

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def length(self, what: str) -> int:
        return int(self.scalar("<Q", f"the length of {what}"))

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.length(what)
        if limit is not None and n >= limit:
            raise self.fail(f"{what} is {n:,} bytes long; ggml allows fewer than {limit}")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def skip_strings(self, count: int, what: str) -> None:
        """Step over ``count`` strings (length, bytes): in the chunk in hand without a call per string."""
        unpack = _U64.unpack_from
        buf, start, pos = self.buf, self.start, self.pos
        end = min(start + len(buf), self.limit)
        for j in range(count):
            if pos + 8 <= end:
                n = unpack(buf, pos - start)[0]
                if pos + 8 + n <= end:
                    pos += 8 + n
                    continue
            self.pos = pos  # across a chunk's end (or past a bound): the checked reads
            self.skip(self.length(f"element {j} of {what}"), f"element {j} of {what}")
            buf, start, pos = self.buf, self.start, self.pos
            end = min(start + len(buf), self.limit)
        self.pos = pos


def read_header(path: str | os.PathLike[str]) -> GgufHeader:
    """The header of the GGUF file at ``path`` (never its tensor data); anything unreadable is one ``GgufError``."""
    p = Path(path)
    problem = file_problem(p, WHAT)
    if problem:
        raise GgufError(problem)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise GgufError(f"{p}: cannot be read ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced between the check and the open
            raise GgufError(f"{p}: is not a regular file, not {WHAT}")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        if info.st_size == 0:
            raise GgufError(f"{p}: is empty (expected {WHAT})")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as handle:
            return _parse(_Reader(handle, p, info.st_size))
    except OSError as err:
        raise GgufError(f"{p}: cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def _parse(r: _Reader) -> GgufHeader:
    magic = r.take(4, "the magic")
    if magic != MAGIC:
        raise GgufError(f"{r.path}: starts with {magic!r}, not GGUF's magic b'GGUF': not {WHAT}")
    version = r.scalar("<I", "the version")
    if version and not version & 0xFFFF:
        raise r.fail(f"version {version:#x} is a big-endian file's; only little-endian files are read")
    if version not in VERSIONS:
        raise r.fail(f"GGUF version {version} is not read (versions {', '.join(map(str, VERSIONS))})")
    n_tensors = _count(r, "tensors")
    n_kv = _count(r, "key/value pairs")
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for i in range(n_kv):
        key = r.string(f"key {i + 1}")
        if not key or key in metadata:
            raise r.fail(f"key {i + 1} is {'empty' if not key else 'repeated: ' + repr(shorten(single_line(key)))}")
        metadata[key], types[key] = _value(r, key)
    alignment = _alignment(r, metadata, types)
    tensors = _tensors(r, n_tensors, alignment)
    data_offset = -(-r.pos // alignment) * alignment if tensors else r.pos
    return GgufHeader(r.path, version, metadata, tensors, alignment, data_offset, r.size, types)


def _count(r: _Reader, what: str) -> int:
    n = r.scalar("<q", f"the number of {what}")
    if not 0 <= n <= MAX_COUNT:
        raise r.fail(f"the number of {what} is {n:,}; read are 0 to {MAX_COUNT:,}")
    return int(n)


def _value(r: _Reader, key: str) -> tuple[Any, str]:
    """One value (a scalar, a string, or an array: kept when short, else stepped over) and its type's name."""
    what = f"the value of {shorten(single_line(key))!r}"
    type_id = r.scalar("<i", f"the type of {what}")
    if type_id not in VALUE_TYPES:
        raise r.fail(f"{what} has the unknown GGUF value type {type_id}")
    if type_id != ARRAY:
        return _scalar(r, type_id, what), VALUE_TYPES[type_id][0]
    element = r.scalar("<i", f"the element type of {what}")
    if element not in VALUE_TYPES or element == ARRAY:
        raise r.fail(f"{what} is an array of the unknown or nested GGUF value type {element}")
    n = r.length(f"{what} (an array)")
    if n > MAX_ARRAY:
        raise r.fail(f"{what} is an array of {n:,} elements; ggml allows at most {MAX_ARRAY:,}")
    name, fmt = VALUE_TYPES[element]
    label = f"arr[{name}]"
    if n > KEEP_ARRAY:
        if element == STRING:
            r.skip_strings(n, what)
        else:
            r.skip(n * struct.calcsize(fmt), what)
        return SkippedArray(name, n), label
    if element != STRING:  # the bytes first, so a huge count in a short file fails before any loop
        r._room(n * struct.calcsize(fmt), what)
    return [_scalar(r, element, f"element {j} of {what}") for j in range(n)], label


def _scalar(r: _Reader, type_id: int, what: str) -> Any:
    if type_id == STRING:
        return r.string(what)
    value = r.scalar(VALUE_TYPES[type_id][1], what)
    return bool(value) if type_id == BOOL else value


def _alignment(r: _Reader, metadata: Mapping[str, Any], types: Mapping[str, str]) -> int:
    """general.alignment (a u32 power of two, as gguf.cpp requires), else 32."""
    if ALIGNMENT_KEY not in metadata:
        return DEFAULT_ALIGNMENT
    value = metadata[ALIGNMENT_KEY]
    if types[ALIGNMENT_KEY] != VALUE_TYPES[U32][0] or value <= 0 or value & (value - 1):
        raise r.fail(f"{ALIGNMENT_KEY} must be a u32 power of two, got {shorten(value)} ({types[ALIGNMENT_KEY]})")
    return int(value)


def _tensors(r: _Reader, count: int, alignment: int) -> tuple[TensorInfo, ...]:
    out: list[TensorInfo] = []
    names: set[str] = set()
    expected = 0  # gguf.cpp: each tensor starts where the previous one, padded, ends
    for i in range(count):
        name = r.string(f"the name of tensor {i + 1}", limit=MAX_NAME)
        if name in names:
            raise r.fail(f"tensor name {name!r} is repeated")
        names.add(name)
        t = _tensor(r, name)
        if t.offset != expected:
            raise r.fail(f"tensor {name!r} starts at offset {t.offset:,} of the data section; ggml expects {expected:,}")
        expected += -(-t.nbytes // alignment) * alignment
        out.append(t)
    return tuple(out)


def _tensor(r: _Reader, name: str) -> TensorInfo:
    what = f"tensor {name!r}"
    n_dims = r.scalar("<I", f"the number of dimensions of {what}")
    if n_dims > MAX_DIMS:
        raise r.fail(f"{what} has {n_dims:,} dimensions; ggml allows at most {MAX_DIMS}")
    shape = tuple(r.scalar("<q", f"dimension {j} of {what}") for j in range(n_dims))
    if any(n < 0 for n in shape):
        raise r.fail(f"{what} has a negative dimension: {shape}")
    if prod(shape) > _INT64_MAX:
        raise r.fail(f"{what} of shape {shape} has more numbers than an int64 counts")
    type_id = r.scalar("<i", f"the type of {what}")
    ggml = _TYPE_BY_ID.get(type_id)
    if ggml is None:
        raise r.fail(f"{what} has the unknown ggml type id {type_id}")
    row = shape[0] if shape else 1
    if row % ggml.block_size:
        raise r.fail(f"{what} is {ggml.name}, whose blocks hold {ggml.block_size} numbers, with rows of {row:,}")
    offset = r.scalar("<Q", f"the offset of {what}")
    nbytes = prod(shape) // ggml.block_size * ggml.type_size  # ggml_nbytes of a contiguous tensor
    return TensorInfo(name, shape, ggml.name, int(offset), nbytes)
