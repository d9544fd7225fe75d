"""``flow hook``: the group, whose ``resolve`` lives with the other facts (``cmd_facts``) and
whose ``list`` lives with the other listings (``cmd_triage``)."""

from __future__ import annotations

from flow_cli.cli.cmd_facts import hook_app
from flow_cli.cli.cmd_triage import hook_list

hook_app.command("list")(hook_list)

__all__ = ["hook_app"]
