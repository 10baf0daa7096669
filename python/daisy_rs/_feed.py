"""What every client of a worker's blocks shares: taking the next block
that the task's check function does not call done, and describing a
failure as `status` shows it. A feed is anything with ``next_block()``
(``(task_id, block_id, read, write)`` or None) and ``release(block_id,
error)``: the worker's own (`daisy_rs._native.Feed`) or a relay's
(`daisy_rs._relay.RelayClient`)."""

from __future__ import annotations

from daisy_rs.block import Block

_TRACEBACK_LINES = 12


def describe(error: BaseException) -> str:
    """The end of the traceback of ``error``: what `status` shows."""
    import traceback  # here: most workers never see a failure
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    if len(text) > _TRACEBACK_LINES:
        text = ["..."] + text[-_TRACEBACK_LINES:]
    return "\n".join(text)


def next_unchecked(feed, check):
    """The next block of ``feed`` that ``check`` (if not None) does not
    call done, or None when the feed ended. Blocks it calls done are
    released as found done (skipped); a check that raises fails its
    block."""
    while True:
        wire = feed.next_block()
        if wire is None:
            return None
        block = Block._from_wire(*wire)
        if check is None:
            return block
        try:
            if not check(block):
                return block
        except Exception as error:  # noqa: BLE001 — the block's failure
            feed.release(block._spatial_id, describe(error))
            continue
        feed.found_done(block._spatial_id)
