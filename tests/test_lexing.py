"""engine.lexing: the tolerant scanner's context at the cursor and clipping (E17), the call at the
cursor, the three disagreements of issue #11 (now one answer everywhere), format specs (R5 of issue
#16), resumed scans, and the strict and tolerant lexers held to the same answer on the soundness
corpus."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import pytest

from engine import lexing
from engine.fingerprint import fingerprint
from engine.lexing import automaton as strict
from engine.lexing.context import CODE, COMMENT, STRING, Context, clip_to_context, cursor_context
from engine.lexing.scanner import Scan, _scan_from, scan
from engine.text import read_source
from lab.corpus import held_out_files

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(
    "prefix, kind, quote",
    [
        ("# see os.", COMMENT, ""),
        ('a = "something.', STRING, '"'),
        ('f"value.', STRING, '"'),
        ("x = os.", CODE, ""),
        ("x = 1  # c\ny.", CODE, ""),
        ("x = 1  # c\r\ny.", CODE, ""),
        ('x = "a#b" + y.', CODE, ""),
        ("x = '#'  # real", COMMENT, ""),
        ("s = '''a\nb.", STRING, "'''"),
        ("s = '''a\nb''' + c.", CODE, ""),
        ('s = """x " y.', STRING, '"""'),
        ("s = 'it\\'s.", STRING, "'"),
        ('s = "a\nb.', CODE, ""),  # a one-line string ends at its line break
        ('x = f"{a.', CODE, ""),  # inside a replacement field
        ('x = f"{a}.', STRING, '"'),
        ('x = f"{{a.', STRING, '"'),  # doubled brace is literal
        ("d = f'{x[\"k\"]}' + y.", CODE, ""),
        ("d = f'{ {1: 2}[1] }", STRING, "'"),
        ('rb"\\"', STRING, '"'),
        ('bar"q', STRING, '"'),
        ("", CODE, ""),
        ('x = t"a {y', CODE, ""),  # PEP 750 template strings have fields like f-strings
        ('x = t"a {y} b', STRING, '"'),
        ("x = Tr'{a}{{", STRING, "'"),
        ('label = f"{code:#06x} {name}" + os.', CODE, ""),  # R5a: '#' in a format spec is no comment
        ("line = f\"{name:'<20}\" + os.", CODE, ""),  # R5b: a quote in a format spec is literal
        ('c = f"{t:=^20}" + os.', CODE, ""),
        ('w = f"{x:>{width}}" + os.', CODE, ""),
        ('w = f"{x:>{wid', CODE, ""),  # a nested field in a spec is code
        ('s = f"{x:#', STRING, '"'),  # a format spec is literal text of the f-string
        ('s = rf"\\{x', CODE, ""),  # a brace after a backslash still opens a field
    ],
)
def test_cursor_context(prefix, kind, quote):
    context = cursor_context(prefix)
    assert (context.kind, context.quote) == (kind, quote)


def test_fstring_flag():
    assert cursor_context('f"value.').fstring
    assert cursor_context('t"value.').fstring
    assert not cursor_context('"value.').fstring
    assert cursor_context('x = f"{a.').field
    assert cursor_context('x = f"{a:>1').spec


@pytest.mark.parametrize(
    "text, context, line_suffix, clipped",
    [
        ("path.join(a)\nprint(x)", Context(COMMENT), "", "path.join(a)"),
        ('txt" + x', Context(STRING, '"'), '"', "txt"),  # the line closes it already
        ('txt" + x', Context(STRING, '"'), "", 'txt"'),  # open to the line end: may close, no code
        ("it's", Context(STRING, "'"), "')", "it"),
        ("txt\nmore", Context(STRING, "'"), "", "txt"),
        ('a "b"\nc"""', Context(STRING, '"""'), "", 'a "b"\nc'),
        ('x {y} z', Context(STRING, '"', True), ' {x}"', "x "),
        ("os.path", Context(CODE), ")", "os.path"),
    ],
)
def test_clip_to_context(text, context, line_suffix, clipped):
    assert clip_to_context(text, context, line_suffix) == clipped


def test_a_format_spec_is_clipped_at_the_end_of_its_field():
    assert clip_to_context(">10}, more", Context(STRING, '"', True, field=True, spec=True), '"') == ">10"


# -- the call at the cursor --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix, expected",
    [
        ('x = f"{foo(1, ', ("foo", 10)),
        ('print(f"abc', ("print", 5)),  # the cursor is in a string argument of print
        ('print(f"{x', None),  # in a replacement field only calls opened in the field count
        ("os.path.join(a, (1, ", ("os.path.join", 12)),
        ("def f(a, ", None),
        ('x = "".join(', ('"".join', 11)),
        ("foo(x)(1, ", ("foo(x)", 6)),
        ("if (a", None),
        ('open("a', ("open", 4)),
        ('foo(1, "(", ', ("foo", 3)),
        ("foo(1,  # (\n  ", ("foo", 3)),
    ],
)
def test_enclosing_call(prefix, expected):
    assert lexing.enclosing_call(prefix, len(prefix)) == expected


@pytest.mark.parametrize(
    "text, kind",
    [("foo(", "call"), ("a.b (", "call"), ("def f(", "def"), ("class C(", "class"), ("x = (", "other"),
     ("return (", "other"), ("1 (", "other"), ("x[0](", "call"), ("f(x)(", "call"), ("async def g(", "def")],
)
def test_paren_kind(text, kind):
    paren = text.rindex("(")
    assert lexing.paren_kind(text, paren, scan(text)) == kind


def test_callee_after_a_checkpoint_is_read_from_the_start():
    """A callee whose ')' lies before the scan's resume point is still found (pairs from the start)."""
    head = "y = 1\n" * 1200
    scan(head + "x = 2\n")  # leaves checkpoints
    text = head + "foo(1).bar("
    assert lexing.enclosing_call(text, len(text)) == ("foo(1).bar", len(text) - 1)


# -- issue #11: the three disagreements, one answer everywhere ---------------------------------------


@pytest.mark.parametrize("prefix", ['x = f"a {y', 'x = t"a {y'])
def test_a_half_typed_replacement_field_is_code_everywhere(prefix):
    assert cursor_context(prefix) == Context(CODE, field=True)  # the server
    fp = fingerprint(prefix, "")
    assert fp["in_fstring_field"] == 1 and fp["in_string"] == 0 and fp.mode == "code"  # the fingerprint
    assert lexing.enclosing_call(prefix, len(prefix)) is None  # the slot resolver: no call here
    state = strict.lex_text(prefix)  # the strict automaton: inside a field frame
    assert state.mode == strict.NAME and isinstance(state.brackets[-1], tuple)


def test_a_call_in_a_replacement_field_gets_its_slots():
    from engine.signatures import resolve_call
    from engine.monitors import call_slots_at

    prefix = 'def foo(a, b):\n    return a\n\nx = f"{foo(1, '
    assert fingerprint(prefix, "").mode == "call-arguments"
    callee, paren = lexing.enclosing_call(prefix, len(prefix))
    assert (callee, prefix[paren]) == ("foo", "(")
    spec = resolve_call(prefix, len(prefix))
    assert spec is not None and spec.callee == "foo"
    slots, closes = call_slots_at(spec, prefix, paren, "", strict.lex_text(prefix))
    assert slots is not None and not closes
    assert slots.missing() == ["b"]


# -- R5 of issue #16: format specs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ['f"{t:=^20}"', 'f"{code:#06x} {name}"', "f\"{name:'<20}\"", "f'{name:\"^9}'", 'f"{x:{y:3}}"',
     'f"""{x:\n}"""', 'f"""{x:"}"""', 'f"{x=!r:>10}"', 'f"{x:a#b}"'],
)
def test_format_specs_the_strict_lexer_accepts(source):
    compile(source, "<spec>", "eval")  # CPython agrees
    state = strict.lex_text(source)
    assert state.mode == strict.CODE and not state.brackets


@pytest.mark.parametrize("source", ['f"{x:"}"', 'f"""{x:"""}"""', 'f"{x:\n}"'])
def test_format_specs_the_strict_lexer_rejects(source):
    with pytest.raises(SyntaxError):
        compile(source, "<spec>", "eval")
    with pytest.raises(strict.Reject):
        strict.lex_text(source)


def test_cpython_decides_a_format_spec_that_tree_sitter_misreads():
    from engine.validate import count_syntax_errors, validate

    completion = 'c = f"{t:=^20}"\n'  # '=' is the fill character, '^' centres (format mini-language)
    assert count_syntax_errors(completion) != (0, 0)  # tree-sitter-python misreads the spec
    compile(completion, "<spec>", "exec")
    assert validate("t = 1\n", completion, "print(c)\n") == []
    assert validate("t = 1\n", 'c = f"{t:=^20"\n', "print(c)\n") != []  # unterminated field: refused


# -- resumed scans (checkpoints) ---------------------------------------------------------------------

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _state(sc: Scan) -> tuple:
    return (sc.stack, sc.context, sc.string_start, sc.string_prefix, sc.string_quote, sc.semi, sc.close0,
            sc._starts, sc._ends)


def test_resumed_scans_equal_a_scan_from_the_top():
    """The scan resumes from checkpoints of earlier scans; after arbitrary edits (brackets left open,
    quotes, a 3,000-space indentation before a keyword) the state equals a scan of the whole text."""
    rng = random.Random(5)
    inserts = ["x", "(", ")", "'", '"""', "#", "\n", "\\", "f'{", "t'{", "}", "[", "\n    return ", "é", ";",
               "\n)\ndef f(", " " * 3000 + "def", ":>", "{x:#"]
    files = sorted(STDLIB.glob("*.py"))
    for path in random.Random(4).sample(files, 3):
        text = read_source(path)[:40_000]
        for step in range(25):
            a = rng.randrange(len(text) + 1)
            b = min(len(text), a + rng.choice([0, 0, 1, 3, 50]))
            text = text[:a] + rng.choice(inserts) + text[b:]
            cut = rng.choice([a, rng.randrange(len(text) + 1), len(text)])
            whole = Scan(text[:cut])
            _scan_from(whole, 0, 0, [])
            resumed = scan(text[:cut])
            assert _state(resumed) == _state(whole), (path, step, cut)
            for close, opener in resumed.pairs.items():
                assert whole.pairs[close] == opener


def test_a_resumed_scan_respects_the_lookahead_of_bracket_recovery():
    # the '(' is closed by recovery because the next line starts with `def`; the checkpoint right after
    # that decision must not be reused once `def` (3,000 spaces later) changes
    head = "y = 1\n" * 400 + "x = (\n" + " " * 3000
    tail = " f():\n    y\n"
    assert scan(head + "def" + tail).stack == []
    edited = scan(head + "dex" + tail)
    assert [e[0] for e in edited.stack] == ["("] and edited.stack[0][1] == head.index("(")


# -- the strict and the tolerant lexer agree on valid code -------------------------------------------


def strict_answer(state: strict.Lex) -> tuple[str, int]:
    """(code | string | comment | field, bracket depth) of the strict automaton's state."""
    m = state.mode
    depth = sum(1 for f in state.brackets if isinstance(f, str))
    if m == strict.COMMENT:
        return "comment", depth
    if m in (strict.STR, strict.STR_OPEN1, strict.FSTR_RBRACE):
        return "string", depth
    if m in (strict.FSPEC, strict.FCONV, strict.FCONV_DONE, strict.FSTR_LBRACE):
        return "field", depth  # after '{' in literal text both read a field ('{{' needs one more character)
    return ("field" if any(isinstance(f, tuple) for f in state.brackets) else "code"), depth


_INTERESTING = frozenset("'\"{}#:()[]\\\n!=")


def _sample(text: str, rng: random.Random, every: int) -> list[int]:
    """Offsets after every character that can change the context, plus a random one per ``every``."""
    picks = {k + 1 for k, ch in enumerate(text) if ch in _INTERESTING}
    picks |= {rng.randrange(len(text) + 1) for _ in range(len(text) // every)}
    return sorted(picks)


def _agree_on(text: str, positions: list[int]) -> int:
    state = strict.Lex(None)
    done = 0
    for k in positions:
        state.feed_text(text[done:k])
        done = k
        sc = scan(text[:k])
        assert strict_answer(state) == (sc.context, sc.depth), (k, text[max(0, k - 60):k])
    return len(positions)


def test_the_strict_and_the_tolerant_lexer_agree_on_the_soundness_corpus():
    rng = random.Random(11)
    checked = 0
    files = held_out_files()
    assert len(files) >= 40
    for path in files:
        text = read_source(path)
        positions = _sample(text, rng, 40)
        if len(positions) > 300:  # all prefixes of 40+ files take minutes: a seeded sample per file
            positions = sorted(rng.sample(positions, 300))
        checked += _agree_on(text, positions)
    assert checked > 15_000


def test_the_strict_and_the_tolerant_lexer_agree_on_every_prefix_of_the_format_spec_corpus():
    text = (CORPUS / "fstring_specs.py").read_text(encoding="utf-8")
    assert _agree_on(text, list(range(len(text) + 1))) == len(text) + 1


# -- the prefix lexer's restart at the last top-level statement (engine.lexing.prefix.restart_point) --

def _states(text: str, monkeypatch) -> tuple[dict, dict, int]:
    """The strict state at the end of ``text`` lexed from its first line, and from its restart point."""
    from engine.fsm import detect_indent_style
    from engine.lexing import prefix as prefix_lexing

    style = detect_indent_style(text)
    with monkeypatch.context() as m:
        m.setattr(prefix_lexing, "RESTART_CHARS", 10 ** 9)
        full, rec = prefix_lexing.PrefixLexer().lex(text, style)
    lexer = prefix_lexing.PrefixLexer()
    part, _ = lexer.lex(text, style)
    as_dict = lambda s: {k: getattr(s, k) for k in strict.Lex.__slots__}  # noqa: E731
    return as_dict(full), as_dict(part), rec


_DOCSTRING_MODULE = '''"""A module whose docstring shows code in column 0:

def fake(a,
b):
class Fake:
"""
import os
values = [
one,
two,
]
total = 1 + \\
two
class Real:
    def method(self, x):
        if x:
            return [x,
                    x]
        return os.sep
'''


@pytest.mark.parametrize("cut", ["def fake(a,\n", "class Fake:\n", "one,\n", "two\n", "return [x,\n", "return os"])
def test_a_restart_never_starts_in_a_string_a_bracket_or_a_continued_line(cut, monkeypatch):
    from engine.lexing import prefix as prefix_lexing

    monkeypatch.setattr(prefix_lexing, "RESTART_CHARS", 0)
    text = _DOCSTRING_MODULE[: _DOCSTRING_MODULE.rindex(cut) + len(cut)]
    point = prefix_lexing.restart_point(text)
    statements = ("import os", "values", "total", "class Real")  # the column-0 statements of code
    assert point in {0} | {text.find(s) for s in statements if s in text}
    full, part, _ = _states(text, monkeypatch)
    assert part == full


def test_lexing_from_the_restart_point_gives_the_state_lexing_from_the_start_gives():
    """On the held-out standard-library files, at seeded random cuts past RESTART_CHARS."""
    mp = pytest.MonkeyPatch()
    rng = random.Random(5)
    compared = restarted = 0
    try:
        for path in held_out_files():
            text = read_source(path).replace("\r\n", "\n")
            if len(text) < 6000:
                continue
            for _ in range(4):
                cut = rng.randrange(4097, len(text))
                full, part, rec = _states(text[:cut], mp)
                if rec:
                    continue  # lexing recovered from an error before the cursor: the restart forgets it
                from engine.lexing.prefix import restart_point

                restarted += restart_point(text[:cut]) > 0
                assert part == full, (path, cut)
                compared += 1
    finally:
        mp.undo()
    assert compared > 100 and restarted > 0.9 * compared


@pytest.mark.parametrize("text, want", [
    ('sys.stdout.write(" {d:.1f}G"\n                 .format(', '" {d:.1f}G"\n                 .format'),
    ("total = (rows\n         .sum(", "rows\n         .sum"),
    ("x = a.b \\\n    .c(", "a.b \\\n    .c"),
    ("os.path.join(", "os.path.join"),
])
def test_a_method_on_an_object_of_an_earlier_line_is_not_a_bare_name(text, want):
    """Memory watchdog (the stdlib's test/memory_watchdog.py): a string on one line, ``.format(`` on
    the next inside the call's brackets. The callee was read as the bare name ``format`` (the builtin,
    without a ``data`` parameter) and the slots monitor refused ``data=``; an object before the dot
    may stand on an earlier line (Language Reference 2.1.5-2.1.6)."""
    from engine.lexing.calls import callee_before
    from engine.lexing.scanner import scan

    assert callee_before(text, len(text) - 1, scan(text)) == want
