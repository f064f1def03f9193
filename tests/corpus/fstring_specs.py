"""Format-spec shapes (PEP 701, the format mini-language) for the soundness corpus: every character
of a spec after the field's ':' is literal text up to the field's '}' (R5 of issue #16)."""

import os

code, name, width, precision, t = 10, "x", 12, 3, "title"
value = 3.14159

hexed = f"{code:#06x} {name}" + os.sep
padded = f"{name:'<20}" + os.sep
centred = f"{t:=^20}"
fills = [f"{name:*>10}", f"{name:#<8}", f'{name:"^9}', f"{name:>{width}}", f"{value:{width}.{precision}f}"]
signs = f"{code:+d} {code:-d} {code: d} {code:_} {code:,} {value:=+12.3f} {value:%}"
debug = f"{code=} {code = } {code=!r:>10} {name!r:^12} {name!s:<4} {name!a}"
nested = f"{f'{code:#x}':>{width}} {'a' if code else 'b':>3}"
dates = f"{os.sep!r:#>3}" + f"{'%Y-%m-%d':>12}"
colons = f"{code:{':'}>5}" if code else f"{ {1: 2}[1] }"
triple = f"""{name:'<20} {name:"^8} {code:#06x}
{value:>{width}.{precision}}"""
raw = rf"{name:\<10}" + rf"\d+ {code}"
escaped = f"{{literal}} {code:#04x} }}{{"
assert all(isinstance(s, str) for s in (hexed, padded, centred, signs, debug, nested, dates, colons, triple, raw))
print(fills, escaped)
