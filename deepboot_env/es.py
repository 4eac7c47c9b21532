"""The two numeric steps of the project's evolution strategies, shared by every search that uses them.

The ES trainer of the learned priority and tables (:mod:`agents.trainers.evolution`) and the
clairvoyant ``hindsight`` search (:mod:`baselines.hindsight`) both estimate a gradient from
antithetic pairs (:func:`antithetic_gradient`: ``theta +- sigma e``, the pair's difference along
``e``) and descend it with Adam (:func:`adam_update`). Pure numpy: no state but the arrays given.
"""

from __future__ import annotations

import numpy as np

ADAM_BETAS: tuple[float, float] = (0.9, 0.999)
"""Adam's decay rates of the first and second moments (Kingma and Ba's defaults)."""


def antithetic_gradient(plus: np.ndarray, minus: np.ndarray, eps: np.ndarray, sigma: float) -> np.ndarray:
    """The ES estimate of the fitness gradient from antithetic pairs' fitnesses (or shaped
    fitnesses): ``plus[i]`` at ``theta + sigma eps[i]``, ``minus[i]`` at ``theta - sigma eps[i]``."""
    return ((plus - minus)[:, None] * eps).sum(axis=0) / (2 * len(eps) * sigma)


def adam_update(
    theta: np.ndarray, m: np.ndarray, v: np.ndarray, step: int, grad: np.ndarray, lr: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam descent step along ``grad``: the new ``(theta, m, v)``; ``step`` counts the steps
    before this one (0 for the first: the bias corrections use ``step + 1``)."""
    beta1, beta2 = ADAM_BETAS
    m = beta1 * np.asarray(m, dtype=float) + (1 - beta1) * grad
    v = beta2 * np.asarray(v, dtype=float) + (1 - beta2) * grad**2
    t = step + 1
    move = lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + 1e-8)
    return np.asarray(theta, dtype=float) - move, m, v
