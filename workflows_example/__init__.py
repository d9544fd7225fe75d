"""Example workflows for Flow: copy from these.

- ``orders``: build ``shop-2026.12.1``, the order flow, exchange rate, parcel and poller flows.
- ``orders_v1``: the previous build ``shop-2026.11.1`` (before the tax-rounding fix).
- ``orders_broken``: a build whose change to the order flow is NOT guarded by a patch marker,
  so ``flow replay-check`` rejects it.
"""
