"""PostgreSQL connection strings: libpq URLs checked, described without their secrets."""

from __future__ import annotations

import getpass
import math
import os
import re
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from flow_cli.errors import ConfigError
from flow_cli.store.locations import redact


def conninfo(url: str, connect_timeout: float) -> str:
    """The libpq connection string: the URL plus Flow's defaults for what it leaves out.

    Raises ``ConfigError`` naming the offending option (never the password) when libpq would
    refuse the string, so a typo is not reported as an unreachable server.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(conninfo_problem(url, str(exc))) from None
    check_params(params)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        extra["connect_timeout"] = max(math.ceil(connect_timeout), 1)
    if "application_name" not in params and "PGAPPNAME" not in os.environ:
        extra["application_name"] = "flow"
    return make_conninfo(url, **extra)


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""The ``sslmode`` values libpq accepts."""


def conninfo_problem(url: str, libpq_message: str) -> str:
    """One sentence about a connection string libpq cannot parse (passwords hidden)."""
    shown = redact_url(url)
    reason = " ".join(libpq_message.replace(url, shown).split())
    reason = redact_url(reason)
    option = re.search(r'invalid (?:URI query parameter|connection option):? "([^"]*)"', reason)
    if option is not None:
        return (
            f"PostgreSQL connection option {option.group(1)!r} in {shown!r} is unknown to libpq; "
            "remove or correct it (Flow's own option is schema=NAME)."
        )
    return (
        f"{shown!r} is not a PostgreSQL connection string ({reason}); write it as "
        "postgresql://user@host:5432/database or host=... dbname=..."
    )


def check_params(params: dict[str, Any]) -> None:
    """Values libpq would only reject when connecting, reported as what they are."""
    sslmode = params.get("sslmode")
    if sslmode is not None and str(sslmode) not in SSL_MODES:
        raise ConfigError(
            f"PostgreSQL option sslmode={sslmode!r} is not one of {', '.join(SSL_MODES)}."
        )
    for name in ("connect_timeout", "port"):
        value = params.get(name)
        if value is None:
            continue
        parts = str(value).split(",") if name == "port" else [str(value)]
        if not all(part.strip().isdigit() for part in parts if part.strip()):
            what = "a whole number of seconds" if name == "connect_timeout" else "a port number"
            raise ConfigError(f"PostgreSQL option {name}={value!r} must be {what}.")


def describe_target(conninfo: str) -> str:
    """``host:port/database`` as libpq will resolve it, for messages."""
    params = conninfo_to_dict(conninfo)

    def param(name: str, env: str, default: str = "") -> str:
        return str(params.get(name) or os.environ.get(env) or default)

    host = param("host", "PGHOST") or param("hostaddr", "PGHOSTADDR", "localhost")
    user = param("user", "PGUSER") or os_user()
    return f"{host}:{param('port', 'PGPORT', '5432')}/{param('dbname', 'PGDATABASE', user)}"


def os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name anywhere: libpq will complain about it, not us
        return "postgres"


def secrets(url: str, conninfo: str) -> list[str]:
    """Passwords that must never appear in a message, longest first."""
    found = {
        str(conninfo_to_dict(conninfo).get("password") or ""),
        os.environ.get("PGPASSWORD", ""),
        (urlsplit(url).password or "") if "://" in url else "",
    }
    return sorted((secret for secret in found if secret), key=len, reverse=True)


def redact_url(url: str) -> str:
    """The connection string with any password replaced: ``postgresql://user:***@host/db``."""
    return redact(url)
