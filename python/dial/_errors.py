"""Exceptions named by what to do about them, mapped from gRPC status codes."""
from __future__ import annotations

import re
from typing import Dict, Optional, Type

import grpc

__all__ = [
    "Error", "InvalidArgument", "NotFound", "AlreadyExists",
    "FailedPrecondition", "PermissionDenied", "Unauthenticated",
    "Unavailable", "DeadlineExceeded", "Unimplemented", "ResourceExhausted",
    "Pruned", "from_rpc_error",
]

# "search_space[0].float.min: must be ..." -> the field before the reason.
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\[\]-]*): ")


class Error(Exception):
    """Any error the scheduler answered, or a failure to reach it.

    ``code`` is the gRPC status code's name (``"NOT_FOUND"``), ``message``
    the scheduler's text.
    """

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgument(Error):
    """The request is malformed: fix it, do not retry. ``field`` names the
    offending field when the scheduler named one (``"budget.max_trials"``)."""

    code = "INVALID_ARGUMENT"

    @property
    def field(self) -> Optional[str]:
        """The field the scheduler named, or None."""
        match = _FIELD.match(self.message)
        return match.group(1) if match else None


class NotFound(Error):
    """No such study or trial."""
    code = "NOT_FOUND"


class AlreadyExists(Error):
    """A study of that name exists already."""
    code = "ALREADY_EXISTS"


class FailedPrecondition(Error):
    """Well formed, but the state forbids it (a finished trial, a stopped
    study)."""
    code = "FAILED_PRECONDITION"


class PermissionDenied(Error):
    """The token's principal may not do this (another user's study, a viewer
    writing)."""
    code = "PERMISSION_DENIED"


class Unauthenticated(Error):
    """No token, or one the scheduler does not know: pass ``token=`` or set
    ``$DIAL_TOKEN``."""
    code = "UNAUTHENTICATED"


class Unavailable(Error):
    """The scheduler cannot be reached, or its database is busy. Idempotent
    calls were already retried with backoff before this was raised."""
    code = "UNAVAILABLE"


class DeadlineExceeded(Error):
    """The call's deadline passed; it may or may not have taken effect."""
    code = "DEADLINE_EXCEEDED"


class Unimplemented(Error):
    """The scheduler does not implement this (an unknown searcher)."""
    code = "UNIMPLEMENTED"


class ResourceExhausted(Error):
    """A limit was hit (a message too large, too many watches)."""
    code = "RESOURCE_EXHAUSTED"


class Pruned(Exception):
    """Raise from an objective function when the trial was told to stop
    (``trial.should_stop``): ``Study.optimize`` records it as stopped, not
    failed."""


_BY_CODE: Dict[grpc.StatusCode, Type[Error]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def from_rpc_error(error: grpc.RpcError) -> Error:
    """The Dial exception for a failed gRPC call."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    message = details or str(error)
    cls = _BY_CODE.get(code, Error)
    name = code.name if code is not None else "UNKNOWN"
    return cls(message, code=name)
