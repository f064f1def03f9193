"""R5 shapes: f-string format specs with '#', quotes, '=', '<', '>', '^' and nested fields."""

import os

code, name, width = 10, "x", 8
label = f"{code:#06x} {name}" + os.sep
line = f"{name:'<20}" + os.sep
title = f"{name:=^20}"
padded = f"{code:>{width}} {name!r:<{width}}"
print(label, line, title, padded, os.getcwd())
