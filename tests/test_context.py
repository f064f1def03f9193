"""The project-context cache (engine/context): counts, Witten-Bell backoff, nesting, drafts, the
logit mixture, scope syncing and the workspace slice, on tiny id sequences with exact values."""

from __future__ import annotations

import random
import subprocess
from fractions import Fraction as F
from pathlib import Path

import pytest
import torch

from engine.api import ProjectContext
from engine.context import ContextCache, NestedCache, NgramCounts, workspace
from engine.context.ngram import PSEUDO_COUNT
from engine.decode import mix_cache


def test_counts_of_every_order():
    c = NgramCounts(order=3)
    c.set("a", [1, 2, 3, 1, 2, 4])
    assert c.next[()] == {1: 2, 2: 2, 3: 1, 4: 1} and c.total[()] == 6
    assert c.next[(1,)] == {2: 2} and c.next[(2,)] == {3: 1, 4: 1} and c.next[(3,)] == {1: 1}
    assert c.next[(1, 2)] == {3: 1, 4: 1} and c.next[(2, 3)] == {1: 1} and c.next[(3, 1)] == {2: 1}
    assert len(c.next) == 7 and c.total[(1, 2)] == 2
    assert c.longest_context([9, 1, 2]) == (1, 2) and c.longest_context([9, 9]) == ()
    assert c.confidence((1, 2)) == 0.5 and c.confidence((7,)) == 0.0
    assert c.top((2,), 5) == [3, 4]


def test_witten_bell_backoff_exact():
    c = NgramCounts(order=3)
    c.set("a", [1, 2, 3, 1, 2, 4])
    v = 10
    p0 = (F(1) + 4 * F(1, v)) / (6 + 4)  # () : c=6, T=4
    p1 = (1 + 2 * p0) / (2 + 2)  # (2,) : c=2, T=2
    p2 = (1 + 2 * p1) / (2 + 2)  # (1, 2)
    assert c.prob(3, [1, 2], v) == pytest.approx(float(p2))  # 0.41
    assert c.prob(3, [1, 2], v) == pytest.approx(0.41)
    # an unseen context passes the lower order through; an unseen token only gets backoff mass
    assert c.prob(3, [9, 2], v) == pytest.approx(float(p1))
    assert c.prob(7, [1, 2], v) == pytest.approx(float((0 + 2 * ((0 + 2 * (4 * F(1, v) / 10)) / 4)) / 4))
    # probabilities over the vocabulary sum to 1
    assert sum(c.prob(w, [1, 2], v) for w in range(v)) == pytest.approx(1.0)
    assert NgramCounts(3).prob(5, [1], v) == pytest.approx(0.1)  # nothing counted: uniform


def test_sequences_do_not_join():
    c = NgramCounts(order=2)
    c.set("prefix", [1, 2])
    c.set("suffix", [3, 4])
    assert (2,) not in c.next  # nothing learnt across the cursor
    assert c.next[(1,)] == {2: 1} and c.next[(3,)] == {4: 1}


def _fresh(seqs, order):
    c = NgramCounts(order)
    for k, s in seqs.items():
        c.set(k, s)
    return c


def test_incremental_updates_equal_a_recount():
    rng = random.Random(0)
    c = NgramCounts(order=4)
    seqs = {}
    for _ in range(300):
        key = rng.choice("abc")
        old = list(seqs.get(key, []))
        op = rng.random()
        if op < 0.5:  # typing: insert a few ids somewhere
            at = rng.randint(0, len(old))
            new = old[:at] + [rng.randint(0, 5) for _ in range(rng.randint(1, 3))] + old[at:]
        elif op < 0.8 and old:  # deleting a span
            a = rng.randint(0, len(old) - 1)
            new = old[:a] + old[a + rng.randint(1, 4):]
        elif op < 0.95:
            new = [rng.randint(0, 5) for _ in range(rng.randint(0, 12))]
        else:
            new = []
        c.set(key, new)
        if new:
            seqs[key] = new
        else:
            seqs.pop(key, None)
        ref = _fresh(seqs, 4)
        assert c.next == ref.next and c.total == ref.total
    assert c.set("a", seqs.get("a", [])) == 0  # unchanged: nothing recounted


def test_typing_recounts_only_the_change():
    c = NgramCounts(order=6)
    doc = list(range(100))
    c.set("d", doc)
    assert c.set("d", doc + [7]) == 1
    assert c.set("d", doc[:50] + [7, 8] + doc[50:] + [7]) == 2


def test_nested_prediction_mixes_innermost_first():
    v = 10
    cache = NestedCache(("document", "workspace"), order=3, vocab_size=v, min_context=2)
    cache["document"].set("p", [7, 8, 9])
    cache["workspace"].set("f", [7, 8, 5, 7, 8, 5])
    pred = cache.predict([1, 7, 8])
    k = PSEUDO_COUNT
    l_in, l_out = F(1, 2 + k), F(2, 3 + k)  # c/(c+T+k): (7,8) seen once with 1 follower; twice with 1
    w_in, w_out = l_in, (1 - l_in) * l_out

    def wb(total0, t0, c0, steps):
        p = (c0 + t0 * F(1, v)) / (total0 + t0)
        for cnt, tot, t in steps:
            p = (cnt + t * p) / (tot + t)
        return p

    p_in_9 = wb(3, 3, 1, [(1, 1, 1), (1, 1, 1)])
    p_in_5 = wb(3, 3, 0, [(0, 1, 1), (0, 1, 1)])
    p_out_5 = wb(6, 3, 2, [(2, 2, 1), (2, 2, 1)])
    p_out_9 = wb(6, 3, 0, [(0, 2, 1), (0, 2, 1)])
    mix_9 = (w_in * p_in_9 + w_out * p_out_9) / (w_in + w_out)
    mix_5 = (w_in * p_in_5 + w_out * p_out_5) / (w_in + w_out)
    expected = sorted([(9, mix_9), (5, mix_5)], key=lambda x: -x[1])
    assert pred.ids == [w for w, _ in expected]
    assert pred.probs == pytest.approx([float(p) for _, p in expected])
    assert pred.confidence == pytest.approx(float(1 - (1 - l_in) * (1 - l_out)))
    assert pred.context == 2
    # too little context (one token) or none: no opinion
    assert cache.predict([8]).ids == [] and cache.predict([3, 4]).confidence == 0.0
    # an outer scope may ask for a longer match: then only the document predicts here
    strict = NestedCache(("document", "workspace"), order=3, vocab_size=v, min_context=2,
                         scope_min_context={"workspace": 3})
    strict["document"].set("p", [7, 8, 9])
    strict["workspace"].set("f", [7, 8, 5, 7, 8, 5])
    alone = strict.predict([1, 7, 8])
    assert alone.ids == [9] and alone.probs == pytest.approx([float(p_in_9)]) and alone.confidence == float(l_in)


def test_drafts_continue_the_longest_match():
    cache = NestedCache(("document", "workspace"), order=4, vocab_size=50, min_context=2)
    cache["document"].set("p", [1, 2, 3, 4, 5])
    assert cache.draft([9, 1, 2], 2) == [3, 4]  # order 4 reads 3 ids: (9,1,2) unseen, (1,2) -> 3, then (1,2,3) -> 4
    assert cache.draft([1, 2], 10) == [3, 4, 5]  # stops where the match ends
    assert cache.draft([2], 3) == []  # one id of context is not enough
    cache["workspace"].set("f", [1, 2, 9])
    assert cache.draft([1, 2], 1) == [3]  # same length: the innermost scope wins
    cache["workspace"].set("g", [0, 1, 2, 8, 8])
    assert cache.draft([0, 1, 2], 2) == [8, 8]  # a longer match in an outer scope wins


def test_mix_cache_is_the_probability_mixture():
    torch.manual_seed(0)
    logits = torch.randn(50)
    ids, probs, w = [3, 17], [0.6, 0.3], 0.4
    out = mix_cache(logits, ids, probs, w)
    p_model = torch.softmax(logits, -1)
    p_cache = torch.zeros(50)
    p_cache[ids] = torch.tensor(probs)
    q = (1 - w) * p_model + w * p_cache
    assert torch.allclose(torch.softmax(out, -1), q / q.sum(), atol=1e-6)
    changed = (out != logits).nonzero().flatten().tolist()
    assert changed == ids  # only the candidates move
    assert mix_cache(logits, [], [], w) is logits and mix_cache(logits, ids, probs, 0.0) is logits


def _encoder(calls):
    def encode_batch(texts):
        calls.extend(texts)
        return [[ord(ch) for ch in t] for t in texts]
    return encode_batch


def test_sync_tokenizes_only_changed_texts_and_excludes_the_document(tmp_path):
    calls: list[str] = []
    cache = ContextCache(_encoder(calls), vocab_size=256, order=3)
    me = str(tmp_path / "me.py")
    project = ProjectContext(documents={me: "mine", "untitled:1": "abcd"}, workspace={str(tmp_path / "w.py"): "wxyz"})
    assert cache.sync(project, exclude=me) == 2
    assert sorted(calls) == ["abcd", "wxyz"]
    assert cache.sizes() == {"document": 0, "open": 4, "workspace": 4}
    assert cache.sync(project, exclude=me) == 0  # nothing changed: nothing tokenized
    project.documents["untitled:1"] = "abcde"
    del project.workspace[str(tmp_path / "w.py")]
    assert cache.sync(project, exclude=me) == 1 and calls[-1] == "abcde"
    assert cache.sizes() == {"document": 0, "open": 5, "workspace": 0}
    cache.set_document([ord("a"), ord("b")], [])
    assert cache.draft([ord("a"), ord("b")], 3) == [ord("c"), ord("d"), ord("e")]
    assert cache.sync(None) == 0 and cache.sizes() == {"document": 2, "open": 0, "workspace": 0}


def test_the_open_documents_are_synced_by_the_request_not_by_a_workspace_scan(tmp_path):
    """A workspace scan syncs the workspace scope only, and a request syncs the open documents
    without its own even while a scan holds the workspace scope (the nvim e2e case: a request
    during the first scan counted its own buffer as an open document and got an empty line)."""
    calls: list[str] = []
    cache = ContextCache(_encoder(calls), vocab_size=256, order=3)
    me, other = str(tmp_path / "me.py"), str(tmp_path / "other.py")
    project = ProjectContext(documents={me: "mine", other: "theirs"}, workspace={str(tmp_path / "w.py"): "wxyz"})
    assert cache.sync(project, scopes=("workspace",)) == 1
    assert cache.sizes() == {"document": 0, "open": 0, "workspace": 4}
    with cache._syncing["workspace"]:  # a scan is running
        assert cache.sync(project, exclude=me, wait=False) == 1
    assert calls[-1] == "theirs" and cache.sizes() == {"document": 0, "open": 6, "workspace": 4}
    assert cache.sync(project, exclude="untitled:Untitled-1") == 1  # another buffer's request
    assert cache.sizes()["open"] == 10


def _tree(root):
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "b.py").write_text("B = 2\n")
    (root / "other").mkdir()
    (root / "other" / "c.py").write_text("C = 3\n")
    (root / "gen").mkdir()
    (root / "gen" / "big.py").write_text("X = 0\n")
    (root / "latin.py").write_bytes("# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\n".encode("latin-1"))
    (root / ".gitignore").write_text("gen/\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.py").write_text("junk\n")


@pytest.mark.parametrize("git", [False, True])
def test_workspace_slice_respects_gitignore_and_bounds(tmp_path, git):
    if git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _tree(tmp_path)
    if git:
        (tmp_path / "__pycache__" / "x.py").unlink()  # git has its own ignore rules; keep the tree comparable
    got = workspace.collect(tmp_path)
    names = sorted(str(Path(p).relative_to(tmp_path)) for p in got)
    assert names == ["latin.py", "other/c.py", "pkg/a.py", "pkg/b.py"]
    assert got[str(tmp_path / "latin.py")].endswith("NAME = 'café'\n")  # PEP 263 decoding
    near = workspace.collect(tmp_path, near=tmp_path / "pkg" / "new.py", max_files=2)
    assert sorted(near) == [str(tmp_path / "pkg" / "a.py"), str(tmp_path / "pkg" / "b.py")]  # same folder first
    assert len(workspace.collect(tmp_path, max_bytes=7)) == 1  # the byte budget
    assert str(tmp_path / "pkg" / "a.py") not in workspace.collect(tmp_path, exclude=[tmp_path / "pkg" / "a.py"])
    assert workspace.collect(tmp_path / "missing") == {}


def test_a_workspace_inside_an_ignored_folder_of_a_repository_is_its_own_project(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("tools/\n")
    project = tmp_path / "tools" / "lib"
    project.mkdir(parents=True)
    (project / "a.py").write_text("A = 1\n")
    (project / "b.py").write_text("B = 2\n")
    assert sorted(Path(p).name for p in workspace.collect(project)) == ["a.py", "b.py"]


SIBLING = '''"""Widgets."""


def frobnicate_widget_settings(widget, level):
    return widget.configure(level)


def make_registry():
    registry = WidgetRegistry(default_level=3, strict_mode=True)
    frobnicate_widget_settings(registry, level=4)
    return registry
'''
MAIN = "from widgets import WidgetRegistry\n\n\ndef build():\n    registry = WidgetRegistry("


def test_a_name_only_a_sibling_file_defines_is_completed_with_the_cache(engine, tmp_path):
    """The real engine and model: the keyword ``default_level`` exists only in a sibling "project"
    file; with the project context the completion copies it, without it the model cannot know it
    (its value is the model's and the cache's to weigh: the stage-4 model writes ``True``)."""
    from dataclasses import replace

    from engine.api import CompletionRequest

    project = ProjectContext(workspace={str(tmp_path / "widgets.py"): SIBLING})

    def request():
        return CompletionRequest(prefix=MAIN, suffix="\n", project=project, path=str(tmp_path / "main.py"))

    old = engine.settings
    try:
        engine.update_settings(replace(old, context=replace(old.context, cache_model=True)))
        on = engine.complete(request())
        assert on.text.startswith("default_level="), on.text
        assert on.context["counted"]["workspace"] > 0 and on.context["mixed_steps"] > 0
        engine.update_settings(replace(old, context=replace(old.context, cache_model=False)))
        off = engine.complete(request())
        assert "default_level" not in off.text and off.context == {}
        engine.update_settings(replace(old, context=replace(old.context, cache_model=True, workspace=False)))
        scoped = engine.complete(request())  # the scope switched off: not counted, not copied
        assert scoped.context["counted"]["workspace"] == 0 and "default_level" not in scoped.text
    finally:
        engine.update_settings(old)


# -- line copies (engine.context.lines) ----------------------------------------------------------


def _first_char(rest):
    return ord(rest[0])


def test_lines_that_start_like_the_cursors_line_vote_for_their_continuation():
    from engine.context.lines import FULL_KEY, LineIndex

    index = LineIndex()
    index.set("document", ("    x = Matrix(2, 2)\n    y = Matrix(3)\n",))
    index.set("workspace", ("x = Matrix(2, 2)\nx = Matrix\n", "x = Mat\n"))
    ids, probs, confidence = index.votes("        x = Mat", _first_char, end_id=10)
    # document "rix(2, 2)" (counts twice); workspace "rix(2, 2)", "rix" (same first piece), the line's end
    assert ids == [ord("r"), 10] and probs == [pytest.approx(0.8), pytest.approx(0.2)]
    assert confidence == pytest.approx(5 / 6 * len("x = Mat") / FULL_KEY)
    assert index.votes("        q = Mat", _first_char, 10) == ([], [], 0.0)  # no line starts so
    assert index.votes("   x", _first_char, 10) == ([], [], 0.0)  # shorter than MIN_KEY


def test_a_texts_unfinished_last_line_does_not_vote():
    """Its end is no line end: the same text open twice (its cursor at the end of both) made the
    other copy's ``return os.path.join(`` vote for ending the line there."""
    from engine.context.lines import LineIndex

    index = LineIndex()
    index.set("open", ("def home(user):\n    return os.path.join(",))
    assert index.votes("    return os.path.join(", _first_char, end_id=10) == ([], [], 0.0)
    assert index.votes("def home", _first_char, end_id=10)[0] == [ord("(")]  # the finished lines still vote
    index.set("open", ("def home(user):\n    return os.path.join(\n",))  # finished: the line does end there
    assert index.votes("    return os.path.join(", _first_char, end_id=10)[0] == [10]
    # the document's own text after the cursor and a workspace file are not typed into: their last line counts
    for scope in ("document", "workspace"):
        index = LineIndex()
        index.set(scope, ("x = 1\ncfg = helpers.frobnicate(cfg, 3)",))
        assert index.votes("cfg = helpers.frob", _first_char, end_id=10)[0] == [ord("n")], scope


def test_the_same_text_open_twice_completes_as_one_does(engine):
    """The real engine and model in a document whose text another open document has too (the same
    buffer under two URIs): that copy is left out of the project context (its copy of the cursor's
    unfinished line said the line ends there: ``\n\"\"\"\"\"\")`` instead of ``user, 'user')``, an
    empty completion after ``print(se``); and before the completion writes its own first character
    no copied line votes for ending the line (that vote became a wrap)."""
    from engine.api import CompletionRequest, ProjectContext

    text = "import os\n\n\ndef home(user):\n    return os.path.join("
    alone = engine.complete(CompletionRequest(prefix=text))
    assert alone.text and "\n" not in alone.text
    for other in (text, text + "\n"):  # the same buffer; finished, where the line copy would end it before a word
        twice = engine.complete(CompletionRequest(prefix=text, project=ProjectContext(documents={"untitled:h.py": other})))
        assert twice.text == alone.text, other[-8:]
    # mid-file, in a word (the model re-types its end first): the other copy's line ``print(se`` ends there
    prefix = "class Printer:\n    def show(self, i):\n        if i:\n            print(se"
    suffix = "\n        return i\n\n\nPrinter().show(1)\n"
    alone = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix))
    twice = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix,
                                              project=ProjectContext(documents={"untitled:p.py": prefix + suffix})))
    assert alone.text and twice.text == alone.text


def test_line_votes_are_asked_once_per_first_piece():
    from engine.context.lines import LineIndex

    asked = []
    index = LineIndex()
    index.set("document", ("\n".join(f"assert pretty(expr_{i}) == s" for i in range(50)) + "\nassert pretty( 'a' )\n",))
    ids, probs, _ = index.votes("assert pretty(", lambda rest: asked.append(rest) or ord(rest[0]), None)
    assert ids == [ord("e"), ord(" ")] and probs[0] == pytest.approx(50 / 51)
    assert len(asked) == 2  # one rest per group: " 'a' )" and "expr_0) == s" (for all fifty lines)


def test_the_cache_indexes_the_document_without_the_cursors_line_and_follows_syncs(tmp_path):
    calls: list[str] = []
    cache = ContextCache(_encoder(calls), vocab_size=256, order=3)
    cache.set_document_text("total = compute(a)\ntotal = comp", "ute(b)\nprint(total)\n")
    pred = cache.predict_line("total = comp")
    assert pred.ids == [ord("u")] and pred.probs == [1.0]  # from the line above, not from the cursor's own line
    other = str(tmp_path / "other.py")
    cache.sync(ProjectContext(workspace={other: "total = comp_x\n"}))
    assert cache.predict_line("total = comp").ids == [ord("u"), ord("_")]
    cache.sync(None)
    assert cache.predict_line("total = comp").ids == [ord("u")]
    cache.set_document_text("x = 1\n", "")
    assert cache.predict_line("total = comp").ids == []
    with cache._lock:  # a sync holds the counts: no waiting in a decode step
        assert cache.predict_line("x =").ids == []


def test_a_line_that_starts_like_one_above_is_copied_by_the_real_engine(engine, monkeypatch):
    """The real engine and model: ``total = sum_c`` starts like a line above, whose continuation
    the line copies carry through (the model alone, and the n-gram scopes, stop after ``start=1``)."""
    from engine.api import CompletionRequest
    from engine.context.ngram import EMPTY

    prefix = ("def check(grid):\n    total = sum_cells(grid, start=1, stop=-1)\n    print(total)\n"
              "    other = 3\n    total = sum_c")
    on = engine.complete(CompletionRequest(prefix=prefix, suffix="\n"))
    assert on.text == "ells(grid, start=1, stop=-1)" and on.context["line_steps"] > 0
    fresh = engine.complete(CompletionRequest(prefix=prefix[: prefix.rfind("\n") + 5], suffix="\n"))
    assert "line_steps" not in fresh.context  # an empty line: what the model writes alone is no key
    monkeypatch.setattr(engine.context, "predict_line", lambda line, ends=True: EMPTY)
    off = engine.complete(CompletionRequest(prefix=prefix, suffix="\n"))
    assert off.text != on.text and "line_steps" not in off.context


def test_the_line_most_lines_go_on_with_is_a_draft():
    from engine.context.lines import LineIndex

    index = LineIndex()
    index.set("document", ("x = Matrix(2, 2)\nx = Matrix(2, 2)\nx = Mat\n",))
    assert index.best_rest("    x = Mat") == "rix(2, 2)"
    index.set("workspace", ("x = Mat\n" * 5,))  # most lines end here: no draft
    assert index.best_rest("x = Mat") is None
    assert index.best_rest("q = ") is None
    cache = ContextCache(_encoder([]), vocab_size=256, order=3)
    cache.set_document_text("total = compute(a)\n", "")
    assert cache.draft_line("total = comp", 3) == [ord("u"), ord("t"), ord("e")]


def test_line_copies_read_texts_as_the_tokenizer_does():
    """A lone surrogate (a broken paste in an open document) and a lone CR line ending: the lines
    are the scalar text's (the tokenizer raised TypeError on the raw text)."""
    from transformers import AutoTokenizer

    from engine.context import batch_encoder
    from engine.settings import DEFAULT_MODEL_DIR

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    cache = ContextCache(batch_encoder(tok), vocab_size=len(tok))
    cache.sync(ProjectContext(workspace={"/w/o.py": 'v = "ab\ud800cd"\rw = 1\r'}))
    assert cache.predict_line('v = "ab').ids and cache.draft_line('v = "ab', 4)
    assert cache.predict_line("w =").ids  # its own line, after a lone CR


def test_an_open_twin_that_is_also_a_workspace_file_is_counted_nowhere(tmp_path):
    """Leaving the twin (an open document with the current text) out of the open scope must not let
    its saved copy back in through the workspace scope: an open file's disk text is never counted."""
    calls: list[str] = []
    cache = ContextCache(_encoder(calls), vocab_size=256, order=3)
    text = "def home(user):\n    return os.path.join("
    a, b = str(tmp_path / "a.py"), str(tmp_path / "b.py")
    cache.sync(ProjectContext(documents={b: text}, workspace={a: text, b: text[:-5]}), a, text=text)
    assert cache.sizes()["open"] == 0 and cache.sizes()["workspace"] == 0
