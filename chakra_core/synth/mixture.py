"""Gaussian mixtures over (log2 NPUs, values...) that are sampled conditionally on the NPU count.

Every continuous generator of the synthesizer is one of these: the first dimension is log2
of the job's NPU count, the others the modelled values in log space (message bytes, gap
microseconds and node counts, sequence length, ...). Sampling fixes the first dimension at
the target count and draws the rest from each component's conditional Gaussian, so a
component whose values grow with the NPU count carries that trend to counts never seen in
training (interpolation between them, log-linear extrapolation beyond). Samples are clamped
to the training range (`low` / `high`) widened by CLAMP_MARGIN, plus the trend times how far
the target count lies outside the counts seen. Every value dimension is log2 (bytes, µs,
node counts, lengths), so the margin is a factor 2.

Fitted with scikit-learn (full covariances), the component count chosen by BIC.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_COMPONENTS = 10
FIT_ROWS = 3000  # larger training sets are subsampled for fitting (the BIC search is the cost)
REG_COVAR = 1e-6  # small: recurring exact values (a layer's gradient bytes) stay sharp components
CLAMP_MARGIN = 1.0  # log2 units beyond the training range a sample may go (a factor 2)
TREND_MIN_VAR = 0.01  # a component whose log2-NPU variance is below this was fitted at one NPU count


class Mixture(BaseModel):
    """A fitted mixture: weights (k), means (k x d), full covariances (k x d x d), the
    training range per dimension (low, high) and the trend of each value on log2 NPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: list[float] = Field(min_length=1)
    means: list[list[float]]
    covariances: list[list[list[float]]]
    low: list[float]
    high: list[float]
    # per value dimension: the slope on log2 NPUs over all training rows, used by components
    # fitted at a single NPU count (they have no trend of their own)
    trend: list[float]

    @model_validator(mode="after")
    def _shapes(self) -> Mixture:
        k, d = len(self.weights), len(self.low)
        if d < 2 or len(self.high) != d:
            raise ValueError(f"low and high need one bound per dimension (at least 2), got {len(self.low)} and "
                             f"{len(self.high)}")
        if len(self.means) != k or any(len(m) != d for m in self.means):
            raise ValueError(f"means must be {k} x {d}")
        if len(self.covariances) != k or any(len(c) != d or any(len(row) != d for row in c) for c in self.covariances):
            raise ValueError(f"covariances must be {k} x {d} x {d}")
        w = np.asarray(self.weights)
        if (w < 0).any() or not np.isfinite(w).all() or abs(w.sum() - 1) > 1e-6:
            raise ValueError("weights must be non-negative and sum to 1")
        for c in self.covariances:
            cov = np.asarray(c)
            if not np.isfinite(cov).all() or not np.allclose(cov, cov.T):
                raise ValueError("covariances must be finite and symmetric")
            np.linalg.cholesky(cov)  # raises LinAlgError (a ValueError) when not positive definite
        if len(self.trend) != d - 1 or not np.isfinite(self.trend).all():
            raise ValueError(f"trend needs {d - 1} finite slopes")
        if not np.isfinite(self.means).all() or (np.asarray(self.low) > np.asarray(self.high)).any():
            raise ValueError("means must be finite and low <= high")
        return self

    @property
    def dims(self) -> int:
        return len(self.low)

    @property
    def components(self) -> int:
        return len(self.weights)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The most likely component of each row (n x d)."""
        if self.components == 1:
            return np.zeros(len(x), np.int64)
        return np.argmax(self._log_density(x, slice(None)) + np.log(np.maximum(self.weights, 1e-300)), axis=1)

    def _log_density(self, x: np.ndarray, dims) -> np.ndarray:
        """(n x k) log N(x | component) over the selected dimensions."""
        x = np.atleast_2d(x)
        out = np.empty((len(x), self.components))
        for c in range(self.components):
            mean = np.asarray(self.means[c])[dims]
            cov = np.asarray(self.covariances[c])[np.ix_(np.arange(self.dims)[dims], np.arange(self.dims)[dims])]
            chol = np.linalg.cholesky(cov)
            z = np.linalg.solve(chol, (x - mean).T)
            out[:, c] = -0.5 * (z * z).sum(axis=0) - np.log(np.diag(chol)).sum() - 0.5 * len(mean) * np.log(2 * np.pi)
        return out

    def conditional_weights(self, x0: float) -> np.ndarray:
        """P(component | first dimension = x0)."""
        logp = self._log_density(np.array([[x0]]), slice(0, 1))[0] + np.log(np.maximum(self.weights, 1e-300))
        p = np.exp(logp - logp.max())
        return p / p.sum()

    def sample(self, x0: float, rng: np.random.Generator, n: int = 1, component: np.ndarray | int | None = None
               ) -> np.ndarray:
        """n draws (n x (d-1)) of the other dimensions given the first = x0, from the given
        component(s), or from components drawn by their conditional weights."""
        if component is None:
            component = rng.choice(self.components, size=n, p=self.conditional_weights(x0))
        component = np.broadcast_to(np.asarray(component, np.int64), (n,))
        out = np.empty((n, self.dims - 1))
        for c in np.unique(component).tolist():
            rows = np.flatnonzero(component == c)
            mean, cov = np.asarray(self.means[c]), np.asarray(self.covariances[c])
            if cov[0, 0] >= TREND_MIN_VAR:  # the component spans NPU counts: its own regression on log2 NPUs
                gain = cov[1:, 0] / cov[0, 0]
                cond_cov = cov[1:, 1:] - np.outer(gain, cov[0, 1:])
            else:
                gain = np.asarray(self.trend)
                cond_cov = cov[1:, 1:]
            cond_mean = mean[1:] + gain * (x0 - mean[0])
            cond_cov = (cond_cov + cond_cov.T) / 2 + np.eye(self.dims - 1) * 1e-12
            out[rows] = rng.multivariate_normal(cond_mean, cond_cov, size=len(rows), method="cholesky")
        outside = max(0.0, x0 - self.high[0], self.low[0] - x0)
        margin = CLAMP_MARGIN + np.abs(self.trend) * outside
        return np.clip(out, np.asarray(self.low[1:]) - margin, np.asarray(self.high[1:]) + margin)


def fit_mixture(x: np.ndarray, seed: int = 0, max_components: int = MAX_COMPONENTS,
                trend: np.ndarray | None = None) -> Mixture:
    """A mixture fitted to the rows of x (n x d, d >= 2, first column log2 NPUs); BIC picks k.
    `trend` replaces the slopes fitted on x (for a mixture of one NPU count, which has none)."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] < 2 or not len(x):
        raise ValueError(f"fit_mixture needs an n x d array with d >= 2 and n >= 1, got shape {x.shape}")
    rng = np.random.default_rng(seed)
    fit_rows = x[rng.choice(len(x), FIT_ROWS, replace=False)] if len(x) > FIT_ROWS else x
    distinct = len(np.unique(fit_rows.round(9), axis=0))
    low, high = x.min(axis=0), x.max(axis=0)
    spread = x[:, 0] - x[:, 0].mean()
    if trend is None:
        trend = (spread @ (x[:, 1:] - x[:, 1:].mean(axis=0)) / (spread @ spread)
                 if spread @ spread >= TREND_MIN_VAR * len(x) else np.zeros(x.shape[1] - 1))
    trend = np.asarray(trend, np.float64)
    if distinct == 1:  # one distinct row (scikit-learn needs two): a point with the floor variance
        return Mixture(weights=[1.0], means=[x[0].tolist()], covariances=[(np.eye(x.shape[1]) * REG_COVAR).tolist()],
                       low=low.tolist(), high=high.tolist(), trend=trend.tolist())
    from sklearn.mixture import GaussianMixture  # here, not at the top: scikit-learn takes about 1 s to import

    best, best_bic, worse = None, np.inf, 0
    for k in range(1, min(max_components, distinct) + 1):
        gmm = GaussianMixture(k, covariance_type="full", reg_covar=REG_COVAR, random_state=seed, n_init=1,
                              init_params="k-means++",
                              max_iter=200).fit(fit_rows)
        bic = gmm.bic(fit_rows)
        if bic < best_bic - 1e-9:
            best, best_bic, worse = gmm, bic, 0
        else:
            worse += 1
            if worse == 2:  # BIC rose twice in a row: more components only overfit
                break
    covariances = [((c + c.T) / 2).tolist() for c in best.covariances_]
    return Mixture(weights=(best.weights_ / best.weights_.sum()).tolist(), means=best.means_.tolist(),
                   covariances=covariances, low=low.tolist(), high=high.tolist(), trend=trend.tolist())
