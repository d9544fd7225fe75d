"""Workflows of bench/limits.py: W1's chain with no limit and with a generous step limit that
is never reached, and a 3-step workflow with and without a per-key run limit of 1. Each limited
runtime declares only the limit its case measures."""

from flow_cli import Runtime

free = Runtime(build_id="limits-free")
generous = Runtime(build_id="limits-generous")
per_key = Runtime(build_id="limits-per-key")


def _chain(runtime):  # type: ignore[no-untyped-def]
    @runtime.workflow("chain")
    def chain(ctx):  # type: ignore[no-untyped-def]
        x = ctx.input["x"]
        for i in range(ctx.input["steps"]):
            x = ctx.step(f"s{i}", "inc", x)
        return ctx.complete(x)


def _keyed(runtime, **limits):  # type: ignore[no-untyped-def]
    @runtime.workflow("keyed", **limits)
    def keyed(ctx):  # type: ignore[no-untyped-def]
        x = ctx.input["x"]
        for i in range(3):
            x = ctx.step(f"s{i}", "inc", x)
        return ctx.complete(x)


def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


_chain(free)
_keyed(free)
free.step("inc")(_inc)
_chain(generous)
generous.step("inc", concurrency=100_000, rate="10000000/1s")(_inc)
_keyed(per_key, concurrency=1, concurrency_key="key")
per_key.step("inc")(_inc)

# W1 under the generous step limit while another workflow has a run limit declared too.
both = Runtime(build_id="limits-both")
_chain(both)
_keyed(both, concurrency=1, concurrency_key="key")
both.step("inc", concurrency=100_000, rate="10000000/1s")(_inc)

# W1 under a step limit of 50: more than a worker's threads run at once, fewer than the runs'
# first steps waiting, so attempts queue for slots and are leased under the limit.
modest = Runtime(build_id="limits-modest")
_chain(modest)
modest.step("inc", concurrency=50)(_inc)
