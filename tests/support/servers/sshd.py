"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests, with throwaway host and user keys.

The session fixture `sshd` (registered by tests/conftest.py) serves tests/providers/ssh. It
runs as the current user with its own sshd_config and an authorized_keys file in a temp dir
(no root login set-up, no system files touched except the privilege-separation directory).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

from providers.ssh import SshTarget

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")


@dataclass(frozen=True)
class Sshd:
    port: int
    host_key: str  # the server's public host key line
    user_key: bytes  # an authorized private key (OpenSSH)
    other_key: bytes  # a private key the server does not accept
    home: Path  # a scratch directory for the test's files

    def target(self, **overrides: object) -> SshTarget:
        values: dict[str, object] = {
            "host": "127.0.0.1", "port": self.port, "username": _user(), "private_key": self.user_key,
            "host_key": self.host_key, "connect_timeout": 20.0,
        }  # fmt: skip
        values.update(overrides)
        return SshTarget(**values)  # type: ignore[arg-type]


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_banner(port: int, process: subprocess.Popen[bytes], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def _config(directory: Path, port: int) -> Path:
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_ed25519'}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "StrictModes no\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\nPermitTTY yes\nX11Forwarding no\nAllowTcpForwarding local\n"
        "PrintMotd no\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
    )
    return config


@pytest.fixture(scope="session", name="sshd")
def sshd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not os.path.exists(SSHD):
        pytest.skip("OpenSSH's sshd is not installed (apt-get install -y openssh-server)")
    if not PRIVSEP_DIR.is_dir():
        if os.getuid() != 0:
            pytest.skip(f"sshd needs {PRIVSEP_DIR}, which only root can create here")
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    directory = tmp_path_factory.mktemp("sshd")
    host = asyncssh.generate_private_key("ssh-ed25519")
    user = asyncssh.generate_private_key("ssh-ed25519")
    other = asyncssh.generate_private_key("ssh-ed25519")
    (directory / "host_ed25519").write_bytes(host.export_private_key())
    (directory / "host_ed25519").chmod(0o600)
    (directory / "authorized_keys").write_bytes(user.export_public_key())
    home = directory / "home"
    home.mkdir()
    for _attempt in range(3):
        port = _free_port()
        process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(_config(directory, port))], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        if _wait_for_banner(port, process):
            break
        process.kill()
        _, err = process.communicate()
        assert process.stderr is None or process.stderr.closed
    else:
        pytest.fail(f"sshd did not start: {err.decode(errors='replace')[-500:]}")
    try:
        yield Sshd(
            port=port, host_key=host.export_public_key().decode().strip(), user_key=user.export_private_key(),
            other_key=other.export_private_key(), home=home,
        )  # fmt: skip
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
