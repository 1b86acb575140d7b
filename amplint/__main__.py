# `python -m amplint` puts the working directory first on the import path, where a checked
# repository's own `json.py` or `tokenize.py` would be imported in place of the standard library's.
# amplint runs no code of what it checks: that entry goes before anything else is imported (the
# package's `__init__` imports nothing). `-I`, `-P` and the `amplint` script never add it.
import os
import sys

try:
    _here = os.getcwd()
except OSError:  # a working directory since deleted: nothing to import from there
    _here = ""
if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] in ("", _here):
    del sys.path[0]

from amplint.cli import main

raise SystemExit(main())
