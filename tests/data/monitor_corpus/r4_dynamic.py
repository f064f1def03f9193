"""R4 shapes: attributes that exist only at run time."""

import argparse
import types
from unittest import mock

parser = argparse.ArgumentParser()
parser.add_argument("--verbose", action="store_true")
parser.add_argument("--out-dir", default=".")
args = parser.parse_args([])
if args.verbose:
    print(args.out_dir)

opts = types.SimpleNamespace(alpha=1, beta=2)
print(opts.alpha + opts.beta)

client = mock.MagicMock()
client.fetch.return_value = 3
print(client.fetch())


class Proxy:
    def __getattr__(self, name):
        return name.upper()


class Record:
    def __init__(self, **fields):
        for key, value in fields.items():
            setattr(self, key, value)


proxy = Proxy()
print(proxy.anything)
record = Record(size=3)
print(record.size)
