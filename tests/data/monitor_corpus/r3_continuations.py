"""R3 shapes: lines that open a bracket, a triple-quoted string or a backslash continuation,
followed by deeper-indented lines that are not a block body."""

import os


def build():
    d = {
        "host": "localhost",
        "port": 8080,
    }
    return d


def compose(a, b):
    cmd = [
        "run",
        a,
        b,
    ]
    assert cmd, \
        "no command"
    text = """
        indented text
    """
    ok = os.path.join(
        a, b)
    data = dict(
        first=1,
        second=2)
    return cmd, text, ok, data
