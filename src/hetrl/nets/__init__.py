"""Networks. Policy networks carry a numpy forward beside the torch one, so acting on a host core
does not pay torch's per-operation overhead (an MLP of a few layers is overhead-bound at batch 1)."""

from hetrl.nets.mlp import Actor, Critic, GaussianActor, QNetwork, SDEActor, mlp, numpy_params

__all__ = ["Actor", "Critic", "GaussianActor", "QNetwork", "SDEActor", "mlp", "numpy_params"]
