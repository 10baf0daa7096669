"""``python -m daisy_rs.worker``: a worker that runs Python functions.

The same program as ``daisy-worker`` (same flags, context, exit
statuses; see ``--help``), with a task's ``process_function`` or
``worker_function`` called in this process. The driver starts it for
function tasks; start it by hand to add a machine to a run:

    python -m daisy_rs.worker --context-file daisy_run/<name>/context.json --task <task>
"""

import sys

from daisy_rs import _native


def main(argv=None) -> int:
    return _native.worker_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
