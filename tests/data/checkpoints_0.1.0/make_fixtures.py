# How the fixtures were written, at 73806bf (hetrl 0.1.0 before the primitives package); expected.json by the policy network of each checkpoint on fixed observations.
import hetrl, shutil, os
common = dict(seed=3, progress=False, eval_every=0, eval_episodes=2, log_every=100, checkpoint_every=10_000, hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=400)
if __name__ == "__main__":
    hetrl.train("dqn", "CartPole-v1", steps=500, run_dir="/tmp/fixt/dqn_inline", plan="rule", train_every=4, replay_ratio=0.5, target_update_every=16, prioritized=True, n_step=3, **common)
    hetrl.train("td3", "Pendulum-v1", steps=500, run_dir="/tmp/fixt/td3_inline", plan="rule", **common)
    hetrl.train("dqn", "CartPole-v1", steps=600, run_dir="/tmp/fixt/dqn_local", plan="rule", executor="local", actors=1, **common)
