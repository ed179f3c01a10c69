"""The ``dmq`` command line.

kio (the Kafka schema library) registers Hypothesis strategies when Hypothesis
is installed (the test extras), and building them makes Hypothesis write its
cache to ``.hypothesis/`` in the current directory: every ``dmq`` command
would leave one behind wherever it ran. The CLI points that cache at the
temporary directory instead, unless the user chose one.
"""

import os
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "dmq-hypothesis"))
