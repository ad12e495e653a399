"""``python -m pyrms.cache``: the command of pyrms/cache/cli.py. A module of its own because ``pyrms`` imports
``pyrms.cache`` itself, and running an imported module as ``__main__`` makes Python warn that it was run twice."""
import sys

from .cli import main

sys.exit(main())
