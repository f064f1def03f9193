"""Warm-up on open (issue 13): a document just opened is lexed and parsed by jedi before the
first request, off the request path."""

from __future__ import annotations


def test_a_document_just_opened_is_lexed_and_parsed(engine, tmp_path):
    from engine.resolve import jedi_client

    path = tmp_path / "opened.py"
    text = "import os\n\n\ndef f(path):\n    return os.path.join(path, 'x')\n" * 40
    path.write_text(text, encoding="utf-8")
    engine.warm_document(text, str(path))
    assert engine.prefix_lexer._text == text  # states at every line start: any cursor lexes from there
    assert engine.prefix_lexer.top_level(text.index("def f"))
    from parso.cache import parser_cache

    assert any(str(path) in {str(k) for k in by_path} for by_path in parser_cache.values())  # parso's cache by path
    assert jedi_client.warm_parse(text, None) is False  # an unsaved buffer has no path to cache by
    from engine.fingerprint.facts import _TREES
    from engine.monitors import name_table

    assert _TREES._docs[str(path)][0] == text.encode("utf-8")  # the facts' tree: a request reparses what changed
    assert any(old == text for old, _ in name_table._RECENT_SCOPES)  # the scopes: moved by what is typed


def test_warming_never_raises(engine):
    engine.warm_document("def (:\n\x00 broken", "/nonexistent/dir/x.py")


def test_lexing_on_open_yields_to_a_waiting_request(engine):
    """The lexing goes in chunks and stops when a request waits for the engine (it sets
    ``_wanted`` before taking the lock): the request lexes the rest of its own prefix."""
    text = "value = compute(1, 2)\n" * 2000  # 44 k code points: several chunks
    assert len(text) > 3 * engine.WARM_LEX_CHARS
    engine._wanted.set()
    try:
        engine.warm_document(text + "# a\n")
        assert engine.prefix_lexer._text != text + "# a\n"  # nothing lexed: a request was waiting
        from engine.monitors import name_table

        assert not any(old == text + "# a\n" for old, _ in name_table._RECENT_SCOPES)  # nor scanned
    finally:
        engine._wanted.clear()
    engine.warm_document(text + "# b\n")
    assert engine.prefix_lexer._text == text + "# b\n"


def test_the_callees_of_a_document_just_opened_are_resolved_for_the_decode_loop(engine):
    """The decode loop reads jedi's cache only (no decode step waits for jedi): the warm-up on open
    resolves the calls the document makes, which are most of those a completion opens."""
    from engine import signatures
    from engine.resolve import jedi_client

    signatures.clear_cache()
    text = "import textwrap\n\n\ndef f(s):\n    return textwrap.indent(s, '  ')\n"
    engine.warm_document(text)
    assert jedi_client.deferred() == 0
    completion = text + "x = textwrap.indent("
    spec = signatures.resolve_callee(completion, len(completion) - 1, cached_only=True)
    assert spec is not None and [p.name for p in spec.params][:2] == ["text", "prefix"]
