"""The test sshd of tests/support/servers/sshd.py accepts the key it authorized."""

from __future__ import annotations

from tests.support.servers.sshd import Sshd


def test_the_test_sshd_accepts_the_user_key(sshd: Sshd) -> None:
    from providers.ssh import start_process

    process = start_process(sshd.target(), ["true"], tty=False, stdin=False)
    try:
        assert process.wait(30) == 0
    finally:
        process.close()
