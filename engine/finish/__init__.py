"""Finishing a completion: from the decoded text to the text the editor inserts.

:func:`finish` (:mod:`.pipeline`) runs once after decoding, a list of named stages, each recording
what it did in an :class:`engine.api.FinishReport` (every cut as an :class:`engine.api.Cut`):

1. **shape** (:mod:`.shape`): a single-line completion ends at its first line break (after a
   leading one in call-arguments mode), a multi-line one where it leaves its block
   (:func:`multiline_cut`); a single-line completion drops the tail the text after the cursor
   already has (:func:`strip_suffix_overlap`), a multi-line one ends before it repeats the line
   below the cursor (:func:`suffix_repeat_cut`) and a cursor line may not copy the line above it;
2. **lexer stop** and **token ends**: a constrained one ends where the lexer may stop; in code, it
   ends where it keeps the word after the cursor whole (:func:`glues`) and cuts no expression the
   model went on writing (:mod:`.cuts`), or it is the half-typed word alone (**word only**);
3. **repeated argument** and **closing**: an argument the call at the cursor was already passed is
   cut; open calls are closed with their missing policy keywords (the safe continuation,
   :mod:`.closing`);
4. **validation**: the longest prefix, at a token end, that compiles in the document
   (:func:`engine.validate.longest_valid`); auto-closed characters after the cursor that the
   completion typed are replaced only when the resulting document is the one validated
   (:func:`validated`, :mod:`.line`);
5. **line finishing**: a single-line completion may have its line finished (brackets, a string, a
   block opener's ``:``) at the longest valid point (:func:`engine.validate.finish_line`);
6. **the judges' last word** (:mod:`.judges`): the final text passes the monitors that ran at the
   cursor (names must exist, the block-header rule), or is cut back until it does, and pyflakes';
7. **whole primary**: a text cut back between a name and the call, subscript or attribute the
   model wrote after it is cut back further (:func:`mid_expression`);
8. **refusal**: a text refused whole in a region that compiles is marked for a retry.

:func:`for_editor` then gives it the shape every front end shows: inside a comment or string it
stays there (:func:`engine.lexing.clip_to_context`), for a single-line editor it is one line.

Texts are ``\\n``-normalised; offsets are code points.
"""

from .closing import closing
from .cuts import closer_ends, cuts_expression, mid_expression, repeated_argument, whole_primary
from .judges import monitors_kept, names_judged
from .line import finish_line_fix, line_fixes, validated
from .pipeline import STAGES, Finishing, finish, for_editor
from .shape import (
    Draft,
    Surroundings,
    copies_line_above,
    cut_to_shape,
    ends_at,
    glues,
    in_code,
    leading_break,
    multiline_cut,
    next_suffix_line,
    strip_suffix_overlap,
    suffix_repeat_cut,
    whole_word_ends,
)

__all__ = [
    "STAGES", "Draft", "Finishing", "Surroundings", "closer_ends", "closing", "copies_line_above", "cut_to_shape",
    "cuts_expression", "ends_at", "finish", "finish_line_fix", "for_editor", "glues", "in_code", "leading_break",
    "line_fixes", "mid_expression", "monitors_kept", "multiline_cut", "names_judged", "next_suffix_line",
    "repeated_argument", "strip_suffix_overlap", "suffix_repeat_cut", "validated", "whole_primary",
    "whole_word_ends",
]
