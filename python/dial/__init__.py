"""Dial's Python SDK.

Studies and ask/tell::

    import dial

    client = dial.connect()            # $DIAL_SCHEDULER, $DIAL_TOKEN
    study = client.create_study("examples/synthetic-bayesian.yaml")
    study.optimize(lambda t: (t.params["x"] - 2) ** 2, n_trials=50, n_jobs=4)
    print(study.best_trial)

Trial programs run by workers: ``from dial import trial`` (dial.trial);
PyTorch checkpoints that resume exactly: ``dial.pytorch``; scikit-learn
search: ``dial.sklearn.DialSearchCV``; XGBoost early stopping:
``dial.xgboost.PruningCallback``; a scheduler of this process's own:
``dial.LocalScheduler``.
"""
from ._client import Client, Study, Trial, connect
from ._local import LocalScheduler
from ._errors import (AlreadyExists, DeadlineExceeded, Error,
                      FailedPrecondition, InvalidArgument, NotFound,
                      PermissionDenied, Pruned, ResourceExhausted,
                      Unauthenticated, Unavailable, Unimplemented)
from ._types import (BestTrials, Decision, MetricPoint, StudyEvent,
                     TrialRecord, parse_spec)

__version__ = "0.2.0"

__all__ = [
    "connect", "Client", "LocalScheduler", "Study", "Trial", "TrialRecord", "BestTrials",
    "MetricPoint", "StudyEvent", "Decision", "parse_spec", "Error",
    "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
    "PermissionDenied", "Unauthenticated", "Unavailable", "DeadlineExceeded",
    "Unimplemented", "ResourceExhausted", "Pruned", "__version__",
]
