"""How far a student's Q-values are from a teacher's: the loss both distillations in hetrl use, the
co-search's supernet (:mod:`hetrl.cosearch.search`) and a DQN learner with a teacher
(``teacher=RUN_DIR``, :class:`hetrl.algos.dqn.DQNConfig`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DISTILL = ("mse", "kl")


def distillation_loss(student_q: torch.Tensor, teacher_q: torch.Tensor, kind: str = "mse",
                      temperature: float = 1.0, q_variance: float = 1.0) -> torch.Tensor:
    """``mse``: the mean squared error between the student's and the teacher's Q-values (B, A) on
    every action, divided by ``q_variance``; ``kl``: ``T^2 KL(softmax(Q_teacher / T) ||
    softmax(Q_student / T))`` (policy distillation, Rusu et al. 2016; the ``T^2`` of Hinton et al.
    2015 keeps the gradient's size comparable across ``T``)."""
    if kind == "mse":
        return F.mse_loss(student_q, teacher_q) / q_variance
    if kind == "kl":
        t = temperature
        return F.kl_div(F.log_softmax(student_q / t, dim=1), F.log_softmax(teacher_q / t, dim=1), log_target=True,
                        reduction="batchmean") * t * t
    raise ValueError(f"distillation loss {kind!r}: one of {', '.join(DISTILL)}")
