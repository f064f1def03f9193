"""Moved to :mod:`engine.lexing.automaton` (the strict character automaton). This name is kept as
an alias of that module so that ``from engine import pylex`` / ``engine.pylex.X`` keep working while
other branches still import it; new code imports :mod:`engine.lexing`."""

import sys

from .lexing import automaton as _automaton

sys.modules[__name__] = _automaton
