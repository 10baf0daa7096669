"""daisy 1.x's ``daisy.messages``, internal to daisy 1.x: importing it says
what to use instead (see `daisy_rs._INTERNALS`)."""

from daisy_rs import _internal_module_error

raise _internal_module_error("messages")
