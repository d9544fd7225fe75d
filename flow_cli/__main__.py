"""``python -m flow_cli``: the same as the ``flow`` command."""

from __future__ import annotations

from flow_cli.cli.app import main

if __name__ == "__main__":
    main()
