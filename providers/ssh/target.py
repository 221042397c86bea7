"""`SshTarget` (where an instance's sshd is and how to log in) and `connect`.

Called by `providers.ssh.process` on the private loop thread. Every SSH or socket
failure becomes `providers.errors.Unavailable` here, with a message that names the host
and never the key. No host key given means the host is not verified (say so in docs).
Tests: tests/providers/ssh/test_ssh.py.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import asyncssh

from providers.errors import Unavailable

DEFAULT_CONNECT_TIMEOUT = 15.0


@dataclass(frozen=True, repr=False)
class SshTarget:
    """One login: `private_key` is an OpenSSH private key; `host_key` an OpenSSH public
    key line (`ssh-ed25519 AAAA...`) the server must present, or None to accept any."""

    host: str
    username: str
    private_key: bytes
    port: int = 22
    host_key: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __repr__(self) -> str:
        verified = "verified" if self.host_key else "unverified"
        return f"SshTarget({self.username}@{self.host}:{self.port}, host key {verified})"

    @property
    def address(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"


async def connect(target: SshTarget) -> asyncssh.SSHClientConnection:
    """An authenticated connection; `Unavailable` for every way that can fail."""
    try:
        key = asyncssh.import_private_key(target.private_key)
        known_hosts: tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]] | None = None
        if target.host_key:
            known_hosts = ([asyncssh.import_public_key(target.host_key)], [], [])
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise Unavailable(f"ssh to {target.address}: the connect key or host key cannot be read") from exc
    try:
        return await asyncio.wait_for(
            asyncssh.connect(
                target.host,
                target.port,
                username=target.username,
                client_keys=[key],
                known_hosts=known_hosts,
                config=None,
                agent_path=None,
                password=None,
                kbdint_auth=False,
                gss_auth=False,
                preferred_auth=["publickey"],
                connect_timeout=target.connect_timeout,
                keepalive_interval=30,
            ),
            target.connect_timeout + 5,
        )
    except asyncssh.PermissionDenied as exc:
        # Usually the instance is still booting and has not authorized the key yet.
        raise Unavailable(f"ssh to {target.address}: the key is not (yet) accepted") from exc
    except asyncssh.HostKeyNotVerifiable as exc:
        raise Unavailable(f"ssh to {target.address}: the server's host key is not the one expected") from exc
    except (asyncssh.Error, OSError, TimeoutError, socket.gaierror) as exc:
        raise Unavailable(f"ssh to {target.address}: {describe(exc)}") from exc


def describe(exc: BaseException) -> str:
    """A short, secret-free description of an SSH or socket failure."""
    if isinstance(exc, asyncssh.Error):
        return f"{type(exc).__name__}: {exc.reason}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__
