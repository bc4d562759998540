"""Pixel environments (the ``pixels`` extra): MinAtar's observations, the Atari preprocessing against
Gymnasium's own wrappers, life loss and reward clipping in training only, the ale-vector EnvStep
against the gymnasium one, and the errors."""

import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minatar")
pytest.importorskip("ale_py")

from hetrl.algos import DQNConfig, make_algorithm  # noqa: E402
from hetrl.cli import main  # noqa: E402
from hetrl.config import make_config  # noqa: E402
from hetrl.envs import AtariOptions, env_spec, make_env  # noqa: E402
from hetrl.envs import pixels  # noqa: E402
from hetrl.errors import HetrlError  # noqa: E402
from hetrl.primitives import build, get  # noqa: E402
from hetrl.primitives.env_step_ale_vector import EnvStepAleVector  # noqa: E402
from hetrl.primitives.env_step_gymnasium import EnvStepGymnasium  # noqa: E402
from hetrl.protocol import PRIMITIVES, Slot, contract_dims  # noqa: E402

BREAKOUT = "ALE/Breakout-v5"


def dims(spec, n):
    return contract_dims(spec, N=n)


def reference_atari(env_id, opts, clip=False):
    """The same preprocessing written out with Gymnasium's wrappers (no life loss)."""
    env = gym.make(env_id, frameskip=1, repeat_action_probability=opts.repeat_action_probability,
                   full_action_space=opts.full_action_space, max_num_frames_per_episode=opts.max_episode_frames)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=opts.noop_max, frame_skip=opts.frame_skip,
                                          screen_size=opts.screen_size, grayscale_obs=True)
    if clip:
        env = gym.wrappers.TransformReward(env, np.sign)
    return gym.wrappers.FrameStackObservation(env, opts.frame_stack)


# --- specs ---------------------------------------------------------------------------------------
def test_vector_env_specs_are_unchanged():
    spec = env_spec("CartPole-v1")
    assert spec.obs_dtype == "float32" and not spec.is_image and spec.atari is None and spec.pixel_scale == 1.0


def test_minatar_spec_and_observations_are_uint8_channels_first():
    spec = env_spec("MinAtar/Breakout-v1")
    assert spec.obs_shape == (4, 10, 10) and spec.obs_dtype == "uint8" and spec.is_image and spec.n_actions == 3
    assert spec.pixel_scale == 1.0 and spec.atari is None
    ours, raw = make_env("MinAtar/Breakout-v1"), gym.make("MinAtar/Breakout-v1")
    obs, _ = ours.reset(seed=3)
    ref, _ = raw.reset(seed=3)
    assert obs.dtype == np.uint8 and obs.shape == (4, 10, 10) and set(np.unique(obs)) <= {0, 1}
    np.testing.assert_array_equal(obs, np.moveaxis(ref, -1, 0))
    for action in [0, 1, 2, 1, 0, 2] * 5:
        obs, r, term, trunc, _ = ours.step(action)
        ref, r_ref, term_ref, _, _ = raw.step(action)
        np.testing.assert_array_equal(obs, np.moveaxis(ref, -1, 0))
        assert (r, term) == (r_ref, term_ref)
        if term:
            break


def test_atari_spec_follows_its_options():
    spec = env_spec(BREAKOUT)
    assert spec.obs_shape == (4, 84, 84) and spec.obs_dtype == "uint8" and spec.pixel_scale == 255.0
    assert spec.atari == AtariOptions() and spec.is_atari
    small = env_spec(BREAKOUT, AtariOptions(frame_stack=2, screen_size=64))
    assert small.obs_shape == (2, 64, 64)


# --- the Atari preprocessing -----------------------------------------------------------------------
def test_evaluation_env_equals_gymnasiums_own_wrappers_on_the_same_frames():
    opts = AtariOptions()
    ours, ref = make_env(BREAKOUT, training=False), reference_atari(BREAKOUT, opts)
    obs, _ = ours.reset(seed=5)
    obs_ref, _ = ref.reset(seed=5)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, obs_ref)
    rng = np.random.default_rng(0)
    for _ in range(400):
        action = int(rng.integers(4))
        obs, r, term, trunc, _ = ours.step(action)
        obs_ref, r_ref, term_ref, trunc_ref, _ = ref.step(action)
        np.testing.assert_array_equal(obs, obs_ref)
        assert (r, term, trunc) == (r_ref, term_ref, trunc_ref)
        if term or trunc:
            break


def test_life_loss_is_terminal_in_training_only_and_the_game_goes_on():
    opts = AtariOptions(repeat_action_probability=0.0)
    train, evaluation = make_env(BREAKOUT, training=True, atari=opts), make_env(BREAKOUT, training=False, atari=opts)
    train.reset(seed=1)
    evaluation.reset(seed=1)
    ale = train.unwrapped.ale
    rng = np.random.default_rng(1)
    for t in range(2000):
        action = int(rng.integers(4))
        _, _, term, _, info = train.step(action)
        _, _, term_eval, _, _ = evaluation.step(action)
        if term:
            break
    assert term and ale.lives() == 4 and not info["game_over"]  # the learner's episode ended at a lost life
    assert not term_eval and evaluation.unwrapped.ale.lives() == 4  # evaluation plays on
    frame = ale.getEpisodeFrameNumber()
    obs, _ = train.reset()  # continues the game: one no-op step, no new game
    assert ale.lives() == 4 and ale.getEpisodeFrameNumber() == frame + opts.frame_skip and obs.shape == (4, 84, 84)
    games = 0
    for t in range(20_000):  # to the real end of the game: then a new game starts
        _, _, term, trunc, info = train.step(int(rng.integers(4)))
        if term or trunc:
            if info["game_over"]:
                games += 1
                assert "episode" in info  # the real game's raw statistics
                train.reset()
                assert ale.lives() == 5
                break
            train.reset()
    assert games == 1


def test_rewards_are_clipped_in_training_only():
    game = "ALE/SpaceInvaders-v5"  # 5 to 30 points an invader
    opts = AtariOptions(repeat_action_probability=0.0, terminal_on_life_loss=False)
    train, evaluation = make_env(game, training=True, atari=opts), make_env(game, training=False, atari=opts)
    train.reset(seed=2)
    evaluation.reset(seed=2)
    rng = np.random.default_rng(2)
    raw, clipped = [], []
    for _ in range(300):
        action = int(rng.integers(train.action_space.n))
        clipped.append(train.step(action)[1])
        raw.append(evaluation.step(action)[1])
    raw, clipped = np.array(raw), np.array(clipped)
    assert raw.max() > 1  # the comparison saw unclipped scores
    np.testing.assert_array_equal(clipped, np.sign(raw))


def test_env_step_gymnasium_returns_uint8_and_the_games_raw_scores():
    spec = env_spec(BREAKOUT, AtariOptions(repeat_action_probability=0.0))
    env = EnvStepGymnasium(spec, 2, seed=0)
    obs = env.reset()
    assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
    rng = np.random.default_rng(0)
    lives_lost, games = 0, []
    for _ in range(1500):
        out = env.step(rng.integers(0, 4, 2))
        PRIMITIVES["EnvStep"].check("outputs", out, dims(spec, 2))
        lives_lost += int(out["terminated"].sum())
        games += env.finished
    assert games and lives_lost >= 5 * len(games)  # episodes for the learner are lives, reported episodes games
    assert all(length > 20 for _, length in games)


# --- EnvStep/ale-vector ----------------------------------------------------------------------------
def test_ale_vector_serves_ale_ids_only():
    impl = get("EnvStep", "ale-vector")
    cartpole = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())
    assert "ALE/" in impl.unsupported(cartpole)
    with pytest.raises(HetrlError, match="Atari"):
        build("EnvStep", Slot("ale-vector", "cpu"), cartpole, 0, num_envs=1)
    assert impl.unsupported(make_algorithm("dqn", env_spec(BREAKOUT), DQNConfig())) is None


def test_ale_vector_equals_the_gymnasium_backend_on_the_same_frames():
    """No no-ops and no sticky actions: both emulators play the same frames. The frame stacks
    differ in their first three steps (zeros against repeats of the first frame) and after a lost
    life (the gymnasium backend's no-op step), so frames are compared up to the first lost life."""
    opts = AtariOptions(repeat_action_probability=0.0, noop_max=0)
    spec = env_spec(BREAKOUT, opts)
    ours, ref = EnvStepAleVector(BREAKOUT, 1, 0, opts), EnvStepGymnasium(spec, 1, 0)
    first, first_ref = ours.reset(), ref.reset()
    assert first.shape == first_ref.shape == (1, 4, 84, 84) and first.dtype == first_ref.dtype == np.uint8
    np.testing.assert_array_equal(first[0, -1], first_ref[0, -1])  # the newest frame
    rng = np.random.default_rng(0)
    compared = 0
    for t in range(1000):
        actions = rng.integers(0, 4, 1)
        out, out_ref = ours.step(actions), ref.step(actions)
        PRIMITIVES["EnvStep"].check("outputs", out, dims(spec, 1))
        assert (out["rewards"] == out_ref["rewards"]).all() and (out["terminated"] == out_ref["terminated"]).all()
        if t >= 3:
            np.testing.assert_array_equal(out["final_obs"], out_ref["final_obs"])
            compared += 1
        if out["terminated"].any():
            break
        if t >= 3:
            np.testing.assert_array_equal(out["next_obs"], out_ref["next_obs"])
    assert out["terminated"].all() and compared > 10  # both ended the learner's episode at the same lost life


def test_ale_vector_episode_structure():
    """Lost lives end the learner's episodes, the game goes on, games end with a same-step reset
    and their true last observation; ``finished`` holds raw game scores."""
    n = 2
    env = EnvStepAleVector(BREAKOUT, n, 0, AtariOptions())
    spec = env_spec(BREAKOUT)
    env.reset()
    rng = np.random.default_rng(0)
    lives_lost, games = 0, []
    for _ in range(1500):
        out = env.step(rng.integers(0, 4, n))
        PRIMITIVES["EnvStep"].check("outputs", out, dims(spec, n))
        assert set(np.unique(out["rewards"])) <= {0.0, 1.0}
        lives_lost += int(out["terminated"].sum())
        for i in np.flatnonzero(out["terminated"] | out["truncated"]):
            reset = not np.array_equal(out["final_obs"][i], out["next_obs"][i])
            assert reset == (len(env.finished) > 0 and env.lives[i] == 5)  # only a game's end resets
            if reset:  # the new game's first stack: zeros, then its first frame
                assert (out["next_obs"][i, :-1] == 0).all() and out["next_obs"][i, -1].any()
        games += env.finished
    assert games and lives_lost >= 5 * len(games)
    assert all(length > 20 and score >= 0 for score, length in games)
    env.close()


# --- errors ----------------------------------------------------------------------------------------
def test_unknown_game_is_a_one_line_error():
    with pytest.raises(HetrlError, match="unknown environment 'ALE/NoSuchGame-v5'"):
        make_env("ALE/NoSuchGame-v5")


def test_bad_atari_settings_are_refused():
    with pytest.raises(HetrlError, match="repeat_action_probability"):
        make_env(BREAKOUT, atari=AtariOptions(repeat_action_probability=1.5))


@pytest.mark.parametrize("env_id, module", [("MinAtar/Breakout-v1", "minatar"), (BREAKOUT, "ale_py")])
def test_missing_extra_is_one_line_naming_it(env_id, module, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pixels, "_registered", set())
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    assert main(["train", "dqn", env_id, "--steps", "100", "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "hetrl[pixels]" in err and len(err.splitlines()) == 1, err


def test_atari_settings_reach_the_spec():
    cfg = make_config("dqn", BREAKOUT, overrides=["repeat_action_probability=0", "atari.frame_stack=2"])
    assert cfg.atari.repeat_action_probability == 0.0 and cfg.atari.frame_stack == 2
    assert env_spec(cfg.env, cfg.atari).obs_shape == (2, 84, 84)
    with pytest.raises(HetrlError, match="no such setting"):
        make_config("dqn", BREAKOUT, overrides=["atari.lr=1"])


def test_ddpg_refuses_image_observations():
    from hetrl.algos import DDPGConfig

    with pytest.raises(HetrlError, match="MLP networks only.*train dqn"):
        make_algorithm("ddpg", env_spec("MinAtar/Breakout-v1"), DDPGConfig())


# --- end to end --------------------------------------------------------------------------------------
def test_train_dqn_on_minatar_end_to_end(tmp_path):
    run = tmp_path / "minatar"
    assert main(["train", "dqn", "MinAtar/Breakout-v1", "--steps", "2000", "--plan", "rule", "--run-dir", str(run),
                 "--set", "eval_episodes=3", "--no-progress"]) == 0
    import json

    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 2000 and summary["placement"]["Act"].startswith("numba")  # the rule's, for MinAtar's network
    assert (run / "checkpoints" / "step_0000002000.pt").exists()
