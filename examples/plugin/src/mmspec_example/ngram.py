"""N-gram lookup over a growing token sequence: where the latest earlier occurrence of the
sequence's last n tokens continues (the search of prompt lookup decoding).

A negative entry is a barrier (a visual token): no n-gram holding one is indexed, and no
occurrence followed by one is, so a match never covers a visual position and its continuation
never starts on one.
"""

from __future__ import annotations


class NgramIndex:
    """The latest occurrence of every n-gram (min_n <= n <= max_n) of `tokens` that is followed
    by a token, updated in O(max_n) a token."""

    def __init__(self, min_n: int, max_n: int):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram lengths need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.sizes = range(max_n, min_n - 1, -1)  # longest first: the most specific match wins
        self.tokens: list[int] = []
        self.latest: dict[tuple[int, ...], int] = {}  # n-gram -> where its continuation starts

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens)  # the n-grams ending here are now followed by `token`
            self.tokens.append(token)
            if token < 0:
                continue
            for n in self.sizes:
                if end >= n:
                    gram = tuple(self.tokens[end - n : end])
                    if min(gram) >= 0:
                        self.latest[gram] = end

    def match(self) -> int | None:
        """Where the latest earlier occurrence of the longest indexed suffix continues (an index
        into `tokens`, below its length), or None when no suffix of min_n..max_n tokens recurs."""
        for n in self.sizes:
            if len(self.tokens) > n:
                start = self.latest.get(tuple(self.tokens[-n:]))
                if start is not None:
                    return start
        return None
