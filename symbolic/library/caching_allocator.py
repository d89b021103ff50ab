"""A replay of PyTorch's CUDA caching allocator: what it reserves for a sequence of allocations and frees.

Why: the planner counts tensor bytes, but a GPU fills up with what the allocator *reserves*:
blocks rounded up to 512 bytes, segments rounded up to 2 MiB or 20 MiB, and free blocks that sit
inside segments that other live blocks keep. This module replays an allocation trace through the
allocator's own rules (``c10/cuda/CUDACachingAllocator.cpp`` of torch 2.13.0, default
configuration: no ``max_split_size_mb``, no ``roundup_power2_divisions``, no expandable segments)
so that the runtime's fragmentation allowance can be checked against the allocation
sequences of real training steps, which ``symbolic.measured.allocator_trace`` records on the CPU.

The rules replayed:

- ``round_size``: a request is rounded up to a multiple of 512 bytes (at least 512).
- Pools: requests of at most 1 MiB go to the small pool, larger ones to the large pool.
- Streams: every block keeps the stream it was allocated on (``Block::stream``), and a pool's free
  blocks are ordered by stream first (``BlockComparatorSize``), so ``get_free_block`` only hands a
  request a free block of the request's own stream (it returns none when the best candidate's
  ``stream != p.stream()``); a freed block returns to its allocation stream's free blocks whichever
  stream frees it. A block cached by one stream is reserved beside what another stream allocates
  (FSDP2's side streams: ``fsdp.stream_pools_term``). Events default to one stream, so a trace
  without streams replays as before.
- ``get_free_block``: the smallest cached free block of the pool and stream that fits (ties: lowest
  address).
- ``get_allocation_size``: when none fits, a new segment is reserved (``cudaMalloc``): 2 MiB for
  the small pool, 20 MiB for requests under 10 MiB, else the request rounded up to 2 MiB.
- ``should_split``: the rest of a block becomes a free block when it is at least 512 bytes (small
  pool) or more than 1 MiB (large pool); otherwise the whole block is handed out (and counted in
  ``memory_allocated``).
- ``free_block``: a freed block merges with free neighbours of its own segment.
- Out of memory (``capacity`` given): when a new segment would not fit, the allocator returns every
  cached segment that is wholly free to CUDA (``release_cached_blocks``; with no
  ``max_split_size_mb`` the first, partial release does nothing) and tries once more; if that
  fails too, the step runs out of memory (``OutOfMemory``).

Without a capacity the reserved peak is what a GPU with room to spare shows (an upper bound);
``min_capacity`` finds the least memory with which the allocator serves the whole trace: the
number a fit question needs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .runtime import LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE


def round_size(nbytes: int) -> int:
    """The block size the allocator uses for a request of ``nbytes`` (``round_size``)."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def allocation_size(size: int) -> int:
    """The segment the allocator reserves when no cached block fits a block of ``size`` (``get_allocation_size``)."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass
class _Block:
    addr: int
    size: int
    small: bool
    stream: object = 0
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class Stats:
    """Peaks of a replay, in bytes."""

    requested: int  # peak of the live requests' own sizes (what a planner counts)
    allocated: int  # peak of memory_allocated (block sizes)
    reserved: int  # peak of memory_reserved (segments)
    segments: int  # segments reserved at the end


class OutOfMemory(Exception):
    """The replay needed a segment that does not fit in its capacity, even after releasing the cache."""


class CachingAllocator:
    """One device's caching allocator, replayed: ``malloc`` and ``free`` by key, with running totals."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self._free: dict[tuple[bool, object], list[tuple[int, int, _Block]]] = {}
        self._live: dict[object, tuple[_Block, int]] = {}
        self._next_addr = 0
        self.requested = self.allocated = self.reserved = 0
        self.peak_requested = self.peak_allocated = self.peak_reserved = 0
        self.segments = 0
        self.stream_reserved: dict[object, int] = {}  # segments reserved now, by the stream that reserved them

    def _insert(self, block: _Block) -> None:
        bisect.insort(self._free.setdefault((block.small, block.stream), []), (block.size, block.addr, block))

    def _remove(self, block: _Block) -> None:
        pool = self._free[block.small, block.stream]
        i = bisect.bisect_left(pool, (block.size, block.addr))
        assert pool[i][2] is block
        del pool[i]

    def malloc(self, key: object, nbytes: int, stream: object = 0) -> None:
        """Allocate ``nbytes`` under ``key`` on ``stream`` (a key in use is an error)."""
        if key in self._live:
            raise ValueError(f"key {key!r} is already allocated")
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free.setdefault((small, stream), [])
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:
            seg = allocation_size(size)
            if self.capacity is not None and self.reserved + seg > self.capacity:
                self._release_cached()
                if self.reserved + seg > self.capacity:
                    raise OutOfMemory(f"{seg} bytes more do not fit in {self.capacity}")
            block = _Block(self._next_addr, seg, small, stream)
            self._next_addr += seg
            self.reserved += seg
            self.stream_reserved[stream] = self.stream_reserved.get(stream, 0) + seg
            self.segments += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            rest = _Block(block.addr + size, remaining, small, block.stream, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.allocated = True
        self._live[key] = (block, nbytes)
        self.requested += nbytes
        self.allocated += block.size
        self.peak_requested = max(self.peak_requested, self.requested)
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        """Free what ``key`` holds; its block merges with free neighbours of its segment."""
        block, nbytes = self._live.pop(key)
        self.requested -= nbytes
        self.allocated -= block.size
        block.allocated = False
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._remove(other)
                if other is block.prev:
                    other.size += block.size
                    other.next = block.next
                    if block.next is not None:
                        block.next.prev = other
                    block = other
                else:
                    block.size += other.size
                    block.next = other.next
                    if other.next is not None:
                        other.next.prev = block
        self._insert(block)

    def _release_cached(self) -> None:
        """Return every wholly free segment to CUDA (``release_cached_blocks``)."""
        for where, pool in self._free.items():
            keep = []
            for entry in pool:
                block = entry[2]
                if block.prev is None and block.next is None:
                    self.reserved -= block.size
                    self.stream_reserved[block.stream] -= block.size
                    self.segments -= 1
                else:
                    keep.append(entry)
            self._free[where] = keep

    def stats(self) -> Stats:
        """The peaks so far."""
        return Stats(self.peak_requested, self.peak_allocated, self.peak_reserved, self.segments)


def replay(events: Iterable[tuple], capacity: int | None = None) -> Stats:
    """Replay ``("alloc", key, nbytes)`` and ``("free", key, 0)`` events; the peaks they reach.

    An alloc event may name its stream as a fourth item (``("alloc", key, nbytes, stream)``; default
    0). With ``capacity`` (bytes the allocator may reserve), raises ``OutOfMemory`` where a real step
    would run out of memory.
    """
    allocator = CachingAllocator(capacity)
    for kind, key, nbytes, *stream in events:
        if kind == "alloc":
            allocator.malloc(key, nbytes, *stream)
        elif kind == "free":
            allocator.free(key)
        else:
            raise ValueError(f"unknown event {kind!r}")
    return allocator.stats()


def min_capacity(events: Sequence[tuple], step: int = 1) -> int:
    """The least memory (exact to ``step`` bytes) with which the allocator serves ``events`` without running out."""
    free = replay(events)
    low, high = free.requested, free.reserved  # fails below the live bytes; succeeds with room to spare
    low = max(0, low - 1)
    while high - low > step:
        mid = (low + high) // 2
        try:
            replay(events, mid)
        except OutOfMemory:
            low = mid
        else:
            high = mid
    return high
