"""Workflows of the W1-W4 workloads (bench/workloads.py), the same shapes as the peers' ones."""

from datetime import timedelta

from flow_cli import Runtime

runtime = Runtime(build_id="bench-1")


@runtime.workflow("chain")
def chain(ctx):  # type: ignore[no-untyped-def]
    """input {"steps": n, "x": x0}: n sequential trivial steps, each returns its input + 1."""
    x = ctx.input["x"]
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@runtime.step("inc")
def inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


@runtime.workflow("sleeper")
def sleeper(ctx):  # type: ignore[no-untyped-def]
    """A durable timer of input["secs"] seconds from the recorded start, then one step."""
    ctx.sleep_until("t", ctx.started_at + timedelta(seconds=ctx.input["secs"]))
    return ctx.complete(ctx.step("after", "inc", 0))


@runtime.workflow("alarm")
def alarm(ctx):  # type: ignore[no-untyped-def]
    """Sleeps until the absolute UTC time input["at"] (the same for every run), then one step."""
    from datetime import datetime

    ctx.sleep_until("t", datetime.fromisoformat(ctx.input["at"]))
    return ctx.complete(ctx.step("after", "inc", 0))


@runtime.workflow("talk")
def talk(ctx):  # type: ignore[no-untyped-def]
    """input {"steps": n}: n trivial steps (a long history), then waits; an update ends it."""
    for i in range(ctx.input["steps"]):
        ctx.step(f"s{i}", "inc", i)
    if ctx.updates("finish"):
        return ctx.complete(ctx.updates("finish")[-1].result)
    return ctx.complete(ctx.receive("never", "never"))


# Builds before queries and updates (a --baseline of the benchmarks) have neither.
if hasattr(runtime, "query"):

    @runtime.query("talk", "progress")
    def talk_progress(ctx, args):  # type: ignore[no-untyped-def]
        last = ctx.input["steps"] - 1
        return {"done": ctx.step_output(f"s{last}") is not None, "events": ctx.now.isoformat()}

    @runtime.update("talk", "finish")
    def talk_finish(ctx, args):  # type: ignore[no-untyped-def]
        return {"finished_by": args}
