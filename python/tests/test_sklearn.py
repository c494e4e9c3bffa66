"""dial.sklearn.DialSearchCV against the real dial-scheduler (conftest.py):
on a scheduler given by address, and on the local one it starts itself;
scikit-learn's estimator contract (clone, get/set_params, pickle);
partial_fit with ASHA stopping weak settings early; clear errors."""
import os
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

import dial
from dial.sklearn import DialSearchCV

from conftest import SCHEDULER_BIN

SVC_SPACE = {"C": {"float": {"min": 1e-1, "max": 1e3, "scale": "LOG"}},
             "gamma": {"float": {"min": 1e-5, "max": 1e-1, "scale": "LOG"}},
             "class_weight": [None, "balanced"]}


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:600], y[:600]


@pytest.fixture
def local_binary(monkeypatch):
    """The build's dial-scheduler for searches without a client."""
    monkeypatch.setenv("DIAL_SCHEDULER_BIN", SCHEDULER_BIN)


def test_search_on_a_scheduler_records_every_trial_and_refits_the_best(
        start_scheduler, digits):
    X, y = digits
    scheduler = start_scheduler()
    search = DialSearchCV(SVC(), SVC_SPACE, n_trials=8, cv=3,
                          random_state=3, client=scheduler.address,
                          study_name="svc-digits", n_jobs=2)
    search.fit(X, y)

    results = search.cv_results_
    assert len(results["params"]) == 8
    assert list(results["state"]) == ["COMPLETED"] * 8
    best = int(np.argmax(results["mean_test_score"]))
    assert search.best_index_ == best
    assert results["rank_test_score"][best] == 1
    assert search.best_score_ == pytest.approx(
        np.mean([results[f"split{k}_test_score"][best] for k in range(3)]))
    assert search.best_params_ == results["params"][best]
    # A choice among Python values comes back as the value itself.
    assert {type(p["class_weight"]) for p in results["params"]} <= \
        {type(None), str}
    assert search.best_estimator_.get_params()["C"] == \
        search.best_params_["C"]
    assert search.score(X, y) == pytest.approx(
        np.mean(search.predict(X) == y))
    assert search.best_score_ > 0.9
    # The study holds the same trials and scores.
    with dial.connect(scheduler.address) as client:
        trials = list(client.study("svc-digits").trials())
    assert sorted(t.number for t in trials) == \
        list(results["trial_number"])
    by_number = {t.number: t for t in trials}
    for n, mean in zip(results["trial_number"], results["mean_test_score"]):
        assert by_number[n].state == "COMPLETED"
        assert by_number[n].value == pytest.approx(mean)


def test_a_local_scheduler_is_started_for_the_fit_and_stopped(
        local_binary, digits, monkeypatch):
    X, y = digits
    started = []
    original = dial.LocalScheduler.start

    def spy(self):
        started.append(self)
        return original(self)
    monkeypatch.setattr(dial.LocalScheduler, "start", spy)
    search = DialSearchCV(SVC(), SVC_SPACE, n_trials=4, cv=2, random_state=1)
    search.fit(X, y)
    assert len(search.cv_results_["params"]) == 4
    assert len({id(s) for s in started}) == 1
    local = started[0]
    assert local._proc is None  # stopped
    with dial.connect(local.address, timeout=2, retries=0) as client:
        with pytest.raises(dial.Unavailable):
            next(client.studies())


def test_clone_params_and_pickle(start_scheduler, digits):
    X, y = digits
    scheduler = start_scheduler()
    with dial.connect(scheduler.address) as client:
        search = DialSearchCV(SVC(), SVC_SPACE, n_trials=3, cv=2,
                              client=client, random_state=0)
        copy = clone(search)
        assert copy.get_params(deep=False).keys() == \
            search.get_params(deep=False).keys()
        assert copy.client is client
        copy.set_params(n_trials=5, estimator__kernel="linear")
        assert copy.n_trials == 5 and copy.estimator.kernel == "linear"
        assert search.estimator.kernel == "rbf"
        search.fit(X, y)
    restored = pickle.loads(pickle.dumps(search))
    assert restored.client is None  # the connection stays behind
    assert restored.best_params_ == search.best_params_
    np.testing.assert_array_equal(restored.predict(X), search.predict(X))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(client)


def test_partial_fit_with_asha_stops_weak_settings_early(
        start_scheduler, digits):
    X, y = digits
    scheduler = start_scheduler()
    search = DialSearchCV(
        SGDClassifier(random_state=0),
        {"alpha": {"float": {"min": 1e-5, "max": 10.0, "scale": "LOG"}}},
        n_trials=12, cv=StratifiedKFold(3), enable_pruning=True,
        max_iter=9, scheduler={"asha": {"min_steps": 1, "max_steps": 9,
                                       "reduction_factor": 3}},
        random_state=4, client=scheduler.address, study_name="sgd-asha",
        searcher="random")
    search.fit(X, y)
    results = search.cv_results_
    states = list(results["state"])
    assert "STOPPED" in states and "COMPLETED" in states
    for state, epochs in zip(states, results["n_epochs"]):
        assert epochs < 9 if state == "STOPPED" else epochs == 9
    # The best is a completed trial, and the scheduler saw every epoch.
    assert states[search.best_index_] == "COMPLETED"
    with dial.connect(scheduler.address) as client:
        study = client.study("sgd-asha")
        for n, epochs in zip(results["trial_number"], results["n_epochs"]):
            record = study.get_trial(int(n))
            assert [p.step for p in record.history] == \
                list(range(1, epochs + 1))


def test_bad_arguments_name_the_parameter(local_binary, digits):
    X, y = digits
    cases = [
        ({"param_distributions": {"C": {"uniform": [1, 2]}}},
         "param_distributions\\['C'\\]"),
        ({"param_distributions": {"C": 3}}, "param_distributions\\['C'\\]"),
        ({"param_distributions": {"k": ["a", "a"]}}, "listed twice"),
        ({"n_trials": 0}, "n_trials"),
        ({"searcher": "annealing"}, "searcher: no Dial searcher"),
        ({"enable_pruning": True}, "enable_pruning: SVC has no partial_fit"),
        ({"scoring": ["accuracy", "f1_macro"]}, "refit: with several"),
    ]
    for kwargs, message in cases:
        args = {"param_distributions": SVC_SPACE, **kwargs}
        with pytest.raises(ValueError, match=message):
            DialSearchCV(SVC(), **args).fit(X, y)
    with pytest.raises(ValueError, match="scheduler: asha pauses"):
        DialSearchCV(SGDClassifier(), {"alpha": [1e-4, 1e-3]},
                     enable_pruning=True,
                     scheduler={"asha": {"min_steps": 1, "max_steps": 9,
                                         "promotion": True}}).fit(X, y)
    # The rank_check guard beside the kind does not hide it.
    with pytest.raises(ValueError, match="scheduler: asha pauses"):
        DialSearchCV(SGDClassifier(), {"alpha": [1e-4, 1e-3]},
                     enable_pruning=True,
                     scheduler={"rank_check": {},
                                "asha": {"min_steps": 1, "max_steps": 9,
                                         "promotion": True}}).fit(X, y)
    # What only the scheduler checks comes back naming the spec's field.
    with pytest.raises(dial.InvalidArgument) as e:
        DialSearchCV(SVC(), {"C": {"float": {"min": 5, "max": 1}}}).fit(X, y)
    assert e.value.field.startswith("search_space[0].float")


def test_without_a_binary_the_error_says_what_to_do(monkeypatch, tmp_path,
                                                    digits):
    X, y = digits
    monkeypatch.setenv("DIAL_SCHEDULER_BIN", str(tmp_path / "missing"))
    with pytest.raises(dial.FailedPrecondition, match="DIAL_SCHEDULER_BIN"):
        DialSearchCV(SVC(), SVC_SPACE, n_trials=2).fit(X, y)
    assert os.listdir(tmp_path) == []


def test_multi_metric_scoring_maximises_the_refit_metric(local_binary,
                                                         digits):
    X, y = digits
    search = DialSearchCV(SVC(), SVC_SPACE, n_trials=4, cv=2,
                          scoring=["accuracy", "f1_macro"],
                          refit="f1_macro", random_state=2)
    search.fit(X, y)
    results = search.cv_results_
    assert "mean_test_accuracy" in results
    assert search.best_index_ == int(np.argmax(results["mean_test_f1_macro"]))
    assert results["rank_test_f1_macro"][search.best_index_] == 1
    assert search.best_score_ == results["mean_test_f1_macro"][
        search.best_index_]


def test_a_dial_search_space_list_and_a_timeout(local_binary, digits):
    X, y = digits
    space = [{"name": "C", "float": {"min": 0.1, "max": 100, "scale": "LOG"}},
             {"name": "kernel", "categorical": {"values": ["rbf", "linear"]}},
             {"name": "gamma", "float": {"min": 1e-4, "max": 1e-2,
                                         "scale": "LOG"},
              "when": {"kernel": ["rbf"]}}]
    search = DialSearchCV(SVC(), space, n_trials=6, cv=2, random_state=5,
                          searcher="tpe")
    search.fit(X, y)
    results = search.cv_results_
    assert len(results["params"]) == 6
    for params, gamma in zip(results["params"], results["param_gamma"]):
        # gamma is searched only for the rbf kernel, else left out.
        assert ("gamma" in params) == (params["kernel"] == "rbf")
        assert (gamma is np.ma.masked) == (params["kernel"] != "rbf")
    # A timeout already past starts no trial at all.
    with pytest.raises(ValueError, match="0 finished"):
        DialSearchCV(SVC(), space, n_trials=6, cv=2,
                     timeout=1e-9).fit(X, y)
