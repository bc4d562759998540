"""The plan as tables: the chosen placement with predicted costs, and the runner-ups. Figures a
what-if device modelled (``Prediction.modelled``) are marked wherever they show."""

from __future__ import annotations

from rich.table import Table

from hetrl.energy.measurement import GPU_POWER, USER_FIGURE
from hetrl.planner.plan_file import Plan
from hetrl.planner.whatif import LABEL


def plan_tables(plan: Plan) -> list[Table]:
    """The chosen plan (placement and predicted cost per env step) and its runner-ups."""
    how = "inline" if plan.executor == "inline" else f"{plan.executor} executor, {plan.actors} actor processes"
    how += f", {plan.num_envs} envs {'each' if plan.executor != 'inline' else 'stepped together'}" if plan.num_envs != 1 else ""
    how += ", central inference" if plan.inference == "central" else ""
    chosen = Table(title=f"plan for {plan.algo} on {plan.env}: {how} ({plan.objective}; machine {plan.fingerprint})",
                   title_justify="left")
    for col in ("primitive", "placement", "predicted µs/call", "predicted µs/env step"):
        chosen.add_column(col, justify="left" if col in ("primitive", "placement") else "right")
    pred = plan.prediction
    for primitive, where in plan.placement.by_primitive().items():
        if pred is not None and primitive not in pred.per_call_s:
            continue
        call = f"{1e6 * pred.per_call_s[primitive]:,.1f}" if pred else "-"
        step = f"{1e6 * pred.per_env_step_s[primitive]:,.1f}" if pred else "-"
        mark = " (bottleneck)" if pred and primitive == pred.bottleneck else ""
        chosen.add_row(primitive + mark, where + (" (what-if)" if pred and primitive in pred.modelled else ""), call, step)
    for extra, where in (("Transfer", "replay -> learner"), ("Loop", "executor's own work"),
                         ("WeightFetch", "shared copy -> actors"), ("InferenceServe", "learner answers an actor"),
                         ("InferenceTrip", "an actor's round trip"), ("ChunkTransfer", "a chunk, actor -> learner (Ray)")):
        if pred is not None and extra in pred.per_call_s:
            step = pred.per_env_step_s.get(extra)  # none for a wait (InferenceTrip)
            where += " (what-if)" if extra in pred.modelled else ""
            chosen.add_row(extra, where, f"{1e6 * pred.per_call_s[extra]:,.1f}", "-" if step is None else f"{1e6 * step:,.1f}")
    if pred is not None:
        chosen.caption = (f"predicted{f' ({LABEL})' if pred.modelled else ''}: {pred.env_steps_per_s:,.0f} env steps/s "
                          "in the learning phase (a model's prediction)")
        measured = [m for m in plan.meters if USER_FIGURE not in m]
        meters = "; ".join(measured) or "the profile's meters"
        meters += "".join(f"; {'a GPU' if m.startswith(GPU_POWER) else 'the host CPU'} at {m}" for m in plan.meters if USER_FIGURE in m)
        chosen.caption += (f"; {pred.joules_per_env_step:.4f} J per env step (from energy per call measured by {meters})"
                           if pred.joules_per_env_step else "; energy: not modelled on what-if devices" if pred.modelled
                           else "; energy: not in the profile (no meter worked, or it was made for a throughput plan)")
        if pred.stage_rates:
            stages = ", ".join(f"{k} {v:,.0f}" for k, v in pred.stage_rates.items())
            chosen.caption += f"; stages (env steps/s each could sustain): {stages}; bottleneck: {pred.bottleneck}"
        if pred.startup_s:
            chosen.caption += f"; starting and stopping the actors: {pred.startup_s:.1f} s (measured)"
        if plan.steps:
            chosen.caption += (f"; over the run's {plan.steps:,} env steps, start-up included: "
                               f"{pred.run_env_steps_per_s(plan.steps):,.0f} env steps/s (predicted)")
        for label in sorted(set(pred.modelled.values())):
            names = ", ".join(name for name, mine in pred.modelled.items() if mine == label)
            chosen.caption += f"\n{names}: {label}"
    if plan.what_if and not (pred and pred.modelled):
        considered = "what-if devices considered, not chosen: " + "; ".join(plan.what_if)
        chosen.caption = f"{chosen.caption}\n{considered}" if chosen.caption else considered
    tables = [chosen]
    if plan.runner_ups:
        others = Table(title="runner-up plans (predicted)", title_justify="left")
        columns = ["executor", "act", "replay", "learn", "env steps/s"] + (["over the run"] if plan.steps else []) + ["bottleneck"]
        for col in columns:
            others.add_column(col, justify="right" if col in ("env steps/s", "over the run") else "left")
        for c, p in plan.runner_ups:
            rates = [f"{p.env_steps_per_s:,.0f}"] + ([f"{p.run_env_steps_per_s(plan.steps):,.0f}"] if plan.steps else [])
            rates = [rate + (" (what-if)" if p.modelled else "") for rate in rates]
            others.add_row(str(c), str(c.placement.act), str(c.placement.replay), str(c.placement.learn), *rates, p.bottleneck)
        if any(p.modelled for _, p in plan.runner_ups):
            others.caption = f"(what-if): built on a what-if device's costs, {LABEL}"
        tables.append(others)
    return tables
