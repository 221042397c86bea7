"""The boundary to EC2: boto3 clients per region (built lazily) and the one translation of
every botocore exception into `providers.errors`.

Called by `AwsProvider`; with `providers.aws.sqs` (the interruption queue), the only module that
touches boto3 or botocore. Every call goes through `Ec2.call` or `Ec2.pages`, so no SDK exception
escapes (a test proves it). Messages carry the EC2 error code and a cut of AWS's message, with any
secret given scrubbed.
Tests: tests/providers/aws/test_aws.py.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from typing import Any

from providers.aws.options import AwsOptions
from providers.errors import (
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    QuotaExceeded,
    Unauthorized,
    Unavailable,
)

CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "Unsupported",
        "InvalidFleetConfiguration",
        "SpotMaxPriceTooLow",
    }
)
SPOT_PRICE_CODES = frozenset({"SpotMaxPriceTooLow"})
QUOTA_CODES = frozenset(
    {"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "ResourceLimitExceeded"}
)
AUTH_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AuthFailure",
        "Blocked",
        "OptInRequired",
        "PendingVerification",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "UnrecognizedClientException",
        "AccessDenied",
        "AccessDeniedException",
        "InvalidAccessKeyId",
    }
)
THROTTLE_CODES = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException"}
)
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
UNAVAILABLE_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})
# A ClientToken reused with other parameters: a launch for this claim raced ours (an earlier
# attempt whose instance DescribeInstances does not show yet). Retried, provision adopts it.
RACE_CODES = frozenset({"IdempotentParameterMismatch"})
THROTTLE_RETRY_AFTER = 5.0
_MESSAGE_LIMIT = 300

# One boto3 Session per profile for the process: building one loads the service models
# (slow), and a Session is not thread-safe, so clients are made from it under this lock.
_SESSION_LOCK = threading.Lock()
_SESSIONS: dict[str | None, Any] = {}


class Ec2Refusal:
    """Mixin: the EC2 error code behind a refusal, read by `classify`."""

    code: str = ""


class CapacityRefusal(Ec2Refusal, NoCapacity):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class QuotaRefusal(Ec2Refusal, QuotaExceeded):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class AuthRefusal(Ec2Refusal, Unauthorized):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def error_code(err: BaseException) -> str:
    """The EC2 code behind a translated error, or ""."""
    return err.code if isinstance(err, Ec2Refusal) else ""


def _scrub(text: str, secrets: Iterable[str]) -> str:
    # "Encoded authorization failure message" blobs are long and useless in an Event.
    text = text.split("Encoded authorization failure message", 1)[0].strip()
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "[REDACTED]")
    return text[:_MESSAGE_LIMIT]


def translate(exc: Exception, *, operation: str, region: str, secrets: Iterable[str] = ()) -> ProviderError:
    """The `providers.errors` value for a botocore (or socket) exception."""
    where = f"EC2 {operation} in {region}"
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response.get("Error") or {}
        code = str(error.get("Code") or "Unknown")
        message = f"{where}: {code}: {_scrub(str(error.get('Message') or ''), secrets)}"
        status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 400)
        return _from_code(code, message, status)
    name = type(exc).__name__
    if name in {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "ProfileNotFound"}:
        return AuthRefusal(f"{where}: no usable AWS credentials ({name})", name)
    if name in {"ParamValidationError", "NoRegionError", "UnknownServiceError", "InvalidRegionError"}:
        return InvalidRequest(f"{where}: {name}: {_scrub(str(exc), secrets)}")
    # Connection, timeout, TLS and parser failures, and anything else the SDK raises.
    return Unavailable(f"{where}: {name}: {_scrub(str(exc), secrets)}")


def _from_code(code: str, message: str, status: int) -> ProviderError:
    if code in NOT_FOUND_CODES:
        return NotFound(message)
    if code in THROTTLE_CODES or code in RACE_CODES:
        return Unavailable(message, retry_after=THROTTLE_RETRY_AFTER)
    if code in AUTH_CODES:
        return AuthRefusal(message, code)
    if code in QUOTA_CODES:
        return QuotaRefusal(message, code)
    if code in CAPACITY_CODES:
        return CapacityRefusal(message, code)
    if code in UNAVAILABLE_CODES or status >= 500:
        return Unavailable(message)
    return InvalidRequest(message)


class Ec2:
    """EC2 clients for the provider's regions, built on first use (constructors do no I/O)."""

    def __init__(self, options: AwsOptions) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    def client(self, region: str) -> Any:
        with self._lock:
            if region not in self._clients:
                try:
                    self._clients[region] = self._build(region)
                except Exception as exc:  # noqa: BLE001 - every SDK failure is translated here
                    raise translate(exc, operation="client", region=region) from exc
            return self._clients[region]

    def _build(self, region: str) -> Any:
        boto3 = importlib.import_module("boto3")
        config = importlib.import_module("botocore.config").Config(
            connect_timeout=self._options.connect_timeout,
            read_timeout=self._options.read_timeout,
            retries={"max_attempts": self._options.max_attempts, "mode": "standard"},
        )
        with _SESSION_LOCK:
            session = _SESSIONS.get(self._options.profile)
            if session is None:
                session = _SESSIONS[self._options.profile] = boto3.session.Session(profile_name=self._options.profile)
            return session.client("ec2", region_name=region, endpoint_url=self._options.endpoint_url, config=config)

    def call(self, region: str, operation: str, *, secrets: Iterable[str] = (), **params: Any) -> dict[str, Any]:
        """One EC2 API call (`operation` in boto3's snake_case); errors translated."""
        client = self.client(region)
        try:
            result: dict[str, Any] = getattr(client, operation)(**params)
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing of botocore's gets out
            raise translate(exc, operation=operation, region=region, secrets=secrets) from exc
        return result

    def pages(self, region: str, operation: str, **params: Any) -> list[dict[str, Any]]:
        """Every page of a paginated call, read in full; errors translated."""
        client = self.client(region)
        try:
            return list(client.get_paginator(operation).paginate(**params))
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing of botocore's gets out
            raise translate(exc, operation=operation, region=region) from exc
