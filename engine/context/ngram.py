"""Token n-gram counts, Witten-Bell estimates, nested cache scopes and longest-match drafts.

The nested cache model of Hellendoorn & Devanbu ("Are deep neural networks the best choice for
modeling source code?", FSE 2017; their SLP-Core toolkit): n-gram counts over token ids of nested
scopes (the current document, the other open documents, a slice of the workspace), innermost scope
first, each scope's estimate mixed with the next outer one by its own confidence. Pure Python (no
torch): the engine turns a :class:`Prediction` into a logit adjustment (:func:`engine.decode.mix_cache`).

Terms: an *n-gram* of order ``n`` is ``n`` consecutive token ids; its *context* (history) is the
first ``n - 1`` of them and its *next token* the last. ``c(h)`` is how often context ``h`` was
followed by anything, ``T(h)`` by how many distinct tokens.

Estimate (interpolated Witten-Bell, Chen & Goodman 1998, eq. 17), for a context ``h`` with
``c(h) > 0`` and ``h'`` = ``h`` without its first token::

    P(w | h) = (c(h, w) + T(h) * P(w | h')) / (c(h) + T(h))

down to the empty context, whose lower order is the uniform ``1 / vocab_size``; a context never seen
passes ``P(w | h')`` through. The *confidence* of a scope at a history is Witten-Bell's own weight of
the seen counts, ``c(h) / (c(h) + T(h))``, at the longest context of the history it has seen.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

ORDER = 6  # longest n-gram (5 tokens of context), as in SLP-Core's default for code
MIN_CONTEXT = 2  # tokens of context a scope must match before it predicts (unigrams and bigrams are noise here)
# ... for scopes other than the current document: with 2, sibling files' short matches cost useful
# completions on the bench's workspace kind (0.167 vs 0.217 with the document alone, 60 tasks);
# with 3, 4 or 5 they no longer did (0.217)
OUTER_MIN_CONTEXT = 3
CANDIDATES = 8  # next tokens per scope handed to the interpolation (the most frequent after the context)


def _tail(ids, n: int) -> list[int]:
    """The last ``n`` items of ``ids`` as a list (all of them when shorter; none when ``n`` <= 0)."""
    return list(ids[max(0, len(ids) - n):]) if n > 0 else []


def _suffixes(history, order: int) -> list[tuple]:
    """The suffixes of ``history``'s last ``order - 1`` ids as contexts, shortest (``()``) first."""
    hist = tuple(_tail(history, order - 1))
    return [hist[len(hist) - k:] for k in range(len(hist) + 1)]


def _wb(chain: list[tuple[dict, int, int]], token: int, base: float) -> float:
    """Interpolated Witten-Bell over a :meth:`NgramCounts.chain`, lower orders first, from ``base``."""
    p = base
    for followers, c, t in chain:
        p = (followers.get(token, 0) + t * p) / (c + t)
    return p


def _common_length(a, b, same, limit: int) -> int:
    """The largest ``m <= limit`` with ``same(m)`` (monotone: true up to some length), by bisection
    over list slice comparisons (C speed; a Python loop per id cost ~0.3 ms per keystroke)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class NgramCounts:
    """n-gram counts (orders ``1..order``) over any number of keyed id sequences, kept incrementally.

    :meth:`set` replaces one sequence (a document's ids) and only touches the n-grams that changed:
    those that overlap the part between the old and the new ids' common prefix and common suffix, so
    typing a character costs about ``order ** 2`` dictionary updates, not a recount of the document.
    N-grams never cross sequences (the prefix and the suffix of the current document are two
    sequences: nothing is learnt across the cursor).
    """

    def __init__(self, order: int = ORDER):
        if order < 1:
            raise ValueError(f"n-gram order must be at least 1, got {order}")
        self.order = order
        self.next: dict[tuple, dict[int, int]] = {}  # context (0..order-1 ids) -> next id -> count
        self.total: dict[tuple, int] = {}  # context -> c(h)
        self.seqs: dict[object, list[int]] = {}  # key -> the ids counted for it
        self._top: dict[tuple, list[int]] = {}  # context -> its most frequent next tokens (cleared on change)

    def __len__(self) -> int:
        return sum(len(s) for s in self.seqs.values())

    def _update(self, ids: list[int], lo: int, hi_start: int, sign: int) -> None:
        """Add (``sign`` = 1) or remove (-1) every n-gram of ``ids`` that ends at index ``>= lo`` and
        starts at index ``< hi_start`` (0-based). The n-grams of each order are counted at C speed
        (``Counter`` over ``zip``) and merged once per distinct n-gram."""
        nxt, total = self.next, self.total
        self._top.clear()
        for n in range(1, self.order + 1):
            a, b = max(0, lo - n + 1), min(hi_start, len(ids) - n + 1)  # start indices [a, b)
            if a >= b:
                continue
            grams = Counter(zip(*(ids[a + k:b + k] for k in range(n))))
            for gram, cnt in grams.items():
                h, w = gram[:-1], gram[-1]
                followers = nxt.get(h)
                if sign > 0:
                    if followers is None:
                        followers = nxt[h] = {}
                    followers[w] = followers.get(w, 0) + cnt
                    total[h] = total.get(h, 0) + cnt
                else:
                    left = followers[w] - cnt
                    if left:
                        followers[w] = left
                    else:
                        del followers[w]
                    left = total[h] - cnt
                    if left:
                        total[h] = left
                    else:
                        del total[h], nxt[h]

    def set(self, key, ids) -> int:
        """Count ``ids`` (a sequence of token ids) as sequence ``key``, replacing what ``key`` held.
        Returns how many ids were (re)counted (0 when nothing changed)."""
        new = list(ids)
        old = self.seqs.get(key, [])
        if old == new:
            return 0
        p = _common_length(old, new, lambda m: old[:m] == new[:m], min(len(old), len(new)))
        limit = min(len(old), len(new)) - p
        s = _common_length(old, new, lambda m: old[len(old) - m:] == new[len(new) - m:], limit)
        # an n-gram is unchanged when it lies inside the common prefix or inside the common suffix
        self._update(old, p, len(old) - s, -1)
        self._update(new, p, len(new) - s, +1)
        if new:
            self.seqs[key] = new
        else:
            self.seqs.pop(key, None)
        return len(new) - p - s

    def remove(self, key) -> None:
        """Forget sequence ``key`` (nothing when it is not counted)."""
        self.set(key, [])

    def keys(self) -> list:
        return list(self.seqs)

    def count(self, context: tuple, token: int) -> int:
        """``c(context, token)``."""
        followers = self.next.get(tuple(context))
        return followers.get(token, 0) if followers else 0

    def longest_context(self, history) -> tuple:
        """The longest suffix of ``history`` (at most ``order - 1`` ids) seen as a context; ``()``
        when none is (the empty context, also when nothing is counted)."""
        hist = tuple(_tail(history, self.order - 1))
        for k in range(len(hist), 0, -1):
            if hist[-k:] in self.total:
                return hist[-k:]
        return ()

    def chain(self, suffixes: list[tuple]) -> list[tuple[dict, int, int]]:
        """``(followers, c(h), T(h))`` for the contexts ``suffixes`` (a history's suffixes, shortest
        first, starting with ``()``) up to the longest one seen (a longer context that includes an
        unseen one is unseen too)."""
        out = []
        total, nxt = self.total, self.next
        for h in suffixes:
            c = total.get(h)
            if c is None:
                break
            followers = nxt[h]
            out.append((followers, c, len(followers)))
        return out

    def prob(self, token: int, history, vocab_size: int) -> float:
        """Interpolated Witten-Bell ``P(token | history)`` (module docstring); ``vocab_size`` > 0 sets
        the uniform base distribution."""
        return _wb(self.chain(_suffixes(history, self.order)), token, 1.0 / vocab_size)

    def confidence(self, context: tuple) -> float:
        """Witten-Bell's weight of the seen counts at ``context``: ``c(h) / (c(h) + T(h))``; 0 when unseen."""
        c = self.total.get(tuple(context))
        return c / (c + len(self.next[tuple(context)])) if c else 0.0

    def top(self, context: tuple, k: int) -> list[int]:
        """The ``k`` most frequent next tokens after ``context`` (ties: smaller id first)."""
        context = tuple(context)
        memo = self._top.get(context)
        if memo is not None and len(memo) >= k:
            return memo[:k]
        followers = self.next.get(context)
        if not followers:
            return []
        if len(followers) <= k:
            best = sorted(followers, key=lambda w: (-followers[w], w))
        else:
            best = heapq.nsmallest(k, followers, key=lambda w: (-followers[w], w))
        self._top[context] = best
        return best


@dataclass
class Prediction:
    """The nested cache's estimate for the next token.

    ``ids`` and ``probs`` (same length, best first) are the candidate tokens and the mixed
    probabilities ``P_cache(id | history)``; ``confidence`` in [0, 1] is how much the scopes trust
    their counts at this history (``1 - prod(1 - confidence_s)`` over the scopes that matched);
    ``context`` is the longest matched context length in tokens. Empty ``ids``: no opinion.
    """

    ids: list[int]
    probs: list[float]
    confidence: float
    context: int


EMPTY = Prediction([], [], 0.0, 0)


PSEUDO_COUNT = 2  # added to a context's count before it earns confidence (one sighting: 1/4, not 1/2)


class NestedCache:
    """Scopes of :class:`NgramCounts`, innermost first (e.g. ``document``, ``open``, ``workspace``).

    A scope predicts only where it has seen at least ``min_context`` tokens of the history as a
    context (``scope_min_context``: per scope, e.g. longer for the outer scopes). The candidates are each predicting scope's :data:`CANDIDATES` most frequent next tokens
    after its longest matched context; every predicting scope scores every candidate with Witten-Bell
    (so a token seen only in an outer scope still gets the inner scope's backed-off probability), and
    the scopes are nested innermost first: with confidences ``l_1, l_2, ...`` the mixture weights
    are ``l_1``, ``(1 - l_1) * l_2``, ... normalised to sum to 1.
    """

    def __init__(self, scopes=("document", "open", "workspace"), order: int = ORDER, vocab_size: int = 1 << 16,
                 min_context: int = MIN_CONTEXT, candidates: int = CANDIDATES,
                 scope_min_context: dict[str, int] | None = None):
        self.order = order
        self.vocab_size = vocab_size
        self.min_context = min_context
        self.scope_min_context = dict(scope_min_context or {})  # per-scope overrides of min_context
        self.candidates = candidates
        self.scopes: dict[str, NgramCounts] = {name: NgramCounts(order) for name in scopes}

    def __getitem__(self, scope: str) -> NgramCounts:
        return self.scopes[scope]

    def predict(self, history) -> Prediction:
        """The cache's next-token estimate after ``history`` (token ids, oldest first; only the last
        ``order - 1`` are read). Costs a few dictionary look-ups per scope and candidate."""
        suffixes = _suffixes(history, self.order)
        active = []  # (chain, confidence), innermost first
        for name, counts in self.scopes.items():
            if not counts.total:
                continue
            chain = counts.chain(suffixes)
            if len(chain) - 1 >= self.scope_min_context.get(name, self.min_context):
                _, c, t = chain[-1]
                # Witten-Bell's confidence with a pseudo-count: a context seen once is weak evidence
                active.append((counts, chain, c / (c + t + PSEUDO_COUNT)))
        if not active:
            return EMPTY
        cands: list[int] = []
        for counts, chain, _ in active:
            for w in counts.top(suffixes[len(chain) - 1], self.candidates):
                if w not in cands:
                    cands.append(w)
        weights, rest = [], 1.0
        for _, _, lam in active:
            weights.append(rest * lam)
            rest *= 1.0 - lam
        norm = sum(weights)
        base = 1.0 / self.vocab_size
        probs = [sum(wt * _wb(chain, w, base) for (_, chain, _), wt in zip(active, weights)) / norm for w in cands]
        order = sorted(range(len(cands)), key=lambda i: (-probs[i], cands[i]))
        return Prediction([cands[i] for i in order], [probs[i] for i in order], 1.0 - rest,
                          max(len(chain) - 1 for _, chain, _ in active))

    def draft(self, history, k: int) -> list[int]:
        """Longest-match continuation (prompt lookup, for speculative decoding): up to ``k`` token ids
        that followed the longest suffix of ``history`` seen in any scope (at least ``min_context``
        ids; ties: the innermost scope), taking its most frequent next token and repeating from the
        extended history. For a context seen once this is exactly the ids that followed it. Empty
        when no scope matches."""
        hist = _tail(history, self.order - 1)
        out: list[int] = []
        while len(out) < k:
            best, best_ctx = None, ()
            for counts in self.scopes.values():
                ctx = counts.longest_context(hist)
                if len(ctx) > len(best_ctx):
                    best, best_ctx = counts, ctx
            if best is None or len(best_ctx) < self.min_context:
                break
            w = best.top(best_ctx, 1)[0]
            out.append(w)
            hist = _tail(hist + [w], self.order - 1)
        return out
