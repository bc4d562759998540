"""hetrl: fast, power-efficient deep reinforcement learning on heterogeneous hardware."""

__version__ = "0.1.0"
