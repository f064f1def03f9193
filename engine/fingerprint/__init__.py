"""Intent fingerprint: 16 named features of the editor context at the cursor, and the constraint mode
(with its generation policy) they select.

:func:`fingerprint` reads the document as text only; it never imports or runs user code. It is
deterministic, never raises on malformed input (broken, half-typed or binary-looking text gives a
best-effort answer), and explains itself (:attr:`Fingerprint.reasons`, :meth:`Fingerprint.as_dict`).

How the features are computed
-----------------------------
* **Cursor-local features** (1-10, 15, 16 and the ``def test_*`` part of 14) come from the tolerant
  scan of the *prefix* (the text before the cursor, :mod:`engine.lexing.scanner`): strings (all
  prefixes, triple quotes, escapes), f-string replacement fields (PEP 701 nesting, format specs),
  comments, brackets, backslash continuations and ``;``. Scanning the prefix only is what makes this robust while the
  user types: an unclosed ``requests.get("x", `` is simply an open call bracket, whatever the
  suffix holds. Scopes (class body, enclosing ``def``)
  come from the indentation of the logical lines before the cursor (Language Reference 2.1.8),
  which survives syntax errors that make a parser's tree unreliable at the cursor.
  The scanner's error recovery keeps one broken line from poisoning the rest of the file.
* **Document features** (11-13 and the import part of 14) come from tree-sitter-python's parse of
  the whole document (prefix + suffix): import statements (any form: ``import requests as rq``,
  ``from httpx import Client``, imports inside functions) and calls of the builtin ``open``. Imports
  inside ERROR nodes (a half-typed statement) are read from their line. Words in strings and
  comments never count. The tree of the previous request for the same path is reused (tree-sitter
  incremental parsing: ``Tree.edit`` + ``Parser.parse(data, old_tree)``), so a keystroke costs a
  partial reparse.

Compile once, run cheap: the scanner resumes from checkpoints of earlier scans, and the
tree-sitter tree is reparsed incrementally. Measured on a 1,000-line file (35,563 code points) on a
shared 2-core machine: about 0.2-0.6 ms per keystroke, 6-14 ms the first time a document is seen
(4-10 ms of it tree-sitter's full parse). Offsets are 0-based code points; nothing here counts
UTF-16 units.

Features (the order of :data:`FEATURES` and of :attr:`Fingerprint.vector`; booleans are 0/1)
--------------------------------------------------------------------------------------------
==  ======================  ===========================================================================
 #  name                    definition (:data:`FEATURE_DOCS` has the one-line text)
==  ======================  ===========================================================================
 1  in_call_args            the innermost open bracket of the innermost code context is a call's ``(``
 2  in_string               inside a string literal (docstrings included), not in a replacement field
 3  in_fstring_field        inside an f-string ``{...}`` replacement field (its code or format spec)
 4  in_comment              inside a ``#`` comment
 5  in_docstring            inside the first statement of a module/class/def body, a string (PEP 257)
 6  at_line_start           only whitespace between the line start and the cursor
 7  after_block_opener      blank up to the cursor after a block opener line ending in ``:``
 8  in_def_signature        in the parameters of a ``def`` or its return annotation before ``:``
 9  in_class_body           the innermost enclosing scope (by indentation) is a class body
10  in_import               the statement is ``import ...`` or ``from ... import ...``
11  http_client_in_scope    the document imports requests, httpx, urllib3 or aiohttp
12  subprocess_in_scope     the document imports subprocess
13  file_io_in_scope        the document calls ``open(`` or imports pathlib/io/yaml/json/csv/shutil
14  test_code               test path, pytest/unittest import, or inside a ``def test_*``
15  bracket_depth           ``min(depth, 4) / 4``
16  indent_depth            ``min(level, 8) / 8``; a tab is one level, the space unit is detected (4)
==  ======================  ===========================================================================

Mode rules (:func:`select_mode`; first match wins; a feature is on when > 0.5)
-----------------------------------------------------------------------------
====  ======================  ==================  =========  ==========  =========  ===============
rule  condition               mode                multiline  max_tokens  code_only  stop_at_newline
====  ======================  ==================  =========  ==========  =========  ===============
1     ``in_comment``          ``comment``         never      default     False      True
2     ``in_docstring``        ``docstring``       auto       default     False      False
3     ``in_string``           ``string``          never      default     False      True
4     ``in_import``           ``import``          never      16          True       True
5     ``in_call_args``        ``call-arguments``  never      default     True       True
6     otherwise               ``code``            auto       default     True       False
====  ======================  ==================  =========  ==========  =========  ===============

``auto`` is the engine's block-opener rule (a block body may follow a line ending in ``:``);
``default`` is the settings' ``max_tokens``. An f-string replacement field is code: ``in_string`` is
0 there, so rule 5 applies when the innermost bracket *inside the field* is a call's ``(``, else
rule 6. The end of a string is the lexer's business (the FSM), not the policy's.

Modules: :mod:`.modes` (the mode policy: modes, the rule table, :class:`Fingerprint`),
:mod:`.features` (the 16 features and :func:`fingerprint`), :mod:`.facts` (document facts from
tree-sitter). The scan of the prefix is :mod:`engine.lexing.scanner`'s; corpus statistics
(``fingerprint-stats``) are a lab tool (``lab/fingerprint_stats.py``).
"""

from .facts import (
    FILE_IO_MODULES,
    HTTP_CLIENTS,
    TEST_MODULES,
    _document_facts,
    _parser,
    _Trees,
    warm_facts,
)
from .features import fingerprint
from .modes import (
    FEATURE_DOCS,
    FEATURES,
    MODES,
    POLICIES,
    Fingerprint,
    ModePolicy,
    select_mode,
)

__all__ = [
    "FEATURES", "FEATURE_DOCS", "FILE_IO_MODULES", "HTTP_CLIENTS", "MODES", "POLICIES", "TEST_MODULES", "Fingerprint",
    "ModePolicy", "_Trees", "_document_facts", "_parser", "fingerprint", "select_mode",
    "warm_facts",
]
