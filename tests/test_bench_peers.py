"""The workers of bench/peers.py and bench/grid.py: with --peers-flush-denormals a peer trains with
denormals flushed, as hetrl does by default; without it, in torch's default (IEEE) mode. hetrl's own
run is left to its setting (flush_denormals), which its session sets."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import grid  # noqa: E402  (bench/ is not a package)
import peer_runners  # noqa: E402
import peers  # noqa: E402

from hetrl.runtime.denormals import flushing, set_flushing

JOBS = {"peers": (peers, ["dqn", "--steps", "10"]), "grid": (grid, ["dqn:CartPole-v1:64,64:64:1", "--steps", "10", "--threads", "1"])}


@pytest.mark.parametrize("script", list(JOBS))
@pytest.mark.parametrize("lib, asked, flushed", [("sb3", False, False), ("sb3", True, True), ("hetrl", True, False)])
def test_a_peer_flushes_denormals_only_when_asked(monkeypatch, script, lib, asked, flushed):
    seen = []

    def runner(w, steps, seed, threads, device):
        seen.append(flushing())
        return SimpleNamespace(act=None, version="x", env_steps=steps, updates=0, seconds=1.0, extra={})

    monkeypatch.setitem(peer_runners.RUNNERS, lib, runner)
    monkeypatch.setattr(peer_runners, "evaluate", lambda act, env_id, episodes: [1.0])
    if not set_flushing(False):
        pytest.skip("torch cannot set flush-to-zero on this CPU")
    module, job = JOBS[script]
    args = module.parse(["--worker", lib, *job] + (["--peers-flush-denormals"] if asked else []))
    threads = torch.get_num_threads()  # grid's worker sets the count it is given
    try:
        result = module.worker(args)
    finally:
        set_flushing(False)
        torch.set_num_threads(threads)
    assert seen == [flushed] and result["env_steps"] == 10
