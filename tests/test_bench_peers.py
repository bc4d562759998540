"""bench/peers.py's worker: with --peers-flush-denormals a peer trains with denormals flushed, as hetrl
does by default; without it, in torch's default (IEEE) mode."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import peer_runners  # noqa: E402  (bench/ is not a package)
import peers  # noqa: E402

from hetrl.runtime.denormals import flushing, set_flushing


@pytest.mark.parametrize("asked", [False, True])
def test_a_peer_flushes_denormals_only_when_asked(monkeypatch, asked):
    seen = []

    def runner(w, steps, seed, threads, device):
        seen.append(flushing())
        return SimpleNamespace(act=None, version="x", env_steps=steps, updates=0, seconds=1.0, extra={})

    monkeypatch.setitem(peer_runners.RUNNERS, "sb3", runner)
    monkeypatch.setattr(peer_runners, "evaluate", lambda act, env_id, episodes: [1.0])
    monkeypatch.setattr(peers, "_set_threads", lambda threads: None)
    if not set_flushing(False):
        pytest.skip("torch cannot set flush-to-zero on this CPU")
    args = peers.parse(["--worker", "sb3", "dqn", "--steps", "10"] + (["--peers-flush-denormals"] if asked else []))
    try:
        result = peers.worker(args)
    finally:
        set_flushing(False)
    assert seen == [asked] and result["env_steps"] == 10
