"""``fsm-complete bench --exactness``: how many invalid files the token masks let through.

Soundness (every real token of real code is allowed) is checked by ``tests/test_soundness.py``;
this is the other direction. Real lines of the held-out standard-library files (``--corpus DIR``:
any directory) are mutated, one line per mutant, and only mutants that CPython's ``compile()``
rejects are kept. Mutation kinds (:data:`MUTATIONS`):

* ``missing_colon`` — the ``:`` ending a block opener is dropped (``if x`` then an indented body);
* ``stray_dedent`` — a body line (not the first of its block) is moved to a width that matches no
  enclosing indentation level ("unindent does not match any outer indentation level");
* ``missing_indent`` — the first line of a block body is moved to the opener's level ("expected an
  indented block");
* ``unexpected_indent`` — a statement line (not the first of a block body) is indented one level
  deeper than the line before it, with no opener ("unexpected indent");
* ``unclosed_bracket`` — one closing ``)``/``]``/``}`` is dropped;
* ``extra_closer`` — one closing bracket is doubled;
* ``misspelt_keyword`` — a keyword is misspelt (``def`` -> ``dfe``, ``return`` -> ``retrun``,
  ``import`` -> ``improt``, ...). A misspelt keyword is usually a valid *name*: a lexical automaton
  is expected to let most of these through (the grammar is the post-filter's job), so this kind is
  reported on its own and left out of the ``lexical`` total.

Indentation mutations skip tab-indented lines. Each mutant is replayed from the lexer state at the
start of its mutated line (the real prefix, lexed with :class:`engine.lexing.Lex`): the rest of the
mutant document is tokenized with the model's tokenizer and fed token by token to a
:class:`engine.fsm.PythonGuide`, checking ``allowed_mask()`` before each ``advance``. Outcomes:

* ``same_line`` / ``next_line`` / ``later`` — a token was masked, its first rejected character on
  the mutated line, the line after, or further down;
* ``eof`` — every token was allowed but the file cannot end there (:func:`file_complete`: open
  brackets, an unterminated triple-quoted string, a block opener without a body). Note that
  :meth:`PythonGuide.is_accepting` alone says True inside brackets (a completion may stop there,
  the suffix closes them), so the end-of-file check adds the bracket and string conditions;
* ``let_through`` — the masks accepted the whole invalid file.

``rate`` is caught / n. The replay needs no model forward pass (tokenizer and FSM only).
"""

from __future__ import annotations

import json
import keyword
import random
import sys
import time
import tokenize
import warnings
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

from engine.lexing import Complex, Lex, Reject, automaton
from engine.text import read_source

MUTATIONS = ("missing_colon", "stray_dedent", "missing_indent", "unexpected_indent", "unclosed_bracket",
             "extra_closer", "misspelt_keyword")
LEXICAL = tuple(m for m in MUTATIONS if m != "misspelt_keyword")
OUTCOMES = ("same_line", "next_line", "later", "eof", "let_through")

MISSPELLINGS = {
    "def": "dfe", "return": "retrun", "import": "improt", "class": "calss", "while": "whiel", "for": "fro",
    "else": "esle", "elif": "elfi", "lambda": "lambad", "yield": "yeild", "except": "excpet", "finally": "finnaly",
    "with": "wtih", "try": "tyr", "raise": "riase", "from": "form", "continue": "contniue", "break": "braek",
    "global": "glboal", "nonlocal": "nonlcoal", "assert": "asesrt", "async": "asnyc", "await": "awiat",
    "del": "dle", "if": "fi", "in": "ni", "not": "nto", "and": "adn", "or": "ro", "is": "si", "as": "sa",
    "pass": "psas",
}


@dataclass
class Mutant:
    kind: str
    path: str
    line: int  # 0-based index of the mutated physical line
    original_line: str
    mutated_line: str
    text: str  # the whole mutated document


# ------------------------------------------------------------------------------------------------
# mutation sites


def _leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t\f"))]


def mutation_sites(text: str) -> dict[str, list[tuple[int, str]]]:
    """Candidate mutations of one file: kind -> ``[(0-based line index, mutated line)]`` (the
    line keeps its end of line). Empty when the file does not tokenize."""
    lines = text.splitlines(keepends=True)
    out: dict[str, list[tuple[int, str]]] = {k: [] for k in MUTATIONS}
    try:
        toks = list(tokenize.generate_tokens(StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return out
    levels = [0]
    prev_opener = False  # the previous logical line ended with a block opener ':'
    prev_width = 0
    at_start = True
    skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    for i, tok in enumerate(toks):
        if tok.type == tokenize.INDENT:
            levels.append(automaton.indent_width(tok.string))
        elif tok.type == tokenize.DEDENT:
            levels.pop()
        if tok.type in skip or tok.type == tokenize.ENDMARKER:
            continue
        row, col = tok.start
        line = lines[row - 1] if row - 1 < len(lines) else ""
        if at_start and tok.type != tokenize.NEWLINE:  # first token of a logical line
            at_start = False
            ws = _leading_ws(line)
            body = line[len(ws):]
            width = automaton.indent_width(ws)
            if "\t" not in ws and "\f" not in ws and col == len(ws):
                if prev_opener and len(levels) >= 2:
                    out["missing_indent"].append((row - 1, " " * levels[-2] + body))
                elif not prev_opener:
                    gaps = [(a, b) for a, b in zip(levels, levels[1:], strict=False) if b - a >= 2]
                    if len(levels) >= 2 and gaps:
                        a, b = gaps[-1]
                        out["stray_dedent"].append((row - 1, " " * ((a + b) // 2) + body))
                    if width == prev_width:
                        out["unexpected_indent"].append((row - 1, " " * (width + 4) + body))
            prev_width = width
        if tok.type == tokenize.NEWLINE:
            j = i - 1
            while j >= 0 and toks[j].type in (tokenize.COMMENT, tokenize.NL):
                j -= 1
            last = toks[j]
            prev_opener = last.type == tokenize.OP and last.string == ":"
            if prev_opener and last.start[0] == last.end[0]:
                r, c = last.start
                src = lines[r - 1]
                out["missing_colon"].append((r - 1, src[:c] + src[c + 1:]))
            at_start = True
            continue
        if tok.type == tokenize.OP and tok.string in ")]}" and tok.start[0] == tok.end[0]:
            out["unclosed_bracket"].append((row - 1, line[:col] + line[col + 1:]))
            out["extra_closer"].append((row - 1, line[: col + 1] + tok.string + line[col + 1:]))
        elif tok.type == tokenize.NAME and keyword.iskeyword(tok.string) and tok.string in MISSPELLINGS:
            out["misspelt_keyword"].append((row - 1, line[:col] + MISSPELLINGS[tok.string] + line[tok.end[1]:]))
    return out


def compiles(text: str, path: str = "<mutant>") -> bool:
    """True when CPython compiles ``text`` (syntax, indentation and compiler errors count as False)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
            return False
    return True


def sample_mutants(files: list[Path], per_kind: int, seed: int, kinds=MUTATIONS) -> list[Mutant]:
    """Up to ``per_kind`` non-compiling mutants of each kind, deterministic for ``seed``: each
    kind's candidate sites over all files are shuffled and tried in order until enough fail to
    compile."""
    texts: list[str] = []
    sites: dict[str, list[tuple[int, int, str]]] = {k: [] for k in kinds}
    for path in files:
        try:
            text = read_source(path)
        except (OSError, ValueError):
            continue
        texts.append(text)
        for k, found in mutation_sites(text).items():
            if k in sites:
                sites[k].extend((len(texts) - 1, li, new) for li, new in found)
    names = [str(p) for p in files]
    mutants: list[Mutant] = []
    for n, k in enumerate(kinds):
        pool = sites[k]
        random.Random(seed * 1009 + n).shuffle(pool)
        kept = 0
        for f, li, new in pool:
            if kept >= per_kind:
                break
            lines = texts[f].splitlines(keepends=True)
            if lines[li] == new:
                continue
            mutated = "".join(lines[:li] + [new] + lines[li + 1:])
            if compiles(mutated):
                continue
            mutants.append(Mutant(k, names[f], li, lines[li], new, mutated))
            kept += 1
    return mutants


# ------------------------------------------------------------------------------------------------
# replay


def file_complete(guide) -> bool:
    """True when the guide's text may end the file: :meth:`PythonGuide.is_accepting`, no open
    bracket, not inside a string (an unterminated triple-quoted one)."""
    st = guide.state
    return guide.is_accepting() and not st.brackets and st.mode not in (automaton.STR, automaton.STR_OPEN1)


def _first_bad_byte(state: Lex, data: bytes) -> int:
    """Index of the first byte of ``data`` that ``state`` rejects (``len(data)`` when none does)."""
    st = state.copy()
    for i in range(len(data)):
        try:
            st.feed_bytes(data[i : i + 1])
        except (Reject, Complex):  # Complex is never raised by a concrete state
            return i
    return len(data)


def replay(mutant: Mutant, encode, index, memo=None) -> dict:
    """Replay ``mutant`` from the lexer state at the start of its mutated line.

    ``encode(text) -> [token id]`` is the model's tokenizer (no special tokens); ``index`` a
    :class:`engine.fsm.TokenIndex` over the same vocabulary. Returns ``{"outcome", "line_delta",
    "tokens", "disagreements"}``: ``line_delta`` = lines from the mutated line to the first
    rejected character (None unless caught by a mask), ``disagreements`` = tokens where
    ``allowed_mask()`` and ``advance`` disagreed (0 when the index is exact).
    """
    from engine.fsm import MaskMemo, PythonGuide, detect_indent_style

    lines = mutant.text.splitlines(keepends=True)
    prefix = "".join(lines[: mutant.line])
    state = Lex(detect_indent_style(mutant.text))
    try:
        state.feed_text(prefix)
    except Reject as exc:  # the real prefix must lex: a soundness bug, not an outcome
        return {"outcome": "prefix_rejected", "line_delta": None, "tokens": 0, "disagreements": 0,
                "error": str(exc)}
    rest = mutant.text[len(prefix):]
    ids = list(encode(rest))
    tokens = index.vocab.tokens
    guide = PythonGuide(index, state, memo if memo is not None else MaskMemo())
    newlines = 0  # in the text replayed so far
    disagreements = 0
    for n, tid in enumerate(ids):
        allowed = bool(guide.allowed_mask()[tid])
        before = guide.state
        ok = guide.advance(tid)
        disagreements += allowed != ok
        piece = tokens[tid] or b""
        if not allowed or not ok:
            delta = newlines + piece[: _first_bad_byte(before, piece)].count(b"\n")
            outcome = "same_line" if delta == 0 else "next_line" if delta == 1 else "later"
            return {"outcome": outcome, "line_delta": delta, "tokens": n + 1, "disagreements": disagreements}
        newlines += piece.count(b"\n")
    outcome = "let_through" if file_complete(guide) else "eof"
    return {"outcome": outcome, "line_delta": None, "tokens": len(ids), "disagreements": disagreements}


# ------------------------------------------------------------------------------------------------
# report


def summarize(results: list[tuple[Mutant, dict]]) -> dict:
    def block(sub: list[tuple[Mutant, dict]]) -> dict:
        counts = {o: sum(r["outcome"] == o for _, r in sub) for o in OUTCOMES}
        n = len(sub)
        caught = n - counts["let_through"] - sum(r["outcome"] == "prefix_rejected" for _, r in sub)
        return {"n": n, "caught": caught, "let_through": counts["let_through"],
                "rate": round(caught / n, 4) if n else None,
                "caught_by_mask": counts["same_line"] + counts["next_line"] + counts["later"],
                "caught_at_eof": counts["eof"],
                **{f"caught_{o}": counts[o] for o in ("same_line", "next_line", "later")}}

    by_kind = {}
    for k in MUTATIONS:
        sub = [(m, r) for m, r in results if m.kind == k]
        if sub:
            by_kind[k] = block(sub)
            by_kind[k]["examples_let_through"] = [
                f"{Path(m.path).name}:{m.line + 1}: {m.original_line.strip()!r} -> {m.mutated_line.strip()!r}"
                for m, r in sub if r["outcome"] == "let_through"][:5]
    return {
        "by_mutation": by_kind,
        "lexical": block([(m, r) for m, r in results if m.kind in LEXICAL]),
        "all": block(results),
    }


def report_lines(report: dict) -> list[str]:
    """The "Exactness" section of report.md."""
    lines = ["## Exactness (mutated lines)", "",
             f"{report['mutants']} non-compiling mutants of {report['files']} files ({report['corpus']}), seed "
             f"{report['seed']}, tokenizer `{report['tokenizer']}`; FSM only. caught = a token masked at or after "
             "the mutation, or the file cannot end (`eof`); let through = every token allowed and the file may end.",
             "", "| mutation | n | caught | let through | rate | same line | next line | later | at EOF |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = list(report["by_mutation"].items()) + [("**lexical (all but misspelt_keyword)**", report["lexical"]),
                                                  ("**all**", report["all"])]
    for name, b in rows:
        cells = [b[k] for k in ("n", "caught", "let_through", "rate", "caught_same_line", "caught_next_line",
                                "caught_later", "caught_at_eof")]
        lines.append(f"| {name} | " + " | ".join(str(v) for v in cells) + " |")
    lines += ["", f"mask/advance disagreements: {report['disagreements']}; real prefixes rejected: "
              f"{report['prefix_rejected']}.", ""]
    return lines


def write_report_section(report: dict, out: Path) -> None:
    """Write ``exactness.json`` and put the Exactness section into ``report.md`` (replacing an
    earlier one; the rest of an existing report is kept)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "exactness.json").write_text(json.dumps(report, indent=2) + "\n")
    md = out / "report.md"
    section = "\n".join(report_lines(report))
    old = md.read_text() if md.exists() else "# fsm-complete benchmark\n"
    start = old.find("## Exactness (mutated lines)")
    if start >= 0:
        nxt = old.find("\n## ", start + 1)
        old = old[:start] + (old[nxt + 1:] if nxt >= 0 else "")
    md.write_text(old.rstrip("\n") + "\n\n" + section)


def run_exactness(args) -> dict:
    """``fsm-complete bench --exactness``: sample mutants, replay them, write the report."""
    from transformers import AutoTokenizer

    from engine.fsm import MaskMemo, TokenIndex, default_cache_dir
    from engine.settings import DEFAULT_MODEL_DIR
    from engine.vocab import from_hf_tokenizer

    from .corpus import corpus_files, held_out_files

    model_dir = Path(args.model).expanduser() if getattr(args, "model", None) else DEFAULT_MODEL_DIR
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    tok.model_max_length = 1 << 30  # whole files are encoded here, never fed to the model
    index = TokenIndex(from_hf_tokenizer(tok), default_cache_dir())
    files = corpus_files(Path(args.corpus)) if args.corpus else held_out_files()
    t0 = time.perf_counter()
    mutants = sample_mutants(files, args.mutants, args.seed)
    t1 = time.perf_counter()
    memo = MaskMemo()
    results = []
    for m in mutants:
        results.append((m, replay(m, lambda s: tok.encode(s, add_special_tokens=False), index, memo)))
    t2 = time.perf_counter()
    index.save()
    report = {
        "corpus": args.corpus or "held-out standard library",
        "files": len(files),
        "seed": args.seed,
        "tokenizer": str(model_dir.name),
        "mutants_per_kind": args.mutants,
        "mutants": len(mutants),
        "sample_s": round(t1 - t0, 2),
        "replay_s": round(t2 - t1, 2),
        "tokens": sum(r["tokens"] for _, r in results),
        "disagreements": sum(r["disagreements"] for _, r in results),
        "prefix_rejected": sum(r["outcome"] == "prefix_rejected" for _, r in results),
        **summarize(results),
    }
    write_report_section(report, Path(args.out))
    print(json.dumps({k: report[k] for k in ("mutants", "lexical", "all")}, indent=2), file=sys.stderr)
    return report
