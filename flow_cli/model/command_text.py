"""Commands as workflow code wrote them: whether history has one already, the ``ctx`` call that
builds it (for messages), and a batch's default id."""

from __future__ import annotations

import hashlib
from typing import assert_never

from flow_cli.model import commands
from flow_cli.model.snapshot import WorkflowRunSnapshot


def recorded(snap: WorkflowRunSnapshot, command: commands.RuntimeCommand) -> bool:
    """Whether history already has the identity of ``command`` (a re-issue is harmless)."""
    match command:
        case commands.ScheduleStep():
            return command.step_id in snap.steps
        case commands.ScheduleSteps():
            return all(s.step_id in snap.steps for s in command.steps)
        case commands.WaitUntil():
            return command.wait_id in snap.waits
        case commands.WaitForSignal():
            return command.wait_id in snap.signal_waits
        case commands.CreateHook():
            return command.hook_id in snap.hooks
        case commands.StartChild():
            return command.child_id in snap.children
        case commands.StartChildren():
            return all(c.child_id in snap.children for c in command.children)
        case _:
            return True


def describe(command: commands.RuntimeCommand) -> str:
    """A command as the ``ctx`` call that builds it, for messages."""
    match command:
        case commands.ScheduleStep():
            return f"ctx.schedule_step({command.step_id!r}, {command.name!r}, ...)"
        case commands.ScheduleSteps():
            return f"ctx.schedule_steps({[s.step_id for s in command.steps]!r})"
        case commands.WaitUntil():
            return f"ctx.wait_until({command.wait_id!r}, ...)"
        case commands.WaitForSignal():
            return f"ctx.wait_for_signal({command.wait_id!r}, {command.signal_name!r})"
        case commands.CreateHook():
            return f"ctx.create_hook({command.hook_id!r}, ...)"
        case commands.StartChild():
            return f"ctx.start_child({command.child_id!r}, {command.workflow!r}, ...)"
        case commands.StartChildren():
            return f"ctx.start_children({[c.child_id for c in command.children]!r})"
        case commands.Complete():
            return "ctx.complete(...)"
        case commands.Fail():
            return "ctx.fail(...)"
        case commands.ContinueAsNew():
            return "ctx.continue_as_new(...)"
        case commands.Cancelled():
            return "ctx.cancelled(...)"
        case _:
            assert_never(command)


BATCH_ID_MAX_JOINED = 40
"""Default batch ids up to this length are the member ids joined by ``+``."""


def default_batch_id(ids: list[str], recorded: str | None) -> str:
    """A short stable id for a batch: the member ids joined by ``+`` when that is short
    (``a+b+c``), else ``b-`` and 12 hex digits of a hash of the member ids.

    Long batches recorded before the hash existed were labelled with all their ids joined;
    re-issued, they keep that label so that runs in flight continue unchanged.
    """
    legacy = "+".join(ids)
    if len(legacy) <= BATCH_ID_MAX_JOINED or recorded == legacy:
        return legacy
    digest = hashlib.sha256("\x1f".join(ids).encode()).hexdigest()
    return f"b-{digest[:12]}"
