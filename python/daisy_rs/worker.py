"""``python -m daisy_rs.worker``: a worker that runs Python functions.

The same program as ``daisy-worker`` (same flags, context, exit
statuses; see ``--help``), with a task's ``process_function`` or
``worker_function`` called in this process. The driver starts it for
function tasks; start it by hand to add a machine to a run:

    python -m daisy_rs.worker --context-file daisy_run/<name>/context.json --task <task>
"""

import os
import sys

from daisy_rs import _native


def main(argv=None) -> int:
    return _native.worker_main(list(sys.argv[1:] if argv is None else argv))


def _exit(status: int):
    """Ends the process without waiting for the user's threads: a worker
    whose block ran past its timeout ends to stop it, and a thread the
    function started must not keep a finished worker (and its job) alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit(main())
