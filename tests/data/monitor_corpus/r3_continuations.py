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


def headers_and_values(items, key):
    if (key
            and items):
        found = {
            item for item in items
            if item}
    else:
        found = set()
    return (
        found)


class Table:
    rows = [
        (1, "one"),
    ]

    @staticmethod
    def lookup(
            key):
        return key
