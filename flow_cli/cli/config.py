"""``flow.toml``: where it is, what it says, and the runtimes it names.

Precedence for the database: ``--db`` > ``FLOW_DB`` > ``[flow] database`` in the config file >
``sqlite:///<user data dir>/flow.db``. The config file is ``--config`` > ``FLOW_CONFIG`` >
``./flow.toml``; a missing default file is fine (no configuration), a missing file that was
named explicitly is an error.

Only the standard library is imported at module level; ``platformdirs`` and ``tomli_w`` are
loaded when they are needed, so ``flow --help`` does not pay for them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_cli.cli.words import a
from flow_cli.errors import ConfigError, InputError
from flow_cli.model.jsonval import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from flow_cli.runtime import Runtime

DEFAULT_CONFIG = Path("flow.toml")
KNOWN_KEYS = (
    "database",
    "build_id",
    "runtimes",
    "max_payload_bytes",
    "retention",
    "retention_archive",
)


@dataclass(frozen=True, slots=True)
class FlowConfig:
    """The ``[flow]`` table of a config file (all optional)."""

    path: Path | None
    """The file it was read from; ``None`` when there is no config file."""
    database: str | None = None
    """Database URL; a relative SQLite path is taken relative to the config file."""
    build_id: str | None = None
    """Build that new runs start under."""
    runtimes: tuple[str, ...] = ()
    """``"module:attribute"`` references to ``Runtime`` objects."""
    unknown_keys: tuple[str, ...] = ()
    """Keys of ``[flow]`` this version does not know (reported as a warning)."""
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    """Cap on the JSON text of one stored value: run input and result, step input and output,
    signal and hook payloads (DESIGN §2.6)."""
    retention: timedelta | None = None
    """``retention = "30d"``: workers prune runs that ended longer ago, in the background."""
    retention_archive: Path | None = None
    """``retention_archive = DIR``: where background retention archives histories first (a
    relative path is taken relative to the config file)."""

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else "flow.toml"


def config_path(option: Path | None) -> tuple[Path, bool]:
    """The config file to read and whether it was named explicitly (``--config``/``FLOW_CONFIG``).

    ``FLOW_CONFIG`` reaches here through the ``--config`` option's ``envvar``.
    """
    if option is not None:
        return option.expanduser(), True
    return DEFAULT_CONFIG, False


def read_config(path: Path, explicit: bool) -> FlowConfig:
    """Read and validate ``path``. Raises ``ConfigError`` with one sentence."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                f"Config file {path} does not exist (from --config/FLOW_CONFIG)."
            ) from None
        return FlowConfig(path=None)
    except IsADirectoryError:
        raise ConfigError(f"Config file {path} is a directory.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}.") from None
    import tomllib

    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"Config file {path} is not UTF-8 text.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}.") from None
    table = document.get("flow", {})
    if not isinstance(table, dict):
        raise ConfigError(f"Config file {path}: [flow] must be a table.")
    return FlowConfig(
        path=path,
        database=_optional_str(table, "database", path),
        build_id=_optional_str(table, "build_id", path),
        runtimes=_runtimes(table, path),
        unknown_keys=tuple(sorted(k for k in table if k not in KNOWN_KEYS)),
        max_payload_bytes=_payload_bytes(table, path),
        retention=_retention(table, path),
        retention_archive=_retention_archive(table, path),
    )


def _retention(table: dict[str, Any], path: Path) -> timedelta | None:
    from flow_cli.cli.filters import parse_duration

    text = _optional_str(table, "retention", path)
    if text is None:
        return None
    try:
        keep = parse_duration(text, "retention")
    except InputError as exc:
        raise ConfigError(f"Config file {path}: [flow] {exc}") from None
    if not keep:
        raise ConfigError(f"Config file {path}: [flow] retention must be longer than 0s.")
    return keep


def _retention_archive(table: dict[str, Any], path: Path) -> Path | None:
    text = _optional_str(table, "retention_archive", path)
    if text is None:
        return None
    if "retention" not in table:
        raise ConfigError(
            f'Config file {path}: [flow] retention_archive needs retention (e.g. "30d").'
        )
    return path.parent / Path(text).expanduser()


def _payload_bytes(table: dict[str, Any], path: Path) -> int:
    value = table.get("max_payload_bytes", MAX_PAYLOAD_BYTES)
    if isinstance(value, bool) or not isinstance(value, int) or not 1024 <= value <= 2**30:
        raise ConfigError(
            f"Config file {path}: [flow] max_payload_bytes must be a whole number of bytes "
            f"from 1024 to {2**30} (default {MAX_PAYLOAD_BYTES})."
        )
    return value


def _optional_str(table: dict[str, Any], key: str, path: Path) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"Config file {path}: [flow] {key} must be a non-empty string.")
    return value.strip()


def _runtimes(table: dict[str, Any], path: Path) -> tuple[str, ...]:
    value = table.get("runtimes", [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f'Config file {path}: [flow] runtimes must be a list of "module:attribute" strings.'
        )
    return tuple(v.strip() for v in value)


# -- database --------------------------------------------------------------------------------


def default_database_path() -> Path:
    """``<platformdirs user_data_dir("flow")>/flow.db``."""
    import platformdirs

    return Path(platformdirs.user_data_dir("flow")) / "flow.db"


def database_url(option: str | None, config: FlowConfig) -> tuple[str, Path | None]:
    """The database URL to open, and the default file's path when it is the default.

    ``option`` is ``--db`` (or ``FLOW_DB``, through the option's ``envvar``).
    """
    if option is not None and option.strip():
        return option.strip(), None
    if config.database is not None:
        return _relative_to(config.database, config.path), None
    path = default_database_path()
    return f"sqlite:///{path}", path


def _relative_to(url: str, config: Path | None) -> str:
    """Anchor a relative SQLite path in the config file's directory, not the working one."""
    if config is None:
        return url
    prefix = "sqlite:///"
    if not url.lower().startswith(prefix):
        return url
    location = url[len(prefix) :]
    path, sep, query = location.partition("?")
    if not path or path.startswith(("/", "~")):
        return url
    anchored = (config.parent / path).resolve(strict=False)
    return f"{prefix}{anchored}{sep}{query}"


# -- runtimes --------------------------------------------------------------------------------


def load_runtimes(refs: Sequence[str], config: FlowConfig) -> list[Runtime]:
    """Import each ``"module:attribute"`` reference and return the ``Runtime`` objects.

    The working directory (then the config file's directory) is put on ``sys.path`` first, so
    the project's own modules import as they would with ``python -m``.
    """
    from flow_cli.runtime import Runtime

    _extend_path(config)
    runtimes: list[Runtime] = []
    for ref in refs:
        value = _resolve(ref, config.label)
        if not isinstance(value, Runtime):
            raise ConfigError(
                f"{config.label}: runtime {ref!r} is {a(type(value).__name__)}, "
                "not a flow_cli.Runtime."
            )
        runtimes.append(value)
    return runtimes


def _extend_path(config: FlowConfig) -> None:
    places = [os.getcwd()]
    if config.path is not None:
        places.append(str(config.path.resolve().parent))
    for place in reversed(places):
        if place not in sys.path:
            sys.path.insert(0, place)


def _resolve(ref: str, label: str) -> object:
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f'{label}: runtime {ref!r} must look like "package.module:attribute".')
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"{label}: cannot import module {module_name!r} for runtime {ref!r} "
                "(run flow from your project directory or add it to PYTHONPATH)."
            ) from None
        raise ConfigError(
            f"{label}: importing {module_name!r} for runtime {ref!r} failed: "
            f"ModuleNotFoundError: {exc}."
        ) from None
    except (Exception, SystemExit) as exc:  # a module calling sys.exit() must not end flow
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(
            f"{label}: importing {module_name!r} for runtime {ref!r} failed: "
            f"{type(exc).__name__}: {detail}."
        ) from None
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(
                f"{label}: module {module_name!r} has no attribute {attribute!r} (runtime {ref!r})."
            ) from None
    return value


# -- flow init -------------------------------------------------------------------------------

_HEADER = """\
# Flow configuration. Command-line options and environment variables win over this file:
# --db / FLOW_DB for the database, --config / FLOW_CONFIG for this file's location.
#
# database  where runs are stored: "sqlite:///flow.db" is a file next to this one
#           (append ?synchronous=NORMAL to trade power-loss durability for speed, or
#           ?busy_timeout_ms=5000 to wait longer for a locked file); "postgresql://..."
#           lets many workers on many machines share one database.
# build_id  the build that new runs start under: one of the runtimes' build ids.
#           Runs keep the build they started with.
# runtimes  "module:attribute" references to your flow_cli.Runtime objects, importable
#           from the directory you run flow in. List every build whose runs are still in
#           flight, e.g. ["shop.flows:runtime", "shop.flows_v1:runtime"].
"""


def render_init(database: str, build_id: str | None, runtimes: Sequence[str]) -> str:
    """The text of a new ``flow.toml``: comment lines, then the values written by tomli-w."""
    import tomli_w

    table: dict[str, Any] = {"database": database}
    if build_id is not None:
        table["build_id"] = build_id
    table["runtimes"] = list(runtimes)
    body = tomli_w.dumps({"flow": table})
    if build_id is None:
        body += '# build_id = "my-app-2026.1"\n'
    return f"{_HEADER}\n{body}"
