"""R2 shapes: blank lines (trimmed to column 0) inside bodies, before deeper-indented statements."""


def f(x):
    y = x + 1

    return y


def g(items):
    total = 0

    for item in items:

        total += item

    return total


class Config:
    name = "default"

    def describe(self):

        return self.name


def nested(path):
    try:

        with open(path) as handle:

            return handle.read()

    except OSError:

        return ""
