"""Writes docs/img/top.svg: `flow top` over a small shop, drawn headless by Textual.

Usage: python scripts/gen_top_screenshot.py

The database is a scratch SQLite file holding a few dozen orders in every state (completed,
failed on a declined card, waiting for approval); the picture is the first screen.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flow_cli import RetryPolicy, Runtime  # noqa: E402
from flow_cli.cli.top import TopApp  # noqa: E402
from flow_cli.engine.engine import Engine  # noqa: E402
from flow_cli.store.sqlite import SQLiteStore  # noqa: E402


class CardDeclined(Exception):
    """The bank said no."""


def _runtime() -> Runtime:
    rt = Runtime(build_id="shop-2026.12.1")

    @rt.step("chargePayment")
    def charge(input, info):
        if input["card"] == "0000":
            raise CardDeclined("card 0000 declined by the bank")
        return {"charge_id": f"ch-{input['n']}"}

    @rt.workflow("order")
    def order(ctx):
        if ctx.input["n"] % 7 == 3:
            ctx.receive("approval", "approved")
        charge = ctx.step("charge-payment", "chargePayment", ctx.input, RetryPolicy(max_attempts=1))
        return ctx.complete(charge)

    return rt


async def _draw(engine: Engine, out: Path) -> None:
    app = TopApp(engine, refresh_seconds=3600)
    async with app.run_test(size=(120, 32)) as pilot:
        await pilot.pause()
        out.write_text(app.export_screenshot(title="flow top"), encoding="utf-8")


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        engine = Engine(SQLiteStore(Path(scratch) / "flow.db"), [_runtime()])
        with engine:
            for n in range(40):
                card = "0000" if n % 9 == 4 else "4242"
                engine.start("order", {"n": n, "card": card}, run_id=f"order-{n:04d}")
            engine.tick(until_idle=True)
            out = ROOT / "docs" / "img" / "top.svg"
            out.parent.mkdir(exist_ok=True)
            asyncio.run(_draw(engine, out))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
