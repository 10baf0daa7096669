"""``python -m daisy_rs.driver``: ``daisy-driver`` without installing it.

The same program, built into this package: ``run``, ``plan``,
``status``, ``report``, ``reset`` (see ``--help``).
"""

import sys

from daisy_rs import _native


def main(argv=None) -> int:
    return _native.driver_main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
