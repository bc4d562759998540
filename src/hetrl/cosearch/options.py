"""The co-search's choices by name, importable without torch (the CLI's parser reads them)."""

MODES = ("one-level", "bi-level")  # weights and architecture on the same batch, or on separate splits (DARTS)
DISTILL = ("mse", "kl")  # distillation losses: hetrl.algos.distillation.DISTILL (a test keeps them equal), here torch-free
SOURCES = ("auto", "replay", "play")  # where the teacher's states come from (hetrl.cosearch.teacher)
FPGA_SEARCH = ("joint", "fixed")  # the FPGA model's accelerator: searched with the agent, or an equal share per layer
COST_BACKENDS = ("numba", "numpy", "torch")  # what times a measured cpu cost (hetrl.cosearch.cost.measure_op_latency); cuda: torch
