"""Early stopping of XGBoost training by Dial's trial schedulers::

    import xgboost as xgb
    from dial.xgboost import PruningCallback

    def objective(trial):                        # study.optimize
        booster = xgb.train(
            {"eta": trial.params["eta"], "objective": "binary:logistic"},
            dtrain, num_boost_round=200, evals=[(dvalid, "validation")],
            callbacks=[PruningCallback(trial, "validation-logloss")])
        return booster.best_score ...

After every boosting round the callback reports the round's evaluation
metric (step = rounds done) to the trial; when Dial answers STOP,
training ends. For an ask/tell ``dial.Trial`` (``study.optimize``), STOP
raises ``dial.Pruned`` out of ``xgboost.train``, and ``optimize`` completes
the STOPPED trial with its last report. In a program that ``dial-worker``
runs (no ``trial`` given: ``dial.trial``), STOP or PAUSE ends the
training loop normally: ``xgboost.train`` returns the booster so far.

Needs XGBoost (Debian: python3-xgboost); ``import dial`` does not.
"""
from __future__ import annotations

from typing import Any, Optional

import xgboost

from . import trial as _worker_trial
from ._client import Trial
from ._errors import Pruned
from ._types import Decision

__all__ = ["PruningCallback"]


class PruningCallback(xgboost.callback.TrainingCallback):
    """Reports each round's ``observation_key`` metric to a Dial trial and
    ends training when the scheduler says so.

    Args:
      trial: a ``dial.Trial`` from ``study.ask``/``study.optimize``, or
        None in a program run by ``dial-worker`` (reports go through
        ``dial.trial.report``).
      observation_key: ``"<evals name>-<metric>"`` as in XGBoost's
        evaluation log, e.g. ``"validation-logloss"``; with ``xgboost.cv``,
        ``"test-logloss"`` (the mean over folds is reported).
      metric: the name the value is reported under (default: the metric
        part of ``observation_key``, e.g. ``"logloss"``): the study's
        objective metric, so that its scheduler ranks on it.
      raise_pruned: for a ``dial.Trial``, raise ``dial.Pruned`` on STOP
        (default) rather than just end training.

    After training, ``rounds`` is the number of rounds reported and
    ``decision`` the last decision.
    """

    def __init__(self, trial: Optional[Trial] = None,
                 observation_key: str = "validation-logloss", *,
                 metric: Optional[str] = None, raise_pruned: bool = True):
        super().__init__()
        data, sep, name = observation_key.partition("-")
        if not sep or not data or not name:
            raise ValueError(
                f"observation_key: expected '<evals name>-<metric>' such as "
                f"'validation-logloss', not {observation_key!r}")
        self.trial = trial
        self.observation_key = observation_key
        self._data, self._name = data, name
        self.metric = metric or name
        self.raise_pruned = raise_pruned
        self.rounds = 0
        self.decision: Optional[Decision] = None

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        try:
            history = evals_log[self._data][self._name]
        except KeyError:
            keys = [f"{d}-{m}" for d in evals_log for m in evals_log[d]]
            raise ValueError(
                f"observation_key: '{self.observation_key}' is not in "
                f"XGBoost's evaluation log (it has "
                f"{', '.join(keys) or 'nothing'}): pass evals=[(dmatrix, "
                "name)] and an eval_metric") from None
        value = history[-1]
        if isinstance(value, tuple):  # xgboost.cv: (mean, std)
            value = value[0]
        step = epoch + 1
        self.rounds = step
        if self.trial is not None:
            self.decision = self.trial.report(step, {self.metric:
                                                     float(value)})
            if self.decision.should_stop and self.raise_pruned:
                raise Pruned(f"stopped by the scheduler at round {step}: "
                             f"{self.decision.reason}")
        else:
            self.decision = _worker_trial.report(step, {self.metric:
                                                        float(value)})
        return self.decision.should_exit
