"""The Modal provider: one Modal Sandbox per Pod, on the `modal` SDK (imported lazily).

provider   `ModalProvider`: the seam (provision, list, get, terminate, offerings, logs, exec)
sdk        the SDK client for `server_url` with the token from a folder or the environment
status     SandboxInfo facts to `Instance`; the owner and claim tags
classify   SDK, grpclib and OS errors to `providers.errors`; refusal -> block scope
catalog    the shipped GPU catalog (catalog.csv) and Modal's gpu strings
logs       Modal's log store as a LogStream; process  Sandbox.exec as a Process
options    settings
launch     one Sandbox.create on its own thread, so provision need not wait for Modal's schedule
fake/      a gRPC fake of Modal's API for tests (not imported by the provider)

Imports no other provider. Without the SDK (the `modal` extra) importing the package raises
`providers.extras.MissingExtraError`.
Tests: tests/providers/modal/test_modal_provider_provision.py.
"""

from providers import extras

extras.require("modal", "grpclib", extra="modal")  # before anything that imports the SDK

from providers.modal.provider import ModalProvider  # noqa: E402

__all__ = ["ModalProvider"]
