"""SSH logs, exec, port-forward and usage for any VM provider whose instances run an sshd (asyncssh underneath).

loop     the private event loop thread asyncssh runs on (callers stay synchronous)
target   `SshTarget` (where and as whom) and `connect`, which translates SSH failures
process  `SshProcess`: the seam's `Process` over one SSH channel (PTY, resize, EOF, exit)
forward  `SshForward`: the seam's `PortConnection` over a `direct-tcpip` channel (port-forward)
logs     `FileLog` and `open_log_stream`: the seam's `LogStream` tailing a log file remotely
usage    `read_usage`: CPU and memory of remote process trees from /proc, one command per host

Shared by VM providers (`providers.aws` first); imports no provider. Raises only
`providers.errors`; never logs a key.
Tests: tests/providers/ssh/test_ssh.py.
"""

from providers.ssh.forward import SshForward, open_forward
from providers.ssh.logs import FileLog, open_log_stream
from providers.ssh.process import SshProcess, run_to_end, start_process
from providers.ssh.target import SshTarget

__all__ = [
    "FileLog",
    "SshForward",
    "SshProcess",
    "SshTarget",
    "open_forward",
    "open_log_stream",
    "run_to_end",
    "start_process",
]
