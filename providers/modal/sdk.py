"""The Modal SDK as the provider uses it: one `modal.Client` per provider (built for the
configured `server_url`, with the token from `credentials_dir` or the environment, never
from Modal's token config files and without touching the SDK's process-global config),
the app lookup, and the one listing call.

Called by `ModalProvider`. Listing goes through the SDK client's own `SandboxList` RPC
with `include_finished=True` and the owner's tags: the public `Sandbox.list` skips ended
sandboxes and drops the task's start time, which tell queued (PROVISIONING) from RUNNING
and SUCCEEDED/FAILED from gone. The token is never logged or put in a repr.
Tests: tests/providers/modal/test_modal_provider_provision.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from providers.errors import Unauthorized, Unavailable
from providers.modal.classify import sdk_errors
from providers.modal.options import ModalOptions

TOKEN_ID = "MODAL_TOKEN_ID"
TOKEN_SECRET = "MODAL_TOKEN_SECRET"


def read_token(options: ModalOptions) -> tuple[str, str]:
    """(token id, token secret) from `credentials_dir`'s two files, else the environment."""
    if options.credentials_dir:
        folder = Path(options.credentials_dir)
        try:
            values = tuple((folder / name).read_text(encoding="utf-8").strip() for name in (TOKEN_ID, TOKEN_SECRET))
        except OSError as exc:
            raise Unauthorized(
                f"modal: cannot read {TOKEN_ID} and {TOKEN_SECRET} in credentials_dir {folder} ({exc.strerror})"
            ) from None
    else:
        values = (os.environ.get(TOKEN_ID, "").strip(), os.environ.get(TOKEN_SECRET, "").strip())
    if not all(values):
        raise Unauthorized(
            f"modal: no token: set credentials_dir or the environment variables {TOKEN_ID}/{TOKEN_SECRET}"
        )
    return values[0], values[1]


def _open_within(client: Any, timeout: float) -> None:
    """Open the client's channel; the SDK's open has no deadline of its own (an unreachable
    server may hold it), so it runs on a daemon thread and Unavailable says when it did not
    answer in time."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def run() -> None:
        try:
            client.__enter__()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="modal-connect").start()
    if not done.wait(timeout):
        raise Unavailable(f"modal: the API did not answer within {timeout:.0f}s")
    if outcome[0] is not None:
        raise outcome[0]


async def _list_page(client: Any, app_id: str, tags: dict[str, str], before: float | None) -> Any:
    from modal_proto import api_pb2

    request = api_pb2.SandboxListRequest(
        app_id=app_id,
        before_timestamp=before or 0.0,
        include_finished=True,
        tags=[api_pb2.SandboxTag(tag_name=key, tag_value=value) for key, value in tags.items()],
    )
    return await client._stub.SandboxList(request)


class Session:
    """The provider's SDK client and app, made on first use (the constructor does no I/O)."""

    def __init__(self, options: ModalOptions) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._client: Any = None
        self._app: Any = None
        self._list_page: Any = None

    def __repr__(self) -> str:
        return f"Session(server_url={self._options.server_url!r}, app={self._options.app!r})"

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                token = read_token(self._options)
                with sdk_errors():
                    import modal
                    from modal_proto import api_pb2

                    client = modal.Client(self._options.server_url, api_pb2.CLIENT_TYPE_CLIENT, token)
                    _open_within(client, self._options.connect_timeout)  # not the global config
                self._client = client
            return self._client

    def app(self) -> Any:
        client = self.client()
        with self._lock:
            if self._app is None:
                with sdk_errors():
                    import modal

                    self._app = modal.App.lookup(
                        self._options.app,
                        create_if_missing=True,
                        environment_name=self._options.environment,
                        client=client,
                    )
            return self._app

    def list_sandboxes(self, tags: dict[str, str]) -> list[Any]:
        """Every sandbox of the app carrying at least `tags`, ended ones included (SandboxInfo)."""
        app_id = str(self.app().app_id)
        client = self.client()
        if self._list_page is None:
            from modal._utils.async_utils import synchronizer

            self._list_page = synchronizer.create_blocking(_list_page, "_list_page", target_module=__name__)
        found: list[Any] = []
        before: float | None = None
        with sdk_errors():
            while True:
                response = self._list_page(client, app_id, tags, before)
                if not response.sandboxes:
                    return found
                found.extend(response.sandboxes)
                before = response.sandboxes[-1].created_at

    def sandbox(self, sandbox_id: str) -> Any:
        import modal

        with sdk_errors():
            return modal.Sandbox.from_id(sandbox_id, client=self.client())

    def close(self) -> None:
        with self._lock:
            client, self._client, self._app = self._client, None, None
        if client is not None:
            with sdk_errors():
                client.close()
