"""What a search leaves in its output folder: ``architecture.json`` (what ``hetrl train dqn ENV
--set network=.../architecture.json`` retrains, with how it was found), ``derived.pt`` (the derived
network's weights as the supernet trained them, for fine-tuning), ``summary.md`` and
``search.png`` (the candidates' probabilities and the losses over the search), and
``costs.json`` (every candidate's cost, for a table cost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hetrl.cosearch.search import SearchResult
from hetrl.cosearch.supernet import SearchSpace
from hetrl.files import ensure_dir, write_file, write_json, write_text


def format_cost(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e6:,.1f} us"
    if unit == "MACs":
        return f"{value:,.0f} MACs"
    return f"{value:,.4g} {unit}".strip()


def write_outputs(out: Path, result: SearchResult, space: SearchSpace, context: dict[str, Any],
                  cost_table: dict[str, Any] | None = None) -> list[Path]:
    """Write every output file into ``out`` (made if missing); ``context``: the env, teacher,
    data and hardware, saved beside the architecture. Returns the files written."""
    ensure_dir(out)
    written = [result.architecture.save(out / "architecture.json", **context, **result.metadata())]
    write_file(out / "derived.pt", lambda f: torch.save(result.network.state_dict(), f))
    written.append(out / "derived.pt")
    if cost_table is not None:
        written.append(write_json(out / "costs.json", cost_table))
    write_text(out / "summary.md", markdown(result, space, context, written[0]))
    written.append(out / "summary.md")
    plot(result, space, out / "search.png", f"co-search on {context.get('env', '?')}")
    written.append(out / "search.png")
    return written


def markdown(result: SearchResult, space: SearchSpace, context: dict[str, Any], architecture_file: Path) -> str:
    cfg, arch = result.config, result.architecture
    teacher = f"`{context.get('teacher', '?')}` ({context.get('checkpoint', 'best')}); states: {context.get('states', '?')}"
    search = (f"{cfg.mode}, {cfg.steps:,} steps of batch {cfg.batch_size}, distillation {cfg.distill} (weight "
              f"{cfg.distill_weight:g}), TD weight {cfg.td_weight:g}, temperature {cfg.tau_start:g} -> {cfg.tau_end:g}, "
              f"warm-up {cfg.warmup:.0%}")
    lines = [f"# Co-search on {context.get('env', '?')}", "", f"- teacher: {teacher}",
             f"- hardware cost: {result.cost_label or 'none'} (lambda {cfg.hardware_weight:g})", f"- search: {search}",
             *([f"- derived network on the FPGA: {context['derived design']}"] if "derived design" in context else []), "",
             "| layer | chosen | probability | runner-up | input | MACs |", "| --- | --- | --- | --- | --- | --- |"]
    for k, (layer, here, probs, chosen) in enumerate(zip(space.layers, arch.layers(), result.probs, result.choice)):
        ranked = sorted(range(len(probs)), key=lambda i: -probs[i])
        runner = next((f"{layer.candidates[i].name} ({probs[i]:.2f})" for i in ranked if i != chosen), "-")
        shape = f"{here.in_width}x{here.height}x{here.width}" if layer.conv else f"{here.in_width}"
        macs = sum(d.macs for d in here.describe())
        lines.append(f"| {k} | {layer.candidates[chosen].name} | {probs[chosen]:.2f} | {runner} | {shape} | {macs:,} |")
    params = sum(p.numel() for p in result.network.parameters())
    chain = " -> ".join([*arch.names, arch.output.name])
    cost = (f"{format_cost(result.cost, result.cost_unit)}; expected under the final probabilities: "
            f"{format_cost(result.expected_cost, result.cost_unit)}")
    lines += ["", f"- derived network: {chain}; {arch.macs:,} MACs per decision, {params:,} parameters",
              f"- its cost: {cost}",
              f"- its distillation loss ({cfg.distill}) with the supernet's weights: {result.distill_loss:.4g}", "",
              f"Retrain it: `hetrl train dqn {context.get('env', 'ENV')} --set network={architecture_file.resolve()}`"
              + (f"; with its teacher too (distillation beside the TD loss): add `--set teacher={context['teacher']}`"
                 if context.get("teacher") else ""), ""]
    return "\n".join(lines)


def plot(result: SearchResult, space: SearchSpace, path: Path, title: str) -> None:
    """The losses and the expected cost over the search, and each searched layer's candidate probabilities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    searched = [k for k, layer in enumerate(space.layers) if len(layer.candidates) > 1]
    fig, axes = plt.subplots(1 + len(searched), 1, figsize=(9, 2.6 * (1 + len(searched))), squeeze=False)
    steps = [row["step"] for row in result.history]
    ax = axes[0][0]
    for key in ("distill", "td", "hardware"):
        if any(key in row for row in result.history):
            ax.plot(steps, [row.get(key, float("nan")) for row in result.history], label=key)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel("search step")
    if any("expected_cost" in row for row in result.history):
        twin = ax.twinx()
        twin.plot(steps, [row["expected_cost"] for row in result.history], color="black", linestyle=":", label="expected cost")
        twin.set_ylabel(f"expected cost ({result.cost_unit})")
        twin.legend(loc="upper right", fontsize="small")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    for ax, k in zip((row[0] for row in axes[1:]), searched):
        for i, op in enumerate(space.layers[k].candidates):
            ax.plot(steps, [row["probs"][k][i] for row in result.history], label=op.name,
                    linewidth=2.5 if i == result.choice[k] else 1)
        ax.set_ylabel(f"layer {k}")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="x-small")
    fig.tight_layout()
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
