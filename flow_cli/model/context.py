"""``WorkflowContext`` (``ctx``): what workflow code reads and the commands it returns, made of
the layers below it (``ctx_base``, ``builders``, ``sequential``, ``select``), each of which
builds on the one before without importing the class above it."""

from __future__ import annotations

from flow_cli.model.builders import STEP_NAME_ATTRIBUTE as STEP_NAME_ATTRIBUTE
from flow_cli.model.builders import seconds_or_none as seconds_or_none
from flow_cli.model.builders import step_name as step_name
from flow_cli.model.select import SelectHelpers


class WorkflowContext(SelectHelpers):
    """The ``ctx`` passed to a workflow function: readers and guards (``ContextBase``), the
    command methods (``CommandBuilders``), the sequential helpers (``SequentialHelpers``) and
    ``ctx.first``, ``ctx.all_settled`` and ``ctx.spawn`` (``SelectHelpers``)."""
