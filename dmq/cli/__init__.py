"""The ``dmq`` command line.

kio (the Kafka schema library) registers Hypothesis strategies when Hypothesis
is installed (the test extras), and building them makes Hypothesis write its
cache to ``.hypothesis/`` in the current directory. The ``dmq`` program does not
import Hypothesis at all (``dmq.cli.program``); where the CLI's modules are imported
as a library (tests running commands in-process), the cache goes to the temporary
directory instead, unless the user chose one.
"""

import os
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "dmq-hypothesis"))
