"""Names of the tabular choices, in an import-light module so the CLI can build its parser
without importing numba, gymnasium or torch."""

ALGOS = ("q", "sarsa")  # Q-learning, SARSA
FORMATS = ("fp32", "int32")  # number formats of the Q-tables
ORDERS = ("sequential", "strided", "random")  # sampling orders of a unit over its shard
POLICIES = ("random", "epsilon-greedy")  # behaviour policies of `tabular collect`
