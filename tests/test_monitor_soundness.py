"""Soundness of the semantic monitors on real code (issue #16), like the lexical FSM's
(tests/test_soundness.py): teacher-force the real tokenization of held-out standard-library files
(and the R2-R5 shapes of the real reports, tests/data/monitor_corpus/) through the monitors at many
cursor positions. At each position the document is the file without the rest of the cursor's line
(prefix + the lines after it), and the completion is that rest of the line, token by token: no real
next token may be refused by a monitor.

Monitors: names (sampled token boundaries), block headers (line starts before a deeper-indented
line, at column 0 as editors that trim blank lines leave them and after the indentation), member
access after ``name.`` or after ``from MODULE import``, and argument slots inside calls (jedi; one
position each per file). The
engine's own set-up (:func:`monitors_at`) builds the monitors; the names monitor is also forced
alone at every names position (no jedi). The required-argument policy is off here: its rules
(ruff S113 ``timeout``, pylint PLW1514 ``encoding``...) refuse real code on purpose.
Run with ``-s`` to see the refusal counts per monitor.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest

from engine.lexing.automaton import Lex
from engine.monitors import block_header_at
from engine.monitors.base import PROSE_MODES
from engine.monitors.names import document_names, names_code, names_monitor
from engine.monitors.setup import monitors_at
from engine.settings import DEFAULT_MODEL_DIR
from engine.text import read_source
from lab.corpus import held_out_files

CORPUS = Path(__file__).parent / "data" / "monitor_corpus"
NAME_POSITIONS = 25  # per file: cursor positions for the names monitor
HEADER_LINES = 2  # per file: lines before a deeper-indented one (cursor at column 0 and after the indentation)
JEDI_POSITIONS = 1  # per file: after ``name.`` and inside a call (jedi parses the document each time)


_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+[A-Za-z_][\w.]*[ \t]+import(?=[ \t]+[A-Za-z_])", re.M)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)


def _positions(text: str, tok, rng: random.Random, every: bool) -> tuple[list[int], list[int]]:
    """Cursor offsets at real token boundaries: ``(names positions, jedi positions)`` (after a
    ``.`` or ``(`` for the latter); a sample, or ``every`` one."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    starts = sorted({a for a, _ in enc["offset_mapping"] if 0 < a < len(text)})
    code = [p for p in starts if text[p - 1] not in "\n" or text[p] not in " \n"]
    dots = [p for p in starts if text[p - 1] == "." and text[p - 2: p] != ".."]
    parens = [p for p in starts if text[p - 1] == "("]
    imports = [m.end() for m in _FROM_IMPORT.finditer(text)]  # right after ``import`` (the space is healed)
    if every:
        return code, dots + parens + imports
    jedi = rng.sample(dots, min(JEDI_POSITIONS, len(dots))) + rng.sample(parens, min(JEDI_POSITIONS, len(parens)))
    jedi += rng.sample(imports, min(JEDI_POSITIONS, len(imports)))
    return sorted(rng.sample(code, min(NAME_POSITIONS, len(code)))), sorted(jedi)


def _header_positions(text: str, rng: random.Random, every: bool) -> list[int]:
    """Cursors where the block-header monitor may apply: column 0 of indented lines (the R2 shape:
    the completion writes the indentation, as on a blank line an editor trimmed) and the end of
    the indentation of lines the next code line is deeper than (headers, and R3's continuations)."""
    lines = text.split("\n")
    col0, headers, offset = [], [], 0
    for i, line in enumerate(lines[:-1]):
        width = len(line) - len(line.lstrip(" \t"))
        if line.strip():
            if width:
                col0.append(offset)
            nxt = next((n for n in lines[i + 1:] if n.strip() and not n.lstrip().startswith("#")), "")
            if len(nxt) - len(nxt.lstrip(" \t")) > width:
                headers.append(offset + width)
        offset += len(line) + 1
    if every:
        return sorted(set(col0 + headers))
    return sorted(set(rng.sample(col0, min(HEADER_LINES, len(col0))) + rng.sample(headers, min(HEADER_LINES, len(headers)))))


def _states(text: str, offsets: list[int]) -> dict[int, Lex | None]:
    """The strict lexer's state at each offset (one pass; None where the file stops lexing)."""
    from engine.fsm import detect_indent_style
    from engine.lexing.automaton import Complex, Reject

    out: dict[int, Lex | None] = {}
    want = set(offsets)
    st = Lex(detect_indent_style(text))
    try:
        for i, ch in enumerate(text):
            if i in want:
                out[i] = st.copy()
            st.feed_char(ch)
    except (Reject, Complex):
        pass
    return {p: out.get(p) for p in offsets}


def _span(text: str, p: int) -> tuple[str, str]:
    """``(completion, suffix)``: the rest of the cursor's line with its line break (forced), and
    the text from that line break on (the document the completion is asked in lacks only the rest
    of the line; the line break is in both, so the completion's end of line is judged too)."""
    end = text.find("\n", p)
    end = len(text) if end < 0 else end
    return text[p:end] + "\n", text[end:]


def _force_names(prefix: str, completion: str, suffix: str, state: Lex, names) -> str | None:
    """The names monitor alone, as :func:`monitors_at` builds it, teacher-forced character by character."""
    monitor = names_monitor(prefix, suffix, len(state.brackets), names)
    if monitor is None:
        return None
    st = state.copy()
    for i, ch in enumerate(completion):
        if not st.pend:
            refusal = monitor.feed(ch, len(st.brackets), names_code(st, ch))
            if refusal is not None:
                return f"{refusal.detail} at {completion[:i + 1]!r}"
        st.feed_char(ch)
    return None


def _force_semantics(policies, path, prefix: str, completion: str, suffix: str, state: Lex, tok, vocab) -> str | None:
    """The engine's monitors at the cursor (:func:`monitors_at`, names included), teacher-forced."""
    sem = monitors_at(prefix, suffix, path, state, policies)
    if not sem.active:
        return None
    st = state
    ids = tok.encode(completion, add_special_tokens=False)
    for n, tid in enumerate(ids):
        data = vocab.tokens[tid]
        refusal = sem.check(st, data)
        if refusal is not None:
            return f"{refusal.rule}: {refusal.detail} at token {n} {data!r} of {completion!r}"
        st, _ = sem.advance_state(st, data)
    return None


def teacher_force(path: Path, tok, vocab, policies, rng: random.Random, counts: Counter) -> list[str]:
    """Refusals of real next tokens in ``path`` (counts per monitor and positions in ``counts``)."""
    text = read_source(path)
    every = path.parent == CORPUS
    names_at, jedi_at = _positions(text, tok, rng, every)
    header_at = _header_positions(text, rng, every)
    states = _states(text, names_at + jedi_at + header_at)
    out = []
    for p in names_at:
        state = states[p]
        if state is None or state.mode in PROSE_MODES:
            continue  # in a string or comment the engine builds no monitor
        completion, suffix = _span(text, p)
        prefix = text[:p]
        counts["names positions"] += 1
        why = _force_names(prefix, completion, suffix, state, document_names(prefix + suffix, len(prefix)))
        if why:
            counts["names refusals"] += 1
            out.append(f"{path.name}:{prefix.count(chr(10)) + 1} names: {why}")
    for p in header_at:
        state = states[p]
        if state is None:
            continue
        completion, suffix = _span(text, p)
        prefix = text[:p]
        monitor = block_header_at(prefix, suffix, state)
        if monitor is None:
            continue
        counts["block-header positions"] += 1
        counts["block-header positions that must open a bracket"] += monitor.must_open
        why = _force_semantics(policies, str(path), prefix, completion, suffix, state, tok, vocab)
        if why:
            counts["block-header refusals"] += 1
            out.append(f"{path.name}:{prefix.count(chr(10)) + 1} {why}")
    for p in jedi_at:
        state = states[p]
        if state is None:
            continue
        completion, suffix = _span(text, p)
        kind = "member" if text[p - 1] == "." else "import" if text.endswith("import", 0, p) else "slots"
        counts[f"{kind} positions"] += 1
        why = _force_semantics(policies, str(path), text[:p], completion, suffix, state, tok, vocab)
        if why:
            counts[f"{kind} refusals"] += 1
            out.append(f"{path.name}:{text[:p].count(chr(10)) + 1} {kind}: {why}")
    return out


def test_no_monitor_refuses_a_real_next_token(tokenizer):
    from engine.required_arguments import PolicyTable
    from engine.vocab import from_hf_tokenizer

    vocab = from_hf_tokenizer(tokenizer)
    policies = PolicyTable.from_config("off")  # policy rules (ruff S113, PLW1514...) refuse real code by design
    files = held_out_files() + sorted(CORPUS.glob("*.py"))
    assert len(files) >= 40
    rng = random.Random(0)
    counts: Counter = Counter()
    refusals = []
    for path in files:
        refusals += teacher_force(path, tokenizer, vocab, policies, rng, counts)
    print("\nmonitor soundness:", dict(sorted(counts.items())))
    assert counts["names positions"] > 1000 and counts["member positions"] > 40 and counts["slots positions"] > 40
    assert counts["import positions"] > 20  # a name that ``from MODULE import`` imports (member access)
    assert counts["block-header positions"] > 100 and counts["block-header positions that must open a bracket"] > 20
    assert not refusals, refusals[:20]
