"""What the global options decided, shared by every command through ``ctx.obj``.

Commands ask for exactly what they need: read-only commands open the database without creating
it and never import the runtimes; commands that decide runs load the runtimes first, so a broken
``flow.toml`` is reported before anything touches the database.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from flow_cli.cli.config import FlowConfig, config_path, database_url, load_runtimes, read_config
from flow_cli.errors import (
    BuildAmbiguous,
    BuildNotHosted,
    ConfigError,
    StoreError,
    WorkflowNotFound,
)
from flow_cli.model.jsonval import set_payload_limit

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.runtime import Runtime


@dataclass(slots=True)
class CliState:
    """The global options (``--db``, ``--config``, ``--json``) and what follows from them."""

    db: str | None = None
    config_option: Path | None = None
    json: bool = False
    _config: FlowConfig | None = field(default=None, repr=False)
    _runtimes: list[Runtime] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, ctx: typer.Context) -> CliState:
        obj = ctx.find_root().obj
        return obj if isinstance(obj, CliState) else cls()

    def want_json(self, option: bool) -> bool:
        return option or self.json

    @property
    def config(self) -> FlowConfig:
        if self._config is None:
            path, explicit = config_path(self.config_option)
            self._config = read_config(path, explicit)
            # Process-wide, as the file is: every value checked from here on meets it.
            set_payload_limit(self._config.max_payload_bytes)
            if self._config.unknown_keys:
                keys = ", ".join(self._config.unknown_keys)
                sys.stderr.write(
                    f"warning: {self._config.label}: unknown [flow] keys ignored: {keys}\n"
                )
        return self._config

    @property
    def database(self) -> str:
        return database_url(self.db, self.config)[0]

    def runtimes(self) -> list[Runtime]:
        """The runtimes ``flow.toml`` names, imported once. Raises ``ConfigError``."""
        if self._runtimes is None:
            config = self.config
            if not config.runtimes:
                where = config.label if config.path is not None else "./flow.toml (none found)"
                raise ConfigError(
                    f'No runtimes are configured: add runtimes = ["module:attribute"] to [flow] '
                    f"in {where}, or point --config at your project's flow.toml."
                )
            runtimes = load_runtimes(config.runtimes, config)
            builds = [r.build_id for r in runtimes]
            duplicate = next((b for b in builds if builds.count(b) > 1), None)
            if duplicate is not None:
                raise ConfigError(f"{config.label}: two runtimes share build id {duplicate!r}.")
            if config.build_id is not None and config.build_id not in builds:
                raise BuildNotHosted(config.build_id, builds)
            self._runtimes = runtimes
        return self._runtimes

    def runtime(self, build_id: str) -> Runtime:
        """The loaded runtime with ``build_id``. Raises ``BuildNotHosted``."""
        for runtime in self.runtimes():
            if runtime.build_id == build_id:
                return runtime
        raise BuildNotHosted(build_id, [r.build_id for r in self.runtimes()])

    def check_startable(self, workflow: str, build_id: str | None) -> None:
        """Fail before the database is opened if no loaded runtime can start ``workflow``."""
        runtimes: Sequence[Runtime] = (
            [self.runtime(build_id)] if build_id is not None else self.runtimes()
        )
        defining = [r.build_id for r in runtimes if workflow in r.workflows]
        if not defining:
            known = sorted({w for r in runtimes for w in r.workflows})
            raise WorkflowNotFound(workflow, known)
        if build_id is None and len(defining) > 1 and self.config.build_id not in defining:
            raise BuildAmbiguous(workflow, defining)  # as the engine would, before any write

    def open_engine(self, *, create: bool, with_runtimes: bool, read_only: bool = False) -> Engine:
        """Open the database (``create=False``: a missing SQLite file is a ``StoreError``).

        ``read_only``: for commands that only read; a SQLite file is opened with ``mode=ro``,
        so they work on a read-only file, directory or mount and can never write.
        """
        from flow_cli.engine.engine import Engine

        runtimes = self.runtimes() if with_runtimes else []
        url, default_path = database_url(self.db, self.config)
        if create and default_path is not None:
            try:
                default_path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"Cannot create the data directory {default_path.parent}: "
                    f"{exc.strerror or exc}; pass --db to use another database."
                ) from None
        if read_only:
            from flow_cli.store import open_store

            return Engine(open_store(url, create=False, read_only=True), runtimes)
        engine = Engine.open(
            url,
            runtimes,
            default_build=self.config.build_id if with_runtimes else None,
            create=create,
        )
        # The command line leaves every decision to the workers (no eager start): its start-up
        # costs far more than deciding early would save, and decisions stay where they are
        # logged and counted, in `flow worker` and `flow tick`.
        engine.eager_start = False
        return engine
