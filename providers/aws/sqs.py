"""The boundary to SQS for the interruption queue: one boto3 client (built lazily), the queue's
URL resolved once, receive and delete, every botocore exception translated.

Called by `notices.NoticeReader` only; besides `ec2`, the one module that touches boto3. Errors
map as `ec2.translate` maps EC2's (the same codes mean the same here), except two SQS answers:
a queue that does not exist is `Unavailable` naming the `interruption_queue` option (someone
may yet create it; nothing is lost meanwhile), and a receipt SQS no longer takes is a delete
already done.
Tests: tests/providers/aws/test_aws_notices.py.
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import Any

from providers.aws.ec2 import translate
from providers.aws.options import AwsOptions
from providers.errors import ProviderError, Unavailable

MAX_MESSAGES = 10  # ReceiveMessage's largest batch
MAX_WAIT = 20  # seconds: ReceiveMessage's longest long poll
NO_QUEUE_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
STALE_RECEIPT_CODES = frozenset({"ReceiptHandleIsInvalid", "InvalidReceiptHandle"})
# https://sqs.<region>.amazonaws.com/<account>/<name> (and the legacy <region>.queue.amazonaws.com)
_URL_REGION = re.compile(r"^https?://(?:sqs\.([a-z0-9-]+)\.amazonaws\.com|([a-z0-9-]+)\.queue\.amazonaws\.com)/")
_ARN = re.compile(r"^arn:aws[a-z-]*:sqs:([a-z0-9-]+):(\d{12}):([A-Za-z0-9_.-]+)$")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


class InterruptionQueue:
    """The queue the `interruption_queue` option names (a URL, an ARN or a name in the
    provider's first region). Constructors do no I/O."""

    def __init__(self, options: AwsOptions, queue: str) -> None:
        self._options = options
        self._queue = queue
        url_region = _URL_REGION.match(queue)
        arn = _ARN.match(queue)
        if url_region:
            self.region = url_region.group(1) or url_region.group(2)
        elif arn:
            self.region = arn.group(1)
        else:
            self.region = options.regions[0]
        self._lock = threading.Lock()
        self._client: Any = None
        self._url: str | None = queue if queue.startswith(("https://", "http://")) else None

    def _error(self, exc: Exception, operation: str) -> ProviderError:
        if _code(exc) in NO_QUEUE_CODES:
            return Unavailable(
                f"aws option 'interruption_queue': SQS queue {self._queue!r} does not exist in {self.region} "
                "(deploy/aws/interruption-queue.yaml creates it)"
            )
        err = translate(exc, operation=operation, region=self.region)
        err.args = (str(err).replace("EC2 ", "SQS ", 1),)
        return err

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        client = self._connect()
        try:
            result: dict[str, Any] = getattr(client, operation)(**params)
        except Exception as exc:  # noqa: BLE001 - the boundary: nothing of botocore's gets out
            raise self._error(exc, operation) from exc
        return result

    def _connect(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._build()
                except Exception as exc:  # noqa: BLE001 - every SDK failure is translated here
                    raise self._error(exc, "client") from exc
            return self._client

    def _build(self) -> Any:
        boto3 = importlib.import_module("boto3")
        config = importlib.import_module("botocore.config").Config(
            connect_timeout=self._options.connect_timeout,
            # A long poll holds the answer up to MAX_WAIT seconds: the read must outlast it.
            read_timeout=self._options.read_timeout + MAX_WAIT,
            retries={"max_attempts": self._options.max_attempts, "mode": "standard"},
        )
        session = boto3.session.Session(profile_name=self._options.profile)
        return session.client("sqs", region_name=self.region, endpoint_url=self._options.endpoint_url, config=config)

    def url(self) -> str:
        """The queue's URL: GetQueueUrl once for a name or an ARN."""
        if self._url is None:
            arn = _ARN.match(self._queue)
            params = {"QueueName": arn.group(3), "QueueOwnerAWSAccountId": arn.group(2)} if arn else {}
            found = self._call("get_queue_url", **(params or {"QueueName": self._queue}))
            self._url = str(found["QueueUrl"])
        return self._url

    def receive(self, wait: float, *, visibility: int) -> list[dict[str, Any]]:
        """One ReceiveMessage: at most MAX_MESSAGES messages, a long poll of `wait` seconds
        (whole, at most MAX_WAIT), hidden from the next receive for `visibility` seconds."""
        result = self._call(
            "receive_message",
            QueueUrl=self.url(),
            MaxNumberOfMessages=MAX_MESSAGES,
            WaitTimeSeconds=max(0, min(MAX_WAIT, int(wait))),
            VisibilityTimeout=visibility,
        )
        return list(result.get("Messages") or ())

    def delete(self, receipt: str) -> None:
        """DeleteMessage; a receipt SQS no longer takes (the message deleted already, or read
        again since) is success: a message still there comes back and is a known repeat."""
        try:
            self._call("delete_message", QueueUrl=self.url(), ReceiptHandle=receipt)
        except ProviderError as err:
            cause = err.__cause__
            if isinstance(cause, Exception) and _code(cause) in STALE_RECEIPT_CODES:
                return
            raise
