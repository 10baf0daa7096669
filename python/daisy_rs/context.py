"""`Context`: what a worker needs to reach the blocks of its task, as the
one string daisy 1.x and 2.0 put in ``DAISY_CONTEXT``
(``key=value:key=value``).

A function that runs inside a worker (``python -m daisy_rs.worker``) finds
``DAISY_CONTEXT`` in its environment, and so does every process it starts,
on this host or through ``srun``/``sbatch``: ``hostname`` and ``port`` name
the worker's block relay (not the driver), ``task_id`` and ``worker_id``
the worker those processes are accounted to, ``logdir`` the run's daisy
log directory and ``token`` what the relay asks of a client.

The one context that names the driver itself is the one daisy 1.x's
``init_callback_fn(context)`` gets, as daisy 1.2.3's does: ``hostname``
and ``port`` are the driver's, ``worker_id`` is 0, and ``run_token`` is
the run's token, so that a process started by hand with it (a documented
daisy 1.x pattern: ``DAISY_CONTEXT={context.to_env()} python worker.py``)
joins the run as a worker (see `daisy_rs.client`). Like a password, that
string lets whoever has it take the run's blocks: ``repr`` hides the
tokens, ``to_env()`` cannot.
"""

from __future__ import annotations

import copy
import os

from daisy_rs.logging import get_log_basedir

__all__ = ["Context"]


class Context:
    """A mapping of strings, written as ``key=value:key=value``."""

    ENV_VARIABLE = "DAISY_CONTEXT"

    def __init__(self, **kwargs):
        self._items = {}
        basedir = get_log_basedir()
        logdir = "" if basedir is None else str(basedir)
        if Context.can_hold(logdir):  # a directory named lr=0.1/ cannot travel
            self["logdir"] = logdir
        for key, value in kwargs.items():
            self[key] = value

    @staticmethod
    def can_hold(value) -> bool:
        """Whether ``value`` can be written in a context (no ``:`` or ``=``)."""
        text = str(value)
        return ":" not in text and "=" not in text

    def copy(self):
        return copy.deepcopy(self)

    def to_env(self) -> str:
        return ":".join(f"{key}={value}" for key, value in self._items.items())

    def __setitem__(self, key, value):
        key, value = str(key), str(value)
        if "=" in key or ":" in key:
            raise RuntimeError(f"Context keys must not contain = or : (got {key!r})")
        if "=" in value or ":" in value:
            raise RuntimeError(f"Context values must not contain = or : ({key} = {value!r})")
        self._items[key] = value

    def __getitem__(self, key):
        return self._items[key]

    def __delitem__(self, key):
        del self._items[key]

    def __contains__(self, key):
        return key in self._items

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __eq__(self, other):
        return isinstance(other, Context) and self._items == other._items

    def get(self, key, default=None):
        return self._items.get(key, default)

    def keys(self):
        return list(self._items)

    def values(self):
        return list(self._items.values())

    def items(self):
        return list(self._items.items())

    def __repr__(self):
        shown = {k: ("***" if k in ("token", "run_token") else v) for k, v in self._items.items()}
        return ":".join(f"{key}={value}" for key, value in shown.items())

    @staticmethod
    def from_env() -> "Context":
        """The context of this process; `KeyError` when there is none (the
        process was not started by a daisy worker)."""
        try:
            text = os.environ[Context.ENV_VARIABLE]
        except KeyError:
            raise KeyError(
                f"{Context.ENV_VARIABLE} is not set: this process was not started by a daisy "
                "worker (daisy.Client() and Context.from_env() work inside a task's function "
                "and in the processes it starts)"
            ) from None
        return Context.parse(text)

    @staticmethod
    def parse(text: str) -> "Context":
        """A context from its ``key=value:key=value`` string."""
        context = Context()
        for token in text.split(":"):
            key, sep, value = token.partition("=")
            if not sep or "=" in value:
                raise ValueError(
                    f"{Context.ENV_VARIABLE} = {text!r} is not a daisy context: "
                    f"{token!r} is not key=value"
                )
            context[key] = value
        return context
