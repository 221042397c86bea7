"""`manage.py runvnode` refuses bad listener flags at start-up, before anything runs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.support.kubeconfigs import unserved_kubeconfig


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--kubelet-addr", "127.0.0.1:99999", "port must be a number"),
        ("--kubelet-addr", "kubelet.example:10250", "is not an IP address"),
        ("--console-addr", "no-port", "is not host:port"),
    ],
)
def test_a_bad_listener_address_is_a_command_error(flag: str, value: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runvnode", flag, value, "--provider", "fake")


def test_a_kubelet_port_in_use_is_a_command_error(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match="cannot start the kubelet and console listeners"):
            call_command("runvnode", "--kubelet-addr", f"127.0.0.1:{port}", "--console-addr", "127.0.0.1:0",
                         "--provider", "fake", "--kubeconfig", unserved_kubeconfig(tmp_path))  # fmt: skip


def test_I7_a_bad_stream_timeout_flag_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="stream_creation_timeout must be a number greater than 0"):
        call_command("runvnode", "--kubelet-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0",
                     "--stream-creation-timeout", "0", "--provider", "fake",
                     "--kubeconfig", unserved_kubeconfig(tmp_path))  # fmt: skip
