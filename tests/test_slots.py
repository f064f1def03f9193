"""Argument-slot and member-access monitors (engine/monitors/), character by character.

Accept/reject tables over hand-written call texts: every refusal names its rule, every accepted
text is real Python (checked with ``compile``), and the safe continuation closes a call with its
policy-required keywords (ruff S113, pylint PLW1510/PLW1514, ruff S506).
"""

from __future__ import annotations

import pytest

from engine.lexing.automaton import lex_text
from engine.signatures import CallSpec, Param, RequiredKeyword
from engine.monitors import MemberAccess, Semantics, call_slots_at

GET = CallSpec(
    callee="requests.get", qualname="requests.get",
    params=(Param("url", "positional_or_keyword", True), Param("params", "positional_or_keyword", False),
            Param("headers", "keyword_only", False), Param("timeout", "keyword_only", False)),
    keyword_names=frozenset({"url", "params", "headers", "timeout"}), positional_max=2,
    required_positional=("url",), required_keywords=(RequiredKeyword("timeout", "S113", "10", None),))
OPEN = CallSpec(
    callee="open", qualname="builtins.open",
    params=tuple(Param(n, "positional_or_keyword", n == "file") for n in ("file", "mode", "buffering", "encoding")),
    keyword_names=frozenset({"file", "mode", "buffering", "encoding"}), positional_max=4,
    required_positional=("file",),
    required_keywords=(RequiredKeyword("encoding", "PLW1514", '"utf-8"', 3, unless_binary_mode=True),))
UNRESOLVED = CallSpec(callee="rq.get", qualname="requests.get", params=None, keyword_names=None, positional_max=None,
                      required_positional=(), required_keywords=(RequiredKeyword("timeout", "S113", "10", None),))
KWARGS = CallSpec(callee="f", qualname=None, params=(Param("a", "positional_or_keyword", True),
                                                     Param("kw", "var_keyword", False)),
                  keyword_names=None, positional_max=1, required_positional=("a",), required_keywords=())


def run(spec, prefix: str, completion: str):
    """Feed ``completion`` one character at a time; ``(refusal or None, index, semantics)``."""
    state = lex_text(prefix)
    slots, _ = call_slots_at(spec, prefix, prefix.rindex("("), "", state)
    sem = Semantics([slots], source=prefix)
    for i, ch in enumerate(completion):
        refusal = sem.check(state, ch.encode())
        if refusal is not None:
            return refusal, i, sem
        assert sem.advance(state, ch.encode()) is None
        state.feed_char(ch)
    return None, len(completion), sem


ACCEPTED = [
    (GET, 'requests.get(', '"u", timeout=3)'),
    (GET, 'requests.get(', 'url=u, timeout=3)'),
    (GET, 'requests.get(', 'a == b, timeout=3)'),
    (GET, 'requests.get(', 'f(")", x), timeout=(1, 2))'),
    (GET, 'requests.get(', '"u", **kw, timeout=1)'),
    (GET, 'requests.get(', '"u", *rest, timeout=1)'),
    (GET, 'requests.get(', 'u, lambda a, b=2: a, timeout=1)'),
    (GET, 'requests.get(', '"u",  # a ) in a comment\n    timeout=1,\n)'),
    (GET, 'requests.get(', 'f"{x})", timeout=1)'),
    (GET, 'requests.get(', '(y := 3), timeout=1)'),
    (GET, 'requests.get("u", ', 'headers={"a": 1}, timeout=t)'),
    (OPEN, 'open(', 'p, "rb")'),
    (OPEN, 'open(', 'p, mode="wb")'),
    (OPEN, 'open(', 'p, "r", -1, "utf-8")'),
    (OPEN, 'open(', 'p, encoding="utf-8")'),
    (UNRESOLVED, 'rq.get(', 'u, anything=1, timeout=2)'),
    (KWARGS, 'f(', '1, whatever=2)'),
]


@pytest.mark.parametrize("spec,prefix,completion", ACCEPTED)
def test_valid_calls_are_accepted(spec, prefix, completion) -> None:
    refusal, _, sem = run(spec, prefix, completion)
    assert refusal is None, refusal
    assert sem.calls[0].closed
    compile(prefix + completion, "<call>", "eval")


REFUSED = [
    (GET, 'requests.get(', '"u")', 3, "required-slot"),  # ruff S113
    (GET, 'requests.get(', ')', 0, "required-slot"),  # url is required positional
    # a policy's keyword is written out: *args / **kwargs fill the signature's slots, not the policy's
    # (the model wrote `yaml.load(f, **f.kwargs)` for ruff S506's Loader)
    (OPEN, 'open(', 'p, *rest)', 8, "required-slot"),
    (OPEN, 'open(', 'p, **kw)', 7, "required-slot"),
    (GET, 'requests.get(', '"u", **kw)', 9, "required-slot"),
    (GET, 'requests.get(', '"u", time_out=3', 14, "unknown-keyword"),
    (GET, 'requests.get(', '"u", timeout=3, timeout=4', 16, "keyword-expected"),  # no unused keyword starts "t"
    (GET, 'requests.get(', '"u", timeout=3, "x"', 16, "positional-after-keyword"),
    (GET, 'requests.get(', '"u", timeout=3, x', 16, "keyword-expected"),
    (UNRESOLVED, 'rq.get(', 'u, timeout=1, timeout=2', 22, "duplicate-keyword"),
    (UNRESOLVED, 'rq.get(', 'u, timeout=1, x)', 15, "positional-after-keyword"),
    (GET, 'requests.get(', 'a, b, c', 6, "too-many-positional"),
    (GET, 'requests.get(', ',', 0, "syntax"),
    (OPEN, 'open(', 'p)', 1, "required-slot"),  # pylint PLW1514: text mode without encoding
    (OPEN, 'open(', 'p, "r")', 6, "required-slot"),
    (UNRESOLVED, 'rq.get(', 'u)', 1, "required-slot"),  # the policy holds without a signature
    (GET, 'requests.get(', '"u", timeout=None)', 17, "required-slot"),  # ruff S113 flags None as well
    (GET, 'requests.get(', '"u", timeout= None , headers=h)', 19, "required-slot"),
]


@pytest.mark.parametrize("spec,prefix,completion,where,rule", REFUSED)
def test_slot_violations_are_refused_where_they_happen(spec, prefix, completion, where, rule) -> None:
    refusal, index, _ = run(spec, prefix, completion)
    assert refusal is not None and (index, refusal.rule) == (where, rule), (index, refusal)


def test_a_duplicate_after_another_keyword_is_refused_at_its_first_letter() -> None:
    refusal, index, _ = run(GET, 'requests.get(', '"u", timeout=3, headers=1, t')
    assert refusal is not None and refusal.rule == "keyword-expected" and index == 27


@pytest.mark.parametrize("prefix,completion,closing,closing_in_suffix", [
    ('requests.get(', '"u"', ", timeout=10)", ", timeout=10"),
    ('requests.get(', '"u",', " timeout=10)", " timeout=10"),
    ('requests.get(', '"u", ', "timeout=10)", "timeout=10"),
    ('requests.get(', '"u", tim', "eout=10)", "eout=10"),
    ('requests.get(', '"u", timeout=', "10)", "10"),
    ('requests.get(', '"u", timeout=3', None, None),  # nothing missing
])
def test_safe_continuation_fills_the_missing_keywords(prefix, completion, closing, closing_in_suffix) -> None:
    refusal, _, sem = run(GET, prefix, completion)
    assert refusal is None
    if closing is None:
        assert sem.open_calls()[0].missing() == []
        return
    assert sem.safe_continuation(suffix_closes=False) == closing
    assert sem.safe_continuation(suffix_closes=True) == closing_in_suffix
    compile(prefix + completion + closing, "<call>", "eval")


def test_safe_continuation_never_invents_a_required_positional() -> None:
    _, _, sem = run(GET, "requests.get(", "")
    assert sem.open_calls()[0].missing() == ["url", "timeout"]
    assert sem.safe_continuation(False) is None


def test_binary_mode_waives_the_encoding_rule() -> None:
    _, _, sem = run(OPEN, "open(", 'p, "rb"')
    assert sem.calls[0].missing() == []
    _, _, sem = run(OPEN, "open(", 'p, "r"')
    assert sem.calls[0].missing() == ["encoding"]


def test_keywords_given_after_the_cursor_count() -> None:
    prefix = 'x = requests.get("u", '
    state = lex_text(prefix)
    slots, closes = call_slots_at(GET, prefix, prefix.index("("), " timeout=f(a, b=2))\nprint(b=1)\n", state)
    assert closes and slots.suffix_keywords == {"timeout"} and slots.positional == 1
    sem = Semantics([slots], source=prefix)
    assert sem.check(state, b"timeout=1") is not None  # a duplicate of the suffix's keyword
    assert sem.check(state, b"headers=h)") is None


def test_member_access_allows_only_attributes() -> None:
    state = lex_text("os.")
    sem = Semantics(member=MemberAccess({"path", "getcwd", "environ"}, owner="os"), source="os.")
    assert sem.check(state, b"path") is None
    assert sem.check(state, b"pa") is None
    assert sem.check(state, b"paths") is not None
    assert sem.check(state, b"getcwd()") is None
    assert sem.check(state, b"pathx.") is not None
    probe = sem.copy()
    probe.advance(state, b"pa")
    assert not probe.accepting()  # "pa" is not an attribute yet
    probe.advance(lex_text("os.pa"), b"th")
    assert probe.accepting()


def test_check_is_pure_and_advance_commits() -> None:
    state = lex_text("requests.get(")
    sem = Semantics([call_slots_at(GET, "requests.get(", 12, "", state)[0]], source="requests.get(")
    assert sem.check(state, b'"u")') is not None
    assert sem.calls[0].positional == 0 and sem.source == "requests.get("
    assert sem.advance(state, b'"u", ') is None
    assert sem.calls[0].positional == 1 and sem.source.endswith('"u", ')


def test_calls_opened_by_the_completion_are_resolved_and_enforced() -> None:
    seen = []

    def resolver(source: str, paren: int):
        seen.append(source[: paren + 1])
        return GET if source[:paren].endswith("requests.get") else None

    state = lex_text("r = ")
    sem = Semantics(source="r = ", resolver=resolver)
    assert sem.check(state, b'requests.get("u")') is not None
    assert sem.check(state, b'print("u")') is None
    assert sem.check(state, b'requests.get("u", timeout=1)') is None
    assert seen[0] == "r = requests.get("
    assert sem.calls == []  # checks never commit


def test_def_and_class_parentheses_are_not_calls() -> None:
    calls = []
    sem = Semantics(source="", resolver=lambda source, paren: calls.append(source) or GET)
    state = lex_text("")
    assert sem.check(state, b"def get(") is None
    assert sem.check(state, b"class get(") is None
    assert calls == []


def test_an_argument_list_that_already_breaks_a_rule_is_not_enforced() -> None:
    """An unclosed call above the cursor swallows the next lines: enforce nothing (never block code)."""
    prefix = "data = yaml.load(f, \n    p = os.pa"
    assert call_slots_at(GET, prefix, prefix.index("("), "", lex_text(prefix)) == (None, False)


def test_safe_continuation_closes_the_brackets_the_completion_opened_inside_the_call() -> None:
    prefix, completion = "r = requests.get(", '"u", f(x, [1'
    refusal, _, sem = run(GET, prefix, completion)
    assert refusal is None
    state = lex_text(prefix + completion)
    closing = sem.safe_continuation(False, state)
    assert closing == "]), timeout=10)"
    compile(prefix + completion + closing, "<call>", "exec")
    assert sem.safe_continuation(True, state) == "]), timeout=10"


YAML_LOAD = CallSpec(
    callee="yaml.load", qualname="yaml.load",
    params=(Param("stream", "positional_or_keyword", True), Param("Loader", "positional_or_keyword", False)),
    keyword_names=frozenset({"stream", "Loader"}), positional_max=2, required_positional=("stream",),
    required_keywords=(RequiredKeyword("Loader", "S506", "yaml.SafeLoader", 1),))


@pytest.mark.parametrize("completion,ok", [
    ("f, Loader=yaml.SafeLoader)", True),
    ("f, yaml.CSafeLoader)", True),
    ("f, Loader=SafeLoader)", True),
    ("f, Loader=yaml.Loader)", False),  # ruff S506: only the safe loaders
    ("f, MyLoader)", False),
    ("f, Loader=None)", False),
])
def test_yaml_load_needs_a_safe_loader(completion, ok) -> None:
    refusal, _, _ = run(YAML_LOAD, "data = yaml.load(", completion)
    assert (refusal is None) is ok, refusal


@pytest.mark.parametrize("prefix,suffix,typed", [
    ("import os\n\n\ncl", "\n    def m(self):\n        pass\n", "cl"),
    ("def f():\n    try:\n        x = 1\n    ", "\n        y = 2\n", ""),
    ("def f():\n    if a:\n        x = 1\n    e", "\n\n        # a comment\n        y = 2\n", "e"),
])
def test_a_line_before_a_deeper_indented_one_must_open_a_block(prefix, suffix, typed) -> None:
    from engine.monitors import HEADER_KEYWORDS, block_header_at

    state = lex_text(prefix)
    header = block_header_at(prefix, suffix, state)
    assert header is not None and header.typed == typed
    rest = {"cl": "ass A(B):", "": "finally:", "e": "lse:"}[typed]
    sem = Semantics(member=header, source=prefix)
    for ch in rest:  # the real header passes, character by character
        assert sem.check(state, ch.encode()) is None
        sem.advance(state, ch.encode())
        state.feed_char(ch)
    compile(prefix + rest + suffix, "<test>", "exec")
    # a line that is no compound statement is refused where its logical line ends without continuing
    for wrong in ("x = 1\n", "_time  # note\n", "(a, b) = 1, 2\n"):
        state, sem = lex_text(prefix), Semantics(member=block_header_at(prefix, suffix, lex_text(prefix)), source=prefix)
        refused_at = None
        for i, ch in enumerate(wrong):
            refusal = sem.check(state, ch.encode())
            if refusal is not None:
                assert refusal.rule == "block-header"
                refused_at = i
                break
            sem.advance(state, ch.encode())
            state.feed_char(ch)
        assert refused_at == len(wrong) - 1, (wrong, refused_at)
        assert not sem.accepting()
    assert all(k.isidentifier() for k in HEADER_KEYWORDS)


@pytest.mark.parametrize("prefix,completion,suffix", [
    ("def f(x):\n    y = x + 1\n", "    print(y)", "\n    return y\n"),  # R2: the body's own indentation
    ("def f(x):\n    if x:\n        y = 1\n", "        y = 2", "\n        return y\n"),  # R2 sibling: deeper
    ("class C:\n    a = 1\n", "    b = 2", "\n\n    def m(self):\n        pass\n"),  # R2 sibling
    ("def build():\n    d", " = {", "\n        'host': 'localhost',\n    }\n    return d\n"),  # R3
    ("def build():\n    ", "cmd = [", "\n        'run',\n    ]\n    return cmd\n"),  # R3 sibling: a list
    ("def f(a):\n    ", "assert a, \\", "\n        'message'\n"),  # R3 sibling: a backslash
    ("def f():\n    ", 'text = """', '\n        indented\n    """\n    return text\n'),  # R3 sibling: a string
    ("def f(x):\n    y = x\n", "", "\n\n    return y\n"),  # a blank line stays blank
    ("def f(x):\n    y = x\n", "# note", "\n    return y\n"),  # a comment line
])
def test_lines_that_continue_or_sit_in_the_body_are_not_headers(prefix, completion, suffix) -> None:
    """Issue #16 R2/R3: what real code writes before a deeper-indented line passes."""
    from engine.monitors import block_header_at

    state = lex_text(prefix)
    sem = Semantics(member=block_header_at(prefix, suffix, state), source=prefix)
    assert sem.member is not None and sem.member.RULE == "block-header"
    for ch in completion:
        assert sem.check(state, ch.encode()) is None, ch
        sem.advance(state, ch.encode())
        state.feed_char(ch)
    compile(prefix + completion + suffix, "<test>", "exec")


@pytest.mark.parametrize("prefix,suffix", [
    ("x = 1\ny", "\nz = 2\n"),  # the next line is not deeper
    ("f(a,\n  b", "\n      c)\n"),  # inside brackets: a continuation line
    ("x = 1 + \\\n    y", "\n        z\n"),  # a backslash continues the line
    ("def f():\n    retu", "rn 1\n        x\n"),  # text after the cursor on its line
    ("def f():\n    value", "\n        x\n"),  # a word no header starts with: not this monitor's call
    ('s = """\n    a', '\n        b\n"""\n'),  # inside a string
])
def test_no_block_header_is_required_elsewhere(prefix, suffix) -> None:
    from engine.monitors import block_header_at

    assert block_header_at(prefix, suffix, lex_text(prefix)) is None


def test_slots_are_not_enforced_where_a_test_expects_the_error() -> None:
    """``with self.assertRaises(TypeError): f()`` calls wrongly on purpose (real code, test_clinic)."""
    from engine.monitors.setup import expects_errors

    assert expects_errors("class T:\n    def test(self):\n        with self.assertRaises(TypeError):\n            f(")
    assert expects_errors("def test():\n    with pytest.raises(ValueError, match='x'):\n        g(")
    assert not expects_errors("def test():\n    with open(p) as f:\n        g(")
    assert not expects_errors("with self.assertRaises(E):\n    pass\nf(")


PATH_OPEN = CallSpec(
    callee="p.open", qualname="pathlib.Path.open",
    params=tuple(Param(n, "positional_or_keyword", False) for n in ("mode", "buffering", "encoding")),
    keyword_names=frozenset({"mode", "buffering", "encoding"}), positional_max=3, required_positional=(),
    required_keywords=())


@pytest.mark.parametrize("spec,prefix,completion,refused_at", [
    (OPEN, "f = open(", "path, 'rb')", None),
    (OPEN, "f = open(", 'path, "w+", encoding="utf-8")', None),
    (OPEN, "f = open(", "path, mode='at', encoding=e)", None),
    (OPEN, "f = open(", "path, m, encoding=e)", None),  # a variable: not judged
    (OPEN, "f = open(", "path, f'{m}', encoding=e)", None),  # a prefix letter: not judged
    (OPEN, "f = open(", "'data.txt', encoding='utf-8')", None),  # the file name is no mode
    (OPEN, "f = open(", "'dir1', 'dir2', encoding='utf-8')", len("'dir1', '")),  # what the model wrote
    (OPEN, "f = open(", 'name, "wheel CUDA", encoding="utf-8")', len('name, "w')),
    (OPEN, "f = open(", "path, 'rw')", len("path, 'r")),
    (OPEN, "f = open(", "path, 'b')", len("path, 'b")),  # no r, w, x or a when the literal closes
    (OPEN, "f = open(", "path, mode='rbt')", len("path, mode='rb")),
    (PATH_OPEN, "f = p.open(", "'wb')", None),
    (PATH_OPEN, "f = p.open(", "'wr')", len("'w")),
])
def test_open_takes_only_modes_it_accepts(spec, prefix, completion, refused_at) -> None:
    """open()'s mode as a string literal must be one open() accepts (it raises ValueError
    otherwise): refused at the first character no valid mode has, or at a closing quote with no
    r, w, x or a (``refused_at``: that character's index). A file name's literal, a variable and
    an f-string are not judged."""
    refusal, at, _ = run(spec, prefix, completion)
    if refused_at is None:
        assert refusal is None, refusal
        compile(prefix + completion, "<call>", "exec")
    else:
        assert refusal is not None and refusal.rule == "invalid-mode" and at == refused_at, (refusal, at)
