"""A card charge through a gateway without idempotency keys (docs/incidents.md, section 9).

The charge must not happen twice, so its step declares ``on_lost="unknown"``: an attempt whose
worker vanishes is not run again; an operator checks the gateway and resolves it with
``flow step resolve``. ``FLOW_EXAMPLE_CHARGE_SECONDS`` makes the gateway slow (a worker can then
be killed mid-charge); each charge attempt appends a line to ``charges.log``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flow_cli import Runtime

runtime = Runtime(build_id="payments-2026.12.1")


@runtime.step("charge-card", on_lost="unknown", timeout=300)
def charge_card(input: Any, info: Any) -> Any:
    with Path("charges.log").open("a", encoding="utf-8") as log:
        log.write(f"{info.run_id} attempt {info.attempt}\n")
    time.sleep(float(os.environ.get("FLOW_EXAMPLE_CHARGE_SECONDS", "0")))
    return {"charge": f"ch_{info.run_id}"}


@runtime.step("send-receipt")
def send_receipt(input: Any, info: Any) -> Any:
    return {"receipt": input["charge"]}


@runtime.workflow("charge")
def charge(ctx: Any) -> Any:
    charged = ctx.step("charge", charge_card, ctx.input)
    return ctx.complete(ctx.step("receipt", send_receipt, charged))
