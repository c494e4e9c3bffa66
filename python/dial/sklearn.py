"""Hyperparameter search for scikit-learn estimators, run by Dial::

    from dial.sklearn import DialSearchCV
    from sklearn.svm import SVC

    search = DialSearchCV(SVC(), {
        "C": {"float": {"min": 1e-2, "max": 1e3, "scale": "LOG"}},
        "gamma": {"float": {"min": 1e-5, "max": 1e-1, "scale": "LOG"}},
        "kernel": ["rbf", "sigmoid"],
    }, n_trials=30, cv=5, random_state=0)
    search.fit(X, y)
    search.best_params_, search.best_score_, search.predict(X_test)

It behaves like ``RandomizedSearchCV``: every trial scores one parameter
setting by cross-validation, on the same folds for all trials, and the best
is refitted on all the data. The settings come from a Dial study (default
searcher: ``bayesian``) over ask/tell: on the scheduler of ``client`` (a
``dial.Client`` or an address), or, without one, on a ``dial-scheduler``
this process starts for the fit and stops after it
(``dial.LocalScheduler``). With ``enable_pruning`` an estimator with
``partial_fit`` is trained epoch by epoch, the mean fold score reported
after each, and the study's trial scheduler stops weak settings early.

Needs scikit-learn (Debian: python3-sklearn); ``import dial`` does not.
"""
from __future__ import annotations

import copy
import numbers
import threading
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, \
    is_classifier
from sklearn.metrics import check_scoring, get_scorer
from sklearn.model_selection import check_cv, cross_validate
from sklearn.utils import _safe_indexing, check_random_state
from sklearn.utils.metaestimators import available_if

from ._client import Client, Trial, connect
from ._errors import Pruned
from ._local import LocalScheduler
from .v1 import spec_pb2

__all__ = ["DialSearchCV"]

_DOMAINS = ("float", "int", "categorical", "discrete")


def _estimator_has(name: str):
    """For available_if: the fitted best estimator, else the template."""
    def check(self: "DialSearchCV") -> bool:
        target = getattr(self, "best_estimator_", self.estimator)
        return hasattr(target, name)
    return check


def _search_space(distributions: Any) -> Tuple[List[dict], Dict[str, dict]]:
    """param_distributions as a Dial search space, and for parameters
    given as a list of Python values, each value's label -> the value."""
    if isinstance(distributions, (list, tuple)):
        entries = [dict(e) for e in distributions]
        for i, e in enumerate(entries):
            if not isinstance(e.get("name"), str):
                raise ValueError(f"param_distributions[{i}]: a Dial parameter "
                                 "spec needs a 'name'")
        return entries, {}
    if not isinstance(distributions, Mapping) or not distributions:
        raise ValueError("param_distributions: expected a non-empty dict of "
                         "Dial parameter specs (or of lists of values), or "
                         "a Dial search space (a list of specs)")
    space, choices = [], {}
    for name, spec in distributions.items():
        if isinstance(spec, Mapping):
            if not any(d in spec for d in _DOMAINS):
                raise ValueError(
                    f"param_distributions['{name}']: a Dial parameter spec "
                    f"needs one of {', '.join(_DOMAINS)}, e.g. "
                    "{'float': {'min': 0.01, 'max': 10, 'scale': 'LOG'}}")
            space.append({"name": name, **spec})
        elif isinstance(spec, (list, tuple)) and spec:
            labels = {}
            for value in spec:
                label = value if isinstance(value, str) else repr(value)
                if label in labels:
                    raise ValueError(f"param_distributions['{name}']: "
                                     f"{value!r} is listed twice")
                labels[label] = value
            space.append({"name": name,
                          "categorical": {"values": list(labels)}})
            choices[name] = labels
        else:
            raise ValueError(
                f"param_distributions['{name}']: expected a Dial parameter "
                f"spec (a dict) or a non-empty list of values, not {spec!r}")
    return space, choices


def _scorers(estimator: Any, scoring: Any, refit: Any
             ) -> Tuple[Dict[str, Any], str, bool]:
    """{name: scorer}, the name the study maximises, multi-metric."""
    if scoring is None or isinstance(scoring, str) or callable(scoring):
        return {"score": check_scoring(estimator, scoring)}, "score", False
    if isinstance(scoring, (list, tuple, set)):
        scorers = {name: get_scorer(name) for name in scoring}
    elif isinstance(scoring, Mapping):
        scorers = {k: get_scorer(v) if isinstance(v, str) else v
                   for k, v in scoring.items()}
    else:
        raise ValueError(f"scoring: expected None, a name, a callable, a "
                         f"list or a dict, not {type(scoring).__name__}")
    if not isinstance(refit, str) or refit not in scorers:
        raise ValueError(
            f"refit: with several scorers, name the one to maximise and "
            f"refit on (one of {', '.join(sorted(scorers))}), not {refit!r}")
    return scorers, refit, True


class DialSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Cross-validated search over ``param_distributions`` with a Dial
    study, as ``RandomizedSearchCV`` (docs/python.md, "scikit-learn").

    Args:
      estimator: the scikit-learn estimator to tune (cloned per trial).
      param_distributions: ``{name: Dial parameter spec}`` (``{"float":
        {"min": 1e-3, "max": 1, "scale": "LOG"}}``, ``{"int": ...}``,
        ``{"categorical": {"values": [...]}}``, with an optional ``when``),
        ``{name: [values]}`` for a choice among any Python values, or a
        Dial search space (a list of specs with ``name``).
      n_trials: settings to try (the study's ``budget.max_trials``).
      scoring, cv, refit, error_score, return_train_score: as in
        ``RandomizedSearchCV``. With several scorers ``refit`` names the
        one the study maximises.
      n_jobs: trials evaluated at once (threads; -1: one per CPU).
      timeout: seconds after which no new trial starts.
      random_state: the searcher's seed.
      searcher: a Dial searcher's name (``"bayesian"``, ``"tpe"``,
        ``"random"``, ``"cmaes"``, ...) or its spec (``{"tpe": {...}}``).
      enable_pruning: train with ``partial_fit`` for ``max_iter`` epochs,
        reporting the mean fold score after each so that ``scheduler``
        can stop the trial. ``scheduler``: a Dial trial scheduler spec
        (default ``{"asha": {"min_steps": max(1, max_iter // 9),
        "max_steps": max_iter, "reduction_factor": 3}}``); schedulers that
        pause trials are refused.
      client: a ``dial.Client``, or a scheduler address for
        ``dial.connect``; None starts a local scheduler for each fit.
      study_name: the study's name (default ``sklearn-<estimator>-<id>``).
    """

    def __init__(self, estimator: Any, param_distributions: Any, *,
                 n_trials: int = 10, scoring: Any = None, cv: Any = None,
                 refit: Any = True, n_jobs: Optional[int] = 1,
                 timeout: Optional[float] = None, random_state: Any = None,
                 searcher: Any = "bayesian", enable_pruning: bool = False,
                 max_iter: int = 100, scheduler: Optional[dict] = None,
                 error_score: Any = np.nan, return_train_score: bool = False,
                 client: Any = None, study_name: Optional[str] = None,
                 verbose: int = 0):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_trials = n_trials
        self.scoring = scoring
        self.cv = cv
        self.refit = refit
        self.n_jobs = n_jobs
        self.timeout = timeout
        self.random_state = random_state
        self.searcher = searcher
        self.enable_pruning = enable_pruning
        self.max_iter = max_iter
        self.scheduler = scheduler
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.client = client
        self.study_name = study_name
        self.verbose = verbose

    # -- the spec ---------------------------------------------------------
    def _check(self) -> int:
        if not isinstance(self.n_trials, numbers.Integral) or \
                self.n_trials < 1:
            raise ValueError(f"n_trials: must be a positive integer, not "
                             f"{self.n_trials!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout: must be positive seconds or None, "
                             f"not {self.timeout!r}")
        jobs = self.n_jobs or 1
        if jobs == -1:
            import os
            jobs = os.cpu_count() or 1
        if not isinstance(jobs, numbers.Integral) or jobs < 1:
            raise ValueError(f"n_jobs: must be a positive integer or -1, "
                             f"not {self.n_jobs!r}")
        if self.enable_pruning:
            if not hasattr(self.estimator, "partial_fit"):
                raise ValueError(
                    f"enable_pruning: {type(self.estimator).__name__} has no "
                    "partial_fit to train epoch by epoch")
            if not isinstance(self.max_iter, numbers.Integral) or \
                    self.max_iter < 1:
                raise ValueError(f"max_iter: must be a positive integer, not "
                                 f"{self.max_iter!r}")
        return int(jobs)

    def _searcher_spec(self) -> dict:
        spec = self.searcher
        if isinstance(spec, str):
            fields = spec_pb2.SearcherSpec.DESCRIPTOR.fields_by_name
            if spec not in fields:
                raise ValueError(f"searcher: no Dial searcher '{spec}' (one "
                                 f"of {', '.join(sorted(fields))})")
            spec = {spec: {}}
        if not isinstance(spec, Mapping) or len(spec) != 1:
            raise ValueError("searcher: expected a searcher's name or a "
                             "one-key dict such as {'tpe': {'seed': 1}}")
        spec = copy.deepcopy(dict(spec))
        (name, options), = spec.items()
        if self.random_state is not None and isinstance(options, dict):
            message = spec_pb2.SearcherSpec.DESCRIPTOR.fields_by_name.get(name)
            if message is not None and message.message_type is not None and \
                    "seed" in message.message_type.fields_by_name:
                seed = self.random_state
                if not isinstance(seed, numbers.Integral):
                    seed = check_random_state(seed).randint(2**31 - 1)
                options.setdefault("seed", int(seed))
        return spec

    def _scheduler_spec(self) -> Optional[dict]:
        if not self.enable_pruning:
            return None
        spec = self.scheduler or {"asha": {
            "min_steps": max(1, self.max_iter // 9),
            "max_steps": int(self.max_iter), "reduction_factor": 3}}
        # The kind is the key beside the optional rank_check guard.
        kind = next((k for k in spec if k != "rank_check"), "")
        options = spec.get(kind) or {}
        if (kind == "asha" and options.get("promotion")) or \
                (kind == "hyperband" and options.get("synchronous")) or \
                kind == "pbt":
            raise ValueError(
                f"scheduler: {kind} pauses or exploits trials, which "
                "DialSearchCV cannot resume in its process; use a stopping "
                "scheduler (median, asha, hyperband, curve)")
        return spec

    # -- fitting ----------------------------------------------------------
    def fit(self, X: Any, y: Any = None, groups: Any = None,
            **fit_params: Any) -> "DialSearchCV":
        """Runs the study, then refits the best setting on all of X."""
        jobs = self._check()
        space, choices = _search_space(self.param_distributions)
        scorers, objective, multi = _scorers(self.estimator, self.scoring,
                                             self.refit)
        cv = check_cv(self.cv, y, classifier=is_classifier(self.estimator))
        splits = list(cv.split(X, y, groups))
        name = self.study_name or "sklearn-{}-{}".format(
            type(self.estimator).__name__.lower(), uuid.uuid4().hex[:8])
        spec = {"name": name,
                "objective": {"metric": objective, "goal": "MAXIMIZE"},
                "search_space": space, "searcher": self._searcher_spec(),
                "budget": {"max_trials": int(self.n_trials),
                           "max_parallel_trials": min(jobs, self.n_trials)}}
        scheduler = self._scheduler_spec()
        if scheduler is not None:
            spec["scheduler"] = scheduler
        run = _Run(self, X, y, splits, scorers, objective, choices,
                   fit_params)
        local = None
        client = self.client
        try:
            if client is None:
                local = LocalScheduler().start()
                client = local.client
            elif isinstance(client, str):
                client = connect(client)
            study = client.create_study(spec)
            study.optimize(run.evaluate, n_trials=int(self.n_trials),
                           n_jobs=jobs, timeout=self.timeout)
        finally:
            if local is not None:
                local.close()
            elif client is not self.client:
                client.close()
        self.study_name_ = name
        self.multimetric_ = multi
        self.scorer_ = scorers if multi else scorers["score"]
        self.n_splits_ = len(splits)
        self._results(run.records, space, objective)
        if self.refit:
            start = time.monotonic()
            self.best_estimator_ = clone(self.estimator).set_params(
                **self.best_params_)
            if y is None:
                self.best_estimator_.fit(X, **fit_params)
            else:
                self.best_estimator_.fit(X, y, **fit_params)
            self.refit_time_ = time.monotonic() - start
        return self

    def _results(self, records: Dict[int, dict], space: List[dict],
                 objective: str) -> None:
        """cv_results_, best_index_, best_params_, best_score_."""
        numbers_ = sorted(records)
        rows = [records[n] for n in numbers_]
        if not any(r["state"] == "COMPLETED" for r in rows):
            raise ValueError(
                f"no trial of study '{self.study_name or ''}' completed "
                f"({len(rows)} finished): see the warnings, or set "
                "error_score='raise' to see the first error")
        results: Dict[str, Any] = {
            "trial_number": np.array(numbers_),
            "state": np.array([r["state"] for r in rows], dtype=object),
            "n_epochs": np.array([r["epochs"] for r in rows]),
            "params": [r["params"] for r in rows]}
        for p in space:
            column = np.ma.MaskedArray(np.empty(len(rows), dtype=object),
                                       mask=True)
            for i, r in enumerate(rows):
                if p["name"] in r["params"]:
                    column[i] = r["params"][p["name"]]
            results["param_" + p["name"]] = column
        for key in ("fit_time", "score_time"):
            values = np.array([r[key] for r in rows])
            results["mean_" + key] = values.mean(axis=1)
            results["std_" + key] = values.std(axis=1)
        completed = np.array([r["state"] == "COMPLETED" for r in rows])
        for metric in rows[0]["test"]:
            sets = ("test", "train") if self.return_train_score else ("test",)
            suffix = "score" if metric == "score" else metric
            for which in sets:
                scores = np.array([r[which][metric] for r in rows])
                for k in range(scores.shape[1]):
                    results[f"split{k}_{which}_{suffix}"] = scores[:, k]
                results[f"mean_{which}_{suffix}"] = scores.mean(axis=1)
                results[f"std_{which}_{suffix}"] = scores.std(axis=1)
            # Completed trials rank first; stopped and failed ones after.
            mean = results[f"mean_test_{suffix}"]
            key = np.where(np.isnan(mean), -np.inf, mean)
            order = np.lexsort((-key, ~completed))
            rank = np.empty(len(rows), dtype=np.int32)
            rank[order] = np.arange(1, len(rows) + 1)
            results[f"rank_test_{suffix}"] = rank
        suffix = "score" if objective == "score" else objective
        self.cv_results_ = results
        self.best_index_ = int(np.argmin(results[f"rank_test_{suffix}"]))
        self.best_params_ = dict(rows[self.best_index_]["params"])
        self.best_score_ = float(results[f"mean_test_{suffix}"][
            self.best_index_])
        self.n_trials_ = len(rows)

    # -- the fitted estimator ---------------------------------------------
    def _fitted(self) -> Any:
        if not hasattr(self, "best_estimator_"):
            from sklearn.exceptions import NotFittedError
            raise NotFittedError(
                "DialSearchCV: not fitted with refit; call fit (with "
                "refit=True) first")
        return self.best_estimator_

    @property
    def _estimator_type(self) -> Optional[str]:
        return getattr(self.estimator, "_estimator_type", None)

    @property
    def classes_(self) -> Any:
        return self._fitted().classes_

    @property
    def n_features_in_(self) -> int:
        return self._fitted().n_features_in_

    @available_if(_estimator_has("predict"))
    def predict(self, X: Any) -> Any:
        return self._fitted().predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X: Any) -> Any:
        return self._fitted().predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X: Any) -> Any:
        return self._fitted().predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X: Any) -> Any:
        return self._fitted().decision_function(X)

    @available_if(_estimator_has("transform"))
    def transform(self, X: Any) -> Any:
        return self._fitted().transform(X)

    @available_if(_estimator_has("inverse_transform"))
    def inverse_transform(self, X: Any) -> Any:
        return self._fitted().inverse_transform(X)

    def score(self, X: Any, y: Any = None) -> float:
        """The refit scorer on the best estimator (as RandomizedSearchCV)."""
        estimator = self._fitted()
        scorer = self.scorer_[self.refit] if self.multimetric_ \
            else self.scorer_
        return float(scorer(estimator, X, y))

    def __getstate__(self) -> Dict[str, Any]:
        # A connection does not travel: the unpickled object predicts, and
        # a new fit starts a local scheduler unless given a client again.
        state = dict(self.__dict__)
        if isinstance(state.get("client"), Client):
            state["client"] = None
        return state


class _Run:
    """One fit's trials: evaluates them and keeps their CV results."""

    def __init__(self, search: DialSearchCV, X: Any, y: Any,
                 splits: List[Tuple[np.ndarray, np.ndarray]],
                 scorers: Dict[str, Any], objective: str,
                 choices: Dict[str, dict], fit_params: Dict[str, Any]):
        self.search, self.X, self.y, self.splits = search, X, y, splits
        self.scorers, self.objective = scorers, objective
        self.choices, self.fit_params = choices, fit_params
        self.records: Dict[int, dict] = {}
        self.lock = threading.Lock()
        self.classes = np.unique(y) if y is not None and is_classifier(
            search.estimator) else None

    def params(self, trial: Trial) -> Dict[str, Any]:
        out = {}
        for name, value in trial.params.items():
            labels = self.choices.get(name)
            out[name] = labels[value] if labels is not None else value
        return out

    def evaluate(self, trial: Trial) -> Dict[str, float]:
        params = self.params(trial)
        estimator = clone(self.search.estimator).set_params(**params)
        record = {"params": params, "state": "COMPLETED", "epochs": 0}
        try:
            if self.search.enable_pruning:
                self.epochs(trial, estimator, record)
            else:
                self.cross_validate(estimator, record)
        finally:
            if "test" in record:
                with self.lock:
                    self.records[trial.number] = record
        if self.search.verbose:
            print(f"DialSearchCV: trial {trial.number} {record['state']} "
                  f"{self.objective}={np.mean(record['test'][self.objective])}"
                  f" {params}")
        means = {m: float(np.mean(v)) for m, v in record["test"].items()}
        if not np.isfinite(means[self.objective]):
            record["state"] = "FAILED"
        return means

    def cross_validate(self, estimator: Any, record: dict) -> None:
        out = cross_validate(
            estimator, self.X, self.y, cv=self.splits, scoring=self.scorers,
            fit_params=self.fit_params, error_score=self.search.error_score,
            return_train_score=self.search.return_train_score)
        record["fit_time"] = list(out["fit_time"])
        record["score_time"] = list(out["score_time"])
        for which in ("test", "train"):
            if f"{which}_{self.objective}" in out:
                record[which] = {m: list(out[f"{which}_{m}"])
                                 for m in self.scorers}

    def epochs(self, trial: Trial, estimator: Any, record: dict) -> None:
        """partial_fit epoch by epoch on every fold, reporting the mean
        fold scores; raises dial.Pruned when the scheduler stops it."""
        folds = [clone(estimator) for _ in self.splits]
        parts = [(_safe_indexing(self.X, tr), _safe_indexing(self.y, tr),
                  _safe_indexing(self.X, te), _safe_indexing(self.y, te))
                 for tr, te in self.splits]
        extra = {} if self.classes is None else {"classes": self.classes}
        record["fit_time"] = [0.0] * len(folds)
        record["score_time"] = [0.0] * len(folds)
        train = self.search.return_train_score
        for epoch in range(1, int(self.search.max_iter) + 1):
            scores: Dict[str, List[float]] = {m: [] for m in self.scorers}
            train_scores: Dict[str, List[float]] = {m: [] for m in
                                                    self.scorers}
            for k, (est, (xtr, ytr, xte, yte)) in enumerate(zip(folds,
                                                                parts)):
                start = time.monotonic()
                est.partial_fit(xtr, ytr, **extra, **self.fit_params)
                record["fit_time"][k] += time.monotonic() - start
                start = time.monotonic()
                for m, scorer in self.scorers.items():
                    scores[m].append(float(scorer(est, xte, yte)))
                    if train:
                        train_scores[m].append(float(scorer(est, xtr, ytr)))
                record["score_time"][k] += time.monotonic() - start
            record["test"] = scores
            if train:
                record["train"] = train_scores
            record["epochs"] = epoch
            decision = trial.report(epoch, {
                m: float(np.mean(v)) for m, v in scores.items()})
            if decision.should_stop:
                record["state"] = "STOPPED"
                raise Pruned(decision.reason or "stopped by the scheduler")

