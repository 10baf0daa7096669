"""``from daisy.cl_monitor import CLMonitor``: progress as daisy shows it.

``CLMonitor(server)`` makes a `daisy_rs.server.Server` (or `SerialServer`)
show the driver's progress bars on a terminal (plain lines in a file) and
its execution summary at the end, which daisy 1.x's monitor printed.
"""

__all__ = ["CLMonitor"]


class CLMonitor:
    def __init__(self, server, *args, **kwargs):
        self.server = server
        server._monitored = True
