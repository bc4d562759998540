"""A user's own env: one whose constructor has no render_mode."""

import envs_custom

from hetrl.envs import env_spec, make_env


def test_an_env_whose_constructor_takes_no_render_mode_is_made():
    env = make_env(envs_custom.ID)
    assert env.reset(seed=0)[0].shape == (5,)
    assert env_spec(envs_custom.ID).obs_shape == (5,)
