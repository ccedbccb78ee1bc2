"""How the eager attention of a training forward splits its queries (``text_attention.BlockedAttention``), in a module
that imports nothing, for the memory estimate too (``paddle_r1/memory.py``).

From ``2 * QUERY_BLOCK`` queries on, under a mask per query (causal), the queries go in blocks of ``QUERY_BLOCK``, each
over the keys up to its last query's position; below that, one block takes the whole [L, S] square.
"""
from __future__ import annotations

from typing import Iterator

QUERY_BLOCK = 256  # query rows per block


def in_blocks(queries: int) -> bool:
    """Whether ``queries`` queries under a mask per query attend in blocks."""
    return queries >= 2 * QUERY_BLOCK


def query_blocks(queries: int, keys: int) -> Iterator[tuple[int, int, int]]:
    """(first query, queries, keys visible to the block) per block of ``QUERY_BLOCK`` queries, query i at key
    position keys - queries + i."""
    for start in range(0, queries, QUERY_BLOCK):
        size = min(QUERY_BLOCK, queries - start)
        yield start, size, keys - queries + start + size
