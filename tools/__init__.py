"""The checkout's tools (not installed with pyrms): sweeps, tables, the randomized check, sanitizer and
soak runs.

Run them from the checkout's root as modules, ``python -m tools.NAME [--help]``: the root is then first
on the import path, so the checkout's own pyrms is used, installed or not, and so are the tests' shared
helpers (``tests.support``) that the checking tools import; no tool edits ``sys.path``
(tests/tools/test_tools.py checks both). Where pyrms is installed, ``python tools/NAME.py`` runs the
tools that import neither ``tests.support`` nor another tool.
"""
