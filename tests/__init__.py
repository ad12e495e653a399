"""pyrms's own tests, laid out as the package is.

A top-level module's tests are ``tests/test_NAME*.py`` (``pyrms/plan.py``: ``tests/test_plan.py``); a
package's are in its folder (``pyrms/driver/``: ``tests/driver/``; ``pyrms/ops/``: ``tests/ops/``, with a
folder per op family under it; ``pyrms/torch/``, ``pyrms/bench/``; ``tools/``: ``tests/tools/``). A file is
``test_TOPIC.py``, or ``test_TOPIC_gpu.py`` when its tests carry the ``gpu`` marker. What the tests and the
tools share is ``tests/support/``. Every folder is a package, so that each module has one import name
(``tests.support.testing``, ``tests.ops.test_family``) from the checkout's root (pytest's ``pythonpath``)
and two test files of the same name never clash; ``tests/conftest.py``'s fixtures reach every folder."""
