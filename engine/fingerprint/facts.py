"""Document facts for features 11-14: imported modules and calls of the builtin ``open``, read from
tree-sitter-python's parse of the whole document (prefix + suffix), reparsed incrementally per
document (``Tree.edit`` + ``Parser.parse(data, old_tree)``). Words in strings and comments never
count; imports inside ERROR nodes (a half-typed statement) are read from their line."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from functools import lru_cache

from ..text import common_prefix, common_suffix

HTTP_CLIENTS = frozenset({"requests", "httpx", "urllib3", "aiohttp"})
FILE_IO_MODULES = frozenset({"pathlib", "io", "yaml", "json", "csv", "shutil"})
TEST_MODULES = frozenset({"pytest", "unittest"})

_FACT_WORDS = (b"import", b"open")
_LINE_IMPORT = re.compile(rb"[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([^\n;#]*))")
_LEADING_NAME = re.compile(rb"\s*([A-Za-z_]\w*)")


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


class _Trees:
    """The last tree-sitter tree per document key (the path), reparsed incrementally: the edit is the
    changed middle between the old and new bytes (common prefix and suffix), applied with
    ``Tree.edit`` so that ``Parser.parse(data, old_tree)`` reuses the unchanged subtrees."""

    def __init__(self, size: int = 8):
        self._lock = threading.Lock()
        self._docs: OrderedDict = OrderedDict()
        self._size = size

    def parse(self, key, data: bytes):
        from tree_sitter import Point

        with self._lock:
            old = self._docs.pop(key, None)
            parser = _parser()
            if old is None:
                tree = parser.parse(data)
            elif old[0] == data:
                tree = old[1]
            else:
                before, tree = old
                a = common_prefix(before, data)
                s = common_suffix(before, data, a)
                while a and a < len(data) and data[a] & 0xC0 == 0x80:  # UTF-8 character boundaries
                    a -= 1
                while s and data[len(data) - s] & 0xC0 == 0x80:
                    s -= 1

                def point(b: bytes, off: int):
                    return Point(b.count(b"\n", 0, off), off - (b.rfind(b"\n", 0, off) + 1))

                tree.edit(start_byte=a, old_end_byte=len(before) - s, new_end_byte=len(data) - s,
                          start_point=point(data, a), old_end_point=point(before, len(before) - s),
                          new_end_point=point(data, len(data) - s))
                tree = parser.parse(data, tree)
            self._docs[key] = (data, tree)
            while len(self._docs) > self._size:
                self._docs.popitem(last=False)
            return tree


_TREES = _Trees()


def _first_name(node) -> str:
    """``a`` for the dotted_name ``a.b.c`` (or an aliased_import of it); "" otherwise."""
    if node.type == "aliased_import":
        node = node.child_by_field_name("name")
    if node is None or node.type != "dotted_name" or not node.named_children:
        return ""
    return node.named_children[0].text.decode("utf-8", "replace")


def _occurrences(data: bytes):
    """``(word, byte offset)`` of every occurrence of the words of :data:`_FACT_WORDS` (``bytes.find``
    is an order of magnitude faster here than a regular expression with word boundaries)."""
    for word in _FACT_WORDS:
        at = data.find(word)
        while at >= 0:
            yield word, at
            at = data.find(word, at + len(word))


def warm_facts(doc: str, path) -> None:
    """Parse the document ``doc`` (the text a request in it will read) for the facts of ``path``
    before any request asks, as :func:`engine.fingerprint.features.fingerprint` would: a request
    then reparses only what changed since (warm-up on open)."""
    _document_facts(doc.encode("utf-8", "surrogatepass"), path)


def _document_facts(data: bytes, key) -> tuple[frozenset[str], bool]:
    """``(top-level names of the imported modules, whether the builtin open() is called)`` in the
    document ``data`` (UTF-8)."""
    root = _TREES.parse(key, data).root_node
    modules: set[str] = set()
    opens = False
    done: set[int] = set()
    for word, at in _occurrences(data):
        node = root.descendant_for_byte_range(at, at + len(word))
        if node is None or node.type not in ("identifier", "import") or node.start_byte != at or (
                node.end_byte != at + len(word)):
            continue  # part of a longer name, or in a string or comment
        if word == b"open":
            parent = node.parent
            if not opens and node.type == "identifier" and parent is not None and parent.type == "call":
                opens = parent.child_by_field_name("function").start_byte == node.start_byte
            continue
        stmt = node.parent
        if stmt is None or stmt.start_byte in done:
            continue
        done.add(stmt.start_byte)
        if stmt.type == "import_statement":
            modules.update(_first_name(c) for c in stmt.children_by_field_name("name"))
        elif stmt.type == "import_from_statement":
            modules.add(_first_name(stmt.child_by_field_name("module_name")))
        elif stmt.type == "ERROR":  # a half-typed import: read its line
            line = data.rfind(b"\n", 0, at) + 1
            lm = _LINE_IMPORT.match(data, line)
            if lm and lm.group(1):
                modules.add(lm.group(1).decode())
            elif lm:
                for part in lm.group(2).split(b","):
                    nm = _LEADING_NAME.match(part)
                    if nm:
                        modules.add(nm.group(1).decode())
    modules.discard("")
    return frozenset(modules), opens
