"""The tests mirror the packages (tests/static, tests/rules, tests/runtime, ...); helpers shared by
several of them live in `support.py` beside this file, which pytest puts on the import path."""
