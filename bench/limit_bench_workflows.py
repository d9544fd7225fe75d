"""Workflows of bench/limits.py: W1's chain with no limit, with a generous step limit that is
never reached, and a 3-step workflow with and without a per-key run limit of 1."""

from flow_cli import Runtime

free = Runtime(build_id="limits-free")
generous = Runtime(build_id="limits-generous")


def _register(runtime, **limits):  # type: ignore[no-untyped-def]
    @runtime.workflow("chain")
    def chain(ctx):  # type: ignore[no-untyped-def]
        x = ctx.input["x"]
        for i in range(ctx.input["steps"]):
            x = ctx.step(f"s{i}", "inc", x)
        return ctx.complete(x)

    @runtime.workflow("keyed", **limits)
    def keyed(ctx):  # type: ignore[no-untyped-def]
        x = ctx.input["x"]
        for i in range(3):
            x = ctx.step(f"s{i}", "inc", x)
        return ctx.complete(x)


_register(free)
_register(generous, concurrency=1, concurrency_key="key")


@free.step("inc")
def inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


@generous.step("inc", concurrency=100_000, rate="10000000/1s")
def inc_limited(x, info):  # type: ignore[no-untyped-def]
    return x + 1
