"""Setting up a checkout: ``scripts/bootstrap.sh`` installs only when pyproject.toml changed, and
the package metadata builds without deprecation banners."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"  # a table prints banners
    assert "setuptools>=77" in project["build-system"]["requires"]  # reads the SPDX form


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the bootstrap script beside a pyproject.toml, with a .venv whose python runs
    the real one except for ``-m pip``, which it only records."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "pip-calls"
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$*" >> {calls}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    (bin_dir / "flow").write_text("#!/bin/sh\n", encoding="utf-8")
    (bin_dir / "flow").chmod(0o755)
    return tmp_path, calls


def _bootstrap(root: Path) -> None:
    subprocess.run(
        ["bash", str(root / "scripts" / "bootstrap.sh")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        check=True,
        capture_output=True,
    )


def test_bootstrap_installs_only_when_pyproject_changes(tmp_path: Path) -> None:
    root, calls = _checkout(tmp_path)

    _bootstrap(root)
    first = calls.read_text(encoding="utf-8").splitlines()
    _bootstrap(root)

    assert any("-e .[dev]" in call for call in first)
    assert calls.read_text(encoding="utf-8").splitlines() == first  # nothing installed again
    (root / "pyproject.toml").write_text('[project]\nname = "y"\n', encoding="utf-8")
    _bootstrap(root)
    assert len(calls.read_text(encoding="utf-8").splitlines()) == 2 * len(first)
