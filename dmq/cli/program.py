"""The ``dmq`` program's entry point: the console script and ``python -m dmq``.

kio imports Hypothesis whenever it can (the test extras) to register strategies for
its types, which only tests use: 0.3-0.4 s and about 9 MB of every dmq process
(each broker, each CLI command) where Hypothesis is installed. The program blocks
that import before anything imports kio; code that imports dmq as a library (the
tests) keeps Hypothesis.
"""

from __future__ import annotations

import sys


def main() -> None:
    if "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # import raises ImportError
    from dmq.cli.main import main as run

    run()
