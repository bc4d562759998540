"""EnvStep/envpool: the same-step autoreset contract over EnvPool's next-step one, life loss as
terminal while the game goes on, raw scores in ``finished``, the options it refuses, determinism,
and agreement with the gymnasium backend on the same emulator frames (equal outputs over whole
games without life loss, and up to the first lost life with it: ``noop_max=1`` and no sticky
actions, so that both play the same frames).

The tests that step envs skip when envpool (or ale-py, for the comparison) is not installed."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import AtariOptions, env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import build, get
from hetrl.protocol import PRIMITIVES, Slot, contract_dims

BREAKOUT = "ALE/Breakout-v5"
HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
HAS_ALE = importlib.util.find_spec("ale_py") is not None
needs_envpool = pytest.mark.skipif(not HAS_ENVPOOL, reason="envpool is not installed: pip install envpool (Linux x86_64, Python 3.11+)")
needs_both = pytest.mark.skipif(not (HAS_ENVPOOL and HAS_ALE),
                                reason="envpool and ale-py are needed: pip install 'hetrl[pixels]' (envpool: Linux x86_64, Python 3.11+)")
DETERMINISTIC = AtariOptions(repeat_action_probability=0.0, noop_max=1)  # the same frames in every backend


def atari_algorithm(options=None, env_id=BREAKOUT):
    """What ``unsupported`` reads (an algorithm's spec), without making the env."""
    return SimpleNamespace(spec=SimpleNamespace(env_id=env_id, atari=options or AtariOptions()))


def envpool_step(n, seed=0, options=None, env_id=BREAKOUT):
    from hetrl.primitives.env_step_envpool import EnvStepEnvpool

    return EnvStepEnvpool(env_id, n, seed, options or AtariOptions())


def check(out, shape, n):
    PRIMITIVES["EnvStep"].check("outputs", out, contract_dims(
        SimpleNamespace(obs_shape=shape, obs_dtype="uint8", action_shape=(), action_dtype="int64"), N=n))


# --- what it serves ---------------------------------------------------------------------------------
def test_envpool_serves_ale_ids_only():
    impl = get("EnvStep", "envpool")
    cartpole = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())
    assert "ALE/" in impl.unsupported(cartpole)
    with pytest.raises(HetrlError, match="Atari"):
        build("EnvStep", Slot("envpool", "cpu"), cartpole, 0, num_envs=1)


def test_missing_envpool_is_one_line_with_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import fails as if it were not installed
    reason = get("EnvStep", "envpool").unsupported(atari_algorithm())
    assert "pip install envpool" in reason and len(reason.splitlines()) == 1


@needs_envpool
def test_envpool_serves_atari_and_refuses_what_it_cannot_express():
    impl = get("EnvStep", "envpool")
    assert impl.unsupported(atari_algorithm()) is None
    reason = impl.unsupported(atari_algorithm(AtariOptions(noop_max=0)))
    assert "noop_max=0" in reason and len(reason.splitlines()) == 1
    with pytest.raises(HetrlError, match="noop_max=0"):
        envpool_step(1, options=AtariOptions(noop_max=0))
    assert "NoSuchGame" in impl.unsupported(atari_algorithm(env_id="ALE/NoSuchGame-v5"))
    with pytest.raises(HetrlError, match="unknown environment 'ALE/NoSuchGame-v5'"):
        envpool_step(1, env_id="ALE/NoSuchGame-v5")


# --- the contract -------------------------------------------------------------------------------------
@needs_envpool
def test_episode_structure_same_step_autoreset_and_raw_scores():
    """Lost lives end the learner's episodes and the game goes on (no reset: next_obs is the final
    observation); a game's end resets in the same step (next_obs is a new game's first stack, its
    first frame repeated) and reports the raw score; lives are full again."""
    n = 2
    env = envpool_step(n, seed=0)
    obs = env.reset()
    assert obs.shape == (n, 4, 84, 84) and obs.dtype == np.uint8 and obs.flags.c_contiguous
    assert (env.lives == 5).all()
    rng = np.random.default_rng(0)
    lives_lost, games, returns = 0, [], np.zeros(n)
    for _ in range(2000):
        lives_before = env.lives.copy()
        out = env.step(rng.integers(0, 4, n))
        check(out, (4, 84, 84), n)
        assert set(np.unique(out["rewards"])) <= {0.0, 1.0}
        returns += out["rewards"]  # Breakout's random play scores 1 a brick: clipped equals raw
        reset = env.lives > lives_before  # a new game
        for i in range(n):
            if reset[i]:
                assert out["terminated"][i] or out["truncated"][i]
                assert not np.array_equal(out["final_obs"][i], out["next_obs"][i])
                assert all(np.array_equal(frame, out["next_obs"][i, -1]) for frame in out["next_obs"][i])
                assert env.lives[i] == 5
            else:
                np.testing.assert_array_equal(out["final_obs"][i], out["next_obs"][i])
                if out["terminated"][i]:  # a lost life: the game goes on
                    lives_lost += 1
                    assert 0 < env.lives[i] < lives_before[i]
        assert len(env.finished) == int(reset.sum())
        for i, (score, length) in zip(np.flatnonzero(reset), env.finished):
            assert score == returns[i] and length > 20
            returns[i] = 0
        games += env.finished
    assert len(games) >= 2 and lives_lost >= 4 * len(games)
    env.close()


@needs_envpool
def test_time_limit_truncates_and_resets_in_the_same_step():
    env = envpool_step(2, options=AtariOptions(max_episode_frames=40))  # 10 agent steps
    env.reset()
    for t in range(1, 11):
        out = env.step(np.full(2, 3))  # left: the paddle moves away from where a game starts
        assert out["truncated"].all() == (t == 10) and not out["terminated"].any()
    assert env.finished == [(0.0, 10), (0.0, 10)]
    assert not np.array_equal(out["final_obs"], out["next_obs"])
    out = env.step(np.zeros(2, dtype=np.int64))
    assert not out["truncated"].any() and env.episode_lengths.tolist() == [1, 1]


@needs_envpool
def test_rewards_are_clipped_and_finished_reports_raw_scores():
    game = "ALE/SpaceInvaders-v5"  # 5 to 30 points an invader
    opts = {"repeat_action_probability": 0.0, "terminal_on_life_loss": False}
    clipped = envpool_step(1, seed=2, options=AtariOptions(**opts), env_id=game)
    raw = envpool_step(1, seed=2, options=AtariOptions(clip_rewards=False, **opts), env_id=game)
    clipped.reset(), raw.reset()
    rng = np.random.default_rng(2)
    r_clipped, r_raw, games = [], [], []
    for _ in range(3000):
        actions = rng.integers(0, 6, 1)
        r_clipped.append(clipped.step(actions)["rewards"][0])
        r_raw.append(raw.step(actions)["rewards"][0])
        assert clipped.finished == raw.finished
        games += clipped.finished
    r_clipped, r_raw = np.array(r_clipped), np.array(r_raw)
    assert r_raw.max() > 1  # the comparison saw unclipped scores
    np.testing.assert_array_equal(r_clipped, np.sign(r_raw))
    assert games and games[0][0] == r_raw[: games[0][1]].sum()  # the first game's raw score


@needs_envpool
def test_options_shape_the_observations():
    env = envpool_step(3, options=AtariOptions(frame_stack=2, screen_size=64))
    obs = env.reset()
    assert obs.shape == (3, 2, 64, 64) and obs.dtype == np.uint8
    out = env.step(np.ones(3, dtype=np.int64))
    check(out, (2, 64, 64), 3)


@needs_envpool
def test_a_seed_gives_the_same_games_and_reset_reseeds():
    """Sticky actions and no-op starts draw from EnvPool's generators: the same seed, the same
    outputs; another seed, other ones; a second ``reset`` starts the same games again."""
    def play(env, steps=300):
        outs = [env.reset()]
        rng = np.random.default_rng(5)
        for _ in range(steps):
            out = env.step(rng.integers(0, 4, 2))
            outs += [out["next_obs"], out["final_obs"], out["rewards"], out["terminated"]]
        return outs

    a, b, other = envpool_step(2, seed=3), envpool_step(2, seed=3), envpool_step(2, seed=4)
    first = play(a)
    for x, y in zip(first, play(b)):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(first, play(a)):  # reset again: the same seeds
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(first, play(other)))


# --- against the gymnasium backend --------------------------------------------------------------------
@needs_both
def test_equals_the_gymnasium_backend_over_whole_games_without_life_loss():
    """One no-op and no sticky actions: both backends play the same frames, and without life
    loss every output equals, through game ends and the next games' first stacks."""
    from hetrl.primitives.env_step_gymnasium import EnvStepGymnasium

    opts = AtariOptions(repeat_action_probability=0.0, noop_max=1, terminal_on_life_loss=False)
    n = 2
    ours, ref = envpool_step(n, options=opts), EnvStepGymnasium(env_spec(BREAKOUT, opts), n, 0)
    np.testing.assert_array_equal(ours.reset(), ref.reset())
    rng = np.random.default_rng(0)
    games = []
    for _ in range(1500):
        actions = rng.integers(0, 4, n)
        out, out_ref = ours.step(actions), ref.step(actions)
        for key in out:
            np.testing.assert_array_equal(out[key], out_ref[key], err_msg=key)
        assert ours.finished == ref.finished
        games += ours.finished
    assert len(games) >= 4  # the comparison went through game ends and resets


@needs_both
def test_equals_the_gymnasium_backend_up_to_the_first_lost_life():
    """With life loss: the same outputs up to the lost life, which both end as terminal; then
    the game goes on here at once (next_obs is the final observation), where the gymnasium
    backend plays a no-op step and restarts its stack."""
    from hetrl.primitives.env_step_gymnasium import EnvStepGymnasium

    ours, ref = envpool_step(1, options=DETERMINISTIC), EnvStepGymnasium(env_spec(BREAKOUT, DETERMINISTIC), 1, 0)
    np.testing.assert_array_equal(ours.reset(), ref.reset())
    rng = np.random.default_rng(0)
    for t in range(1000):
        actions = rng.integers(0, 4, 1)
        out, out_ref = ours.step(actions), ref.step(actions)
        np.testing.assert_array_equal(out["final_obs"], out_ref["final_obs"])
        assert (out["rewards"] == out_ref["rewards"]).all() and (out["terminated"] == out_ref["terminated"]).all()
        if out["terminated"].any():
            break
        np.testing.assert_array_equal(out["next_obs"], out_ref["next_obs"])
    assert out["terminated"].all() and t > 20 and ours.lives[0] == 4
    np.testing.assert_array_equal(out["next_obs"], out["final_obs"])  # the game went on
    assert not np.array_equal(out_ref["next_obs"], out_ref["final_obs"])  # baselines' no-op step
