"""Both listeners in a process of their own, so a test can read their memory from /proc.

`ListenerProcess(**limits)` starts `python -m tests.support.rigs.listeners '<json>'`:
the kubelet listener (TLS) and the console (plain HTTP, the Django app) on loopback with
`Limits(**limits)`; `rss()` is the child's VmRSS in bytes; `stop()` ends it (stdin closed).
Not a product module: tests only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


class ListenerProcess:
    def __init__(self, **limits: Any) -> None:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="nebula_site.settings")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.rigs.listeners", json.dumps(limits)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise RuntimeError(f"the listener process ended with {self.process.returncode} before listening")
        ports = json.loads(line)
        self.kubelet_port: int = ports["kubelet"]
        self.console_port: int = ports["console"]

    def rss(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def raise_open_files() -> None:
    """As many descriptors as the hard limit allows (thousands of sockets in a test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argument: str) -> None:
    import django

    django.setup()
    from nebula_site.asgi import application
    from vnode.kubelet.limits import Limits
    from vnode.kubelet.resolve import HandlerRegistry
    from vnode.kubelet.server import ListenerConfig, Listeners

    raise_open_files()
    listeners = Listeners(
        HandlerRegistry(),
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        console=ListenerConfig("127.0.0.1", 0),
        console_app=application,
        bounds=Limits(**json.loads(argument)),
    )
    listeners.start()
    print(json.dumps({"kubelet": listeners.kubelet_port, "console": listeners.console_port}), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    listeners.stop()


if __name__ == "__main__":
    main(sys.argv[1])
