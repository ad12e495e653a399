"""What pyrms's tests and the checkout's tools share, and nothing a user of pyrms calls (none of it is
installed): guarded, poisoned operands and a checker per op (``testing``), every checked layout as data
(``case_matrix``), the randomized check's cases (``random_cases``), the fake driver (``fake_driver``), the
hostile inputs (``hostile_cases``), small kernel sources and validation calls for the CPU tests, the
environment of a child Python (``child_env``) and the comparison of CUBINs compiled twice (``cubins``).
Import each as ``tests.support.<module>``, everywhere."""
