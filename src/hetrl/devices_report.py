"""``hetrl devices``: what this machine has, and which energy meters work (with the reason when not)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from hetrl.hardware import Machine, describe_machine, gib


def render_machine(machine: Machine) -> Group:
    """Tables for the host, the accelerators and the energy meters."""
    host = Table(title=f"machine {machine.fingerprint()}", show_header=False, title_justify="left")
    host.add_column(style="bold")
    host.add_column()
    cpu = machine.cpu
    physical = "unknown" if cpu.physical_cores is None else str(cpu.physical_cores)
    host.add_row("CPU", escape(cpu.model))
    host.add_row("cores", f"{physical} physical, {cpu.logical_cores} logical")
    host.add_row("memory", gib(machine.memory_bytes))
    numa = "; ".join(f"node{n.index}: cpus {n.cpus or '?'}, {gib(n.memory_bytes)}" for n in machine.numa_nodes)
    host.add_row("NUMA nodes", f"{len(machine.numa_nodes)} ({numa})" if machine.numa_nodes else "not reported")
    host.add_row("versions", ", ".join(f"{k} {v}" for k, v in machine.versions.items()))

    accelerators = Table(title="torch accelerators", title_justify="left")
    for column in ("device", "name", "memory", "compute capability"):
        accelerators.add_column(column)
    for a in machine.accelerators:
        accelerators.add_row(a.torch_device, escape(a.name), gib(a.memory_bytes), a.compute_capability or "-")
    if not machine.accelerators:
        accelerators.add_row("-", "none: torch sees only the CPU", "-", "-")

    meters = Table(title="energy meters", title_justify="left")
    for column in ("meter", "measures", "status"):
        meters.add_column(column)
    for m in machine.meters:
        if m.available:
            meters.add_row(m.name, m.device, f"[green]measured[/]: {escape(m.method or '')}")
        else:
            meters.add_row(m.kind, "-", f"[yellow]unavailable[/]: {escape(m.reason or '')}")
    return Group(host, accelerators, meters)


def devices_command(args: argparse.Namespace) -> int:
    """Print the machine (``args.json``: as JSON, the fields of ``Machine.to_dict``)."""
    machine = describe_machine()
    if args.json:
        print(json.dumps(machine.to_dict(), indent=2))
    else:
        Console().print(render_machine(machine))
    return 0
