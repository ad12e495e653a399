"""pyrms's own tests. A package, so that its modules import as ``tests.<folder>.<module>`` from the
checkout's root (pytest's ``pythonpath``; the tools run as ``python -m tools.NAME`` from there): one
name per module, and test files of the same name in two folders never clash."""
