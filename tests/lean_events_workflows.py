"""The runs of tests/data/sqlite_v11.sql (a database written by schema version 11's Flow): the
mix of bench/scale.py, runs that end in every way and runs that stay open in every way."""

from flow_cli import Runtime
from flow_cli.model.retry import RetryPolicy

runtime = Runtime(build_id="lean-1")

ONCE = RetryPolicy(max_attempts=1, initial_interval=1.0, backoff_coefficient=2.0, max_interval=1.0)
DAILY = RetryPolicy(
    max_attempts=5, initial_interval=86400.0, backoff_coefficient=2.0, max_interval=86400.0
)

KINDS = ("completes", "fails", "waits", "sleeps", "retries", "parent")


@runtime.workflow("order", attributes=lambda i: {"customer": i["customer"]})
def order(ctx):  # type: ignore[no-untyped-def]
    """input {"customer", "kind"}: what the run does is its kind's (``KINDS``)."""
    kind = ctx.input["kind"]
    if kind == "completes":
        total = ctx.step("price", "add", 1)
        total = ctx.step("tax", "add", total)
        return ctx.complete(ctx.step("charge", "add", total))
    if kind == "fails":
        ctx.step("charge", "decline", None, retry=ONCE)
        return ctx.complete(None)
    if kind == "waits":
        return ctx.complete(ctx.receive("approval", "approve"))
    if kind == "sleeps":
        ctx.sleep("cooling-off", 30 * 86400)
        return ctx.complete(ctx.step("charge", "add", 1))
    if kind == "retries":
        ctx.step("charge", "decline", None, retry=DAILY)
        return ctx.complete(None)
    first = ctx.child("a", "item", {"n": 1})
    second = ctx.child("b", "item", {"n": 2})
    return ctx.complete([first.result, second.result])


@runtime.workflow("item")
def item(ctx):  # type: ignore[no-untyped-def]
    return ctx.complete(ctx.step("pick", "add", ctx.input["n"]))


@runtime.step("add")
def add(x, info):  # type: ignore[no-untyped-def]
    return x + 1


@runtime.step("decline")
def decline(x, info):  # type: ignore[no-untyped-def]
    raise RuntimeError("card declined")
