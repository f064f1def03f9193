"""What the argument-slot and member-access monitors know about the code at the cursor, statically.

* :mod:`.imports`: the file's own imports read with tree-sitter (nothing is imported): local name
  -> qualified name, and the qualified name of a dotted callee;
* :mod:`.jedi_client`: jedi (``jedi.Script`` only) for signatures and member names, memoised, with
  a time budget and a background thread for late answers.

:mod:`engine.signatures` joins them with the required-argument policy table
(:mod:`engine.required_arguments`) into a :class:`engine.signatures.CallSpec`.
"""
