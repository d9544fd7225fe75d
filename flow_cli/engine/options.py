"""Keyword options passed on as they are given: ``Engine.open`` gives ``Engine`` its options,
``FlowTestEnv.start`` gives ``Engine.start`` its. Their names and types are written once
here; their defaults stay where they apply (``Engine.__init__``, ``Engine.start``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from flow_cli.model.clock import Clock


class EngineOptions(TypedDict, total=False):
    """The keyword options of ``Engine`` that ``Engine.open`` passes on."""

    clock: Clock | None
    worker_id: str | None
    default_build: str | None
    eager_start: bool


class StartOptions(TypedDict, total=False):
    """The options of ``Engine.start`` that ``FlowTestEnv.start`` passes on."""

    run_id: str | None
    build_id: str | None
    attributes: Mapping[str, str | int | float | bool] | None
    priority: int | None
