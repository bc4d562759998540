"""Which branch: an exit network's branch refit on its run's replay, by loss and width.

For each exit-dqn run directory given, the trained backbone and final head (the run's final
checkpoint) stay frozen, and a fresh branch after block 0 is fit to the final head on the run's
replay states (``hetrl.exits.fit_branches``: the sweep's fit, 10% of the states held out) for each
combination of the Q head's loss (``--targets``: ``exit_target`` values), the share of the
block's outputs the branch reads (``--shares``: ``exit_share`` values) and hidden width
(``--hidden``: ``exit_hidden`` values, 0 for linear heads; ``share:units`` pairs in ``--pairs``
instead of every share with every width). Reported per run and combination: the
branch's agreement with the final head's greedy action on the held-out states, the branch-only
policy's mean return on validation episodes (every decision at the branch: threshold 0) against
the whole network's on the same episodes, and the operations ratio of a decision at the branch.

    python bench/exit_branches.py RUN_DIR [RUN_DIR ...] --episodes 30 --out docs/exit_branches.md
"""

from __future__ import annotations

import argparse
import copy
import datetime
import platform
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="exit-dqn run directories (with a kept replay)")
    p.add_argument("--targets", default="distill,policy", help="exit_target values (default distill,policy)")
    p.add_argument("--hidden", default="0,8,16", help="exit_hidden values (default 0,8,16)")
    p.add_argument("--shares", default="1", help="exit_share values (default 1)")
    p.add_argument("--pairs", default="", help="share:units pairs (e.g. 1:9,0.5:64), instead of --shares x --hidden")
    p.add_argument("--updates", type=int, default=None, help="fit updates (default: the sweep's)")
    p.add_argument("--episodes", type=int, default=30, help="validation episodes per policy (default 30)")
    p.add_argument("--out", help="a markdown file to write (default: print only)")
    args = p.parse_args()

    import torch

    from hetrl.cosearch.teacher import Teacher
    from hetrl.evaluation import evaluate_policy
    from hetrl.exits import FIT_STATES, FIT_UPDATES, VALIDATION_SEED_OFFSET, ExitCounter, fit_branches, score_ratio
    from hetrl.nets.exits import ExitQNetwork

    torch.set_num_threads(1)
    updates = FIT_UPDATES if args.updates is None else args.updates
    targets = [t for t in args.targets.split(",") if t]
    widths = [int(h) for h in args.hidden.split(",") if h]
    shares = [float(x) for x in args.shares.split(",") if x]
    pairs = ([(float(a), int(b)) for a, b in (pair.split(":") for pair in args.pairs.split(",") if pair)]
             or [(share, hidden) for share in shares for hidden in widths])
    lines = [
        "| run | Q head's loss (exit_target) | share of the block's outputs | branch hidden units | agreement (held out) | "
        "branch-only return | whole network's return | score ratio | ops ratio at the branch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in args.runs:
        teacher = Teacher(run, "final")
        trained: ExitQNetwork = teacher.policy.network
        algo, spec, seed = teacher.policy.algo, teacher.policy.spec, int(teacher.config.seed)
        data = teacher.data(FIT_STATES, "auto", seed)

        def validation(net: ExitQNetwork, threshold: float) -> float:
            counter = ExitCounter(algo, net, threshold)
            return float(evaluate_policy(counter, spec.origin, args.episodes, seed, spec.atari,
                                         VALIDATION_SEED_OFFSET).mean())

        whole = validation(trained, 1.0)
        name = Path(run).name
        for target in targets:
            for share, hidden in pairs:
                net = ExitQNetwork(spec.obs_shape, spec.n_actions, [(s.filters, s.kernel, s.stride) for s in trained.geometry],
                                   [b[0].out_features for b in trained.blocks[trained.n_convs:]], trained.scale,
                                   (0,), hidden, branch_share=share)
                backbone = {k: v for k, v in trained.state_dict().items() if not k.startswith("branches.")}
                net.load_state_dict(backbone, strict=False)
                cfg = copy.copy(algo.config)
                cfg.exit_target = target
                fit = fit_branches(net, data, cfg, updates, seed)
                branch = validation(net, 0.0)
                ops = net.macs(0) / net.baseline_macs
                lines.append(f"| {name} | {target} | {share:g} | {hidden} | {100 * fit.agreement_after[0]:.1f}% | {branch:.2f} | "
                             f"{whole:.2f} | {score_ratio(branch, whole):.3f} | {ops:.3f} |")
                print(lines[-1], file=sys.stderr, flush=True)
    choice = f"--pairs {args.pairs}" if args.pairs else f"--shares {args.shares} --hidden {args.hidden}"
    head = (f"`python bench/exit_branches.py {' '.join(Path(r).name for r in args.runs)} --targets {args.targets} "
            f"{choice} --episodes {args.episodes}` on "
            f"{datetime.date.today()}, {platform.processor() or platform.machine()}: {updates:,} fit updates per "
            f"branch on up to {FIT_STATES:,} replay states, {args.episodes} validation episodes per policy.")
    text = "\n".join([head, "", *lines])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
