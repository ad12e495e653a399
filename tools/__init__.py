"""The checkout's tools (not installed with pyrms): sweeps, tables, sanitizer and soak runs.

Run them from the checkout's root as modules, ``python -m tools.NAME [--help]``: the root is then first
on the import path, so the checkout's own pyrms is used, installed or not, and no tool edits
``sys.path`` (tests/test_tools.py checks both). Where pyrms is installed, ``python tools/NAME.py`` runs
them too: none imports a sibling.
"""
