"""The one translation of the Modal SDK's exceptions (and grpclib's, and the OS's) into
`providers.errors`, and how widely a refusal blocks this provider.

Called around every SDK call of `providers.modal` (`sdk_errors`), and by
`ModalProvider.classify_provision_error`. gRPC statuses decide first (every
`modal.exception` raised from an RPC carries one); SDK exceptions without a status by
their type. Messages are the server's; env values never reach an RPC error's text.
Tests: tests/providers/modal/test_modal_provider_errors.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator

from grpclib import GRPCError, Status
from grpclib.exceptions import ProtocolError, StreamTerminatedError

from providers import base, errors

_CAPACITY = re.compile(r"capacity|no (gpus?|machines?|workers?) available|out of (stock|gpus?)", re.IGNORECASE)
_UNAVAILABLE = {Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.CANCELLED, Status.UNKNOWN, Status.INTERNAL}


def _status_and_message(exc: BaseException) -> tuple[Status | None, str]:
    """The gRPC status and the server's message; a `modal.exception` carries them in private
    slots (its public `status`/`message` warn that they are deprecated)."""
    from modal import exception as modal_exc

    if isinstance(exc, modal_exc.Error):
        status = getattr(exc, "_grpc_status", None)
        message = getattr(exc, "_grpc_message", "") or getattr(exc, "_message", "") or str(exc)
        return (status if isinstance(status, Status) else None), str(message)
    if isinstance(exc, GRPCError):
        return exc.status, str(exc.message or "")
    return None, str(exc)


def translate(exc: BaseException, *, creating: bool = False) -> errors.ProviderError:
    """The `providers.errors` type for `exc` (`creating`: a NOT_FOUND is a bad request)."""
    if isinstance(exc, errors.ProviderError):
        return exc
    from modal import exception as modal_exc  # the SDK is imported lazily, only in this package

    status, message = _status_and_message(exc)
    message = message or type(exc).__name__
    text = f"modal: {message}"
    if status is not None or isinstance(exc, modal_exc.ResourceExhaustedError):
        if _CAPACITY.search(message):
            return errors.NoCapacity(text)
        if status is Status.RESOURCE_EXHAUSTED:
            return errors.QuotaExceeded(text)
        if status in (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED):
            return errors.Unauthorized(text)
        if status in (Status.INVALID_ARGUMENT, Status.OUT_OF_RANGE, Status.FAILED_PRECONDITION):
            return errors.InvalidRequest(text)
        if status is Status.NOT_FOUND:
            return errors.InvalidRequest(text) if creating else errors.NotFound(text)
        if status in _UNAVAILABLE:
            return errors.Unavailable(text)
        return errors.ProviderError(text)
    if isinstance(exc, modal_exc.AuthError | modal_exc.PermissionDeniedError):
        return errors.Unauthorized(text)
    if isinstance(exc, modal_exc.NotFoundError):
        return errors.InvalidRequest(text) if creating else errors.NotFound(text)
    if isinstance(exc, modal_exc.InvalidError):
        return errors.InvalidRequest(text)
    if isinstance(exc, modal_exc.ConnectionError | modal_exc.ServiceError | modal_exc.ClientClosed):
        return errors.Unavailable(text)
    if isinstance(exc, modal_exc.TimeoutError | TimeoutError | asyncio.TimeoutError):
        return errors.Unavailable(f"modal: timed out ({message})")
    if isinstance(exc, OSError | StreamTerminatedError | ProtocolError | ConnectionError):
        return errors.Unavailable(f"modal: cannot reach the API ({type(exc).__name__}: {message})")
    if _CAPACITY.search(message):
        return errors.NoCapacity(text)
    return errors.ProviderError(f"modal: {type(exc).__name__}: {message}")


@contextlib.contextmanager
def sdk_errors(*, creating: bool = False) -> Iterator[None]:
    """Every exception raised inside comes out as a `providers.errors` type."""
    try:
        yield
    except errors.ProviderError:
        raise
    except Exception as exc:
        raise translate(exc, creating=creating) from exc


def classify(
    provider: str, err: errors.ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
) -> base.BlockScope:
    """Credentials block the provider, a quota the tier, no capacity the one offering."""
    reason = f"{type(err).__name__}: {err}"
    if isinstance(err, errors.Unauthorized):
        return base.BlockScope(provider, base.BlockBreadth.PROVIDER, reason=reason)
    if isinstance(err, errors.QuotaExceeded):
        return base.BlockScope(provider, base.BlockBreadth.TIER, tier=tier or base.Tier.ON_DEMAND, reason=reason)
    if isinstance(err, errors.NoCapacity):
        return base.no_capacity_scope(provider, reason, accelerator=accelerator, tier=tier, region=region)
    return base.default_block_scope(provider, err, accelerator=accelerator, tier=tier, region=region)
