"""The benchmarks, runnable from the repository root as ``python -m benchmarks.NAME`` (or as
``python benchmarks/NAME.py``): each script imports its siblings by their plain names
(``from _common import ...``), so this folder goes on the import path first."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
