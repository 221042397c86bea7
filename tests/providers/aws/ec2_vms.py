"""EC2 instances that boot: every instance moto launches runs its user-data, as sent, on this
machine, with its own `/` and its own sshd, so the AWS provider reaches it over SSH exactly
as it reaches a real VM (its login, its host key check, `sudo -n docker`, its log files).

Each "VM" is a private mount namespace (`unshare -m`, as root) in which a folder of its own
is bound over `/var/log`, `/var/lib`, `/etc/ssh`, `/home` and `/dev/console`: the script runs
verbatim and writes where it would on the AMI. What a real VM has that this machine has not
is stood for, and only that:
- `docker` is tests/providers/aws/fake_docker.py (each container a local process; its state
  in the VM's `/var/lib/docker`); `sudo` runs its command (the AMI's login user has sudo);
- `getent passwd` answers the login user's home as `/home/<user>` (the AMI's layout; there
  is no such account here, and the login is the machine's own user);
- `systemctl restart sshd` starts the VM's sshd, listening on the instance's own address
  (127.<n>.0.N, one per instance, given to moto as its public IP and DNS name) with the host
  key the script installed and the keys it authorized; `service`, `mount` are recorded;
- `shutdown` is recorded, and EC2's answer to it (the instance terminates, with
  InstanceInitiatedShutdown) is set on moto's instance;
- the serial console is the VM's `/dev/console` file, served by moto's GetConsoleOutput.
A TerminateInstances (or the shutdown) halts the VM: its processes are killed.
Imported by the AWS end-to-end tests; nothing here is a test.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import Instance as MotoInstance
from moto.ec2.models.instances import InstanceBackend

from tests.providers.aws.moto_ec2 import SHUTDOWN, STATE_CODES, attach_console
from tests.providers.aws.vm_script import FAKE_DOCKER
from tests.support.servers.sshd import PRIVSEP_DIR, SSHD

BOUND = ("var/log", "var/lib", "etc/ssh", "home")  # folders of the VM's own, over the machine's
MOUNT = shutil.which("mount") or "/bin/mount"  # the machine's own (the VM's `mount` is a recorder)
HALTED = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_TICK = 0.05


@dataclass
class Vm:
    """One booted instance: its folder (`root` is its `/`), address and processes."""

    ec2_id: str
    folder: Path
    address: str
    script: subprocess.Popen[bytes]
    halted: bool = False

    @property
    def root(self) -> Path:
        return self.folder / "root"

    def file(self, path: str) -> Path:
        """A file of the VM, by its path inside the VM."""
        return Path(f"{self.root}{path}")

    def docker_calls(self) -> list[list[str]]:
        """Every `docker` command the VM ran (the fake's record), oldest first."""
        calls = self.file("/var/lib/docker/calls.jsonl")
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    def shut_itself_down(self) -> bool:
        log = self.folder / "system.log"
        return log.exists() and any(line.startswith("shutdown") for line in log.read_text().splitlines())

    def halt(self) -> None:
        if self.halted:
            return
        self.halted = True
        try:
            os.killpg(self.script.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.script.wait(30)
        # Only processes that are still this VM's: a container that ended was reaped (its pid
        # may be another process's by now, another test's included), and an sshd is this VM's
        # only if its command line names this VM's folder.
        containers = [p for p in self.file("/var/lib/docker").glob("*.pid") if not p.with_suffix(".code").exists()]
        for pid_file in (self.folder / "sshd.pid", *containers):
            try:
                pid = int(pid_file.read_text())
                if pid_file.name == "sshd.pid" and str(self.folder) not in Path(f"/proc/{pid}/cmdline").read_text():
                    continue
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, ValueError, FileNotFoundError):
                pass


@dataclass
class VmHost:
    """Boots every instance moto launches in `region` (while started); see the module doc."""

    folder: Path
    region: str
    ssh_port: int
    ssh_user: str
    vms: dict[str, Vm] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _failure: BaseException | None = None
    # The second octet of every VM's address (127.<net>.x.y): another suite's VMs on this
    # machine, which may pick the same free port, are on other addresses.
    _net: int = field(default_factory=lambda: random.randint(16, 250))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ec2-vm-host", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            for vm in self.vms.values():
                vm.halt()
        if self._failure is not None:
            raise AssertionError("the VM host failed") from self._failure

    def vm(self, instance_id: str) -> Vm:
        """The VM of a Nebula instance id (`<region>/<i-...>`)."""
        with self._lock:
            return self.vms[instance_id.rsplit("/", 1)[-1]]

    def booted(self) -> list[Vm]:
        """Every VM, in launch order."""
        with self._lock:
            return list(self.vms.values())

    def launched(self, instances: list[MotoInstance]) -> None:
        """RunInstances launched `instances`: each boots now, with its address (EC2 gives it at launch)."""
        for instance in instances:
            if instance.region_name == self.region:
                with self._lock:
                    self.vms[instance.id] = self._boot(instance)

    def _run(self) -> None:
        try:
            while not self._stop.wait(_TICK):
                self._tick()
        except BaseException as exc:  # reported by stop(), which the test's teardown calls
            self._failure = exc

    def _tick(self) -> None:
        for instance in list(ec2_backends[DEFAULT_ACCOUNT_ID][self.region].all_instances()):
            with self._lock:
                vm = self.vms.get(instance.id)
            if vm is None:
                continue
            if instance._state.name in HALTED:
                vm.halt()
            elif vm.shut_itself_down():  # InstanceInitiatedShutdownBehavior=terminate
                instance._state.name, instance._state.code = "terminated", STATE_CODES["terminated"]
                instance.state_reason.code, instance.state_reason.message = SHUTDOWN
                vm.halt()

    def _boot(self, instance: MotoInstance) -> Vm:
        number = len(self.vms)
        address = f"127.{self._net}.{number // 250}.{number % 250 + 2}"
        folder = self.folder / instance.id
        root, tools = folder / "root", folder / "bin"
        for path in (*(root / bound for bound in BOUND), root / "dev", root / "var/lib/docker", tools):
            path.mkdir(parents=True, exist_ok=True)
        (root / "dev/console").touch()
        self._tools(folder, tools, address)
        script = folder / "user-data"
        assert instance.user_data is not None, "every Nebula launch carries its user-data"
        script.write_bytes(gzip.decompress(base64.b64decode(instance.user_data.as_bytes())))  # as cloud-init does
        binds = " && ".join(f"{MOUNT} --bind {root / bound} /{bound}" for bound in (*BOUND, "dev/console"))
        env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", FAKE_DOCKER_STATE="/var/lib/docker")
        errors = (folder / "user-data.err").open("wb")
        process = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "--", "bash", "-c", f'{binds} && exec bash "$0"',
             str(script)], env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=errors, stderr=errors,
            start_new_session=True,
        )  # fmt: skip
        errors.close()
        instance.nics[0].public_ip = address
        setattr(instance, _DNS, address)
        attach_console(instance, root / "dev/console")
        return Vm(instance.id, folder, address, process)

    def _tools(self, folder: Path, tools: Path, address: str) -> None:
        config = folder / "sshd_config"
        config.write_text(
            f"Port {self.ssh_port}\nListenAddress {address}\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
            f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile /home/{self.ssh_user}/.ssh/authorized_keys\n"
            "StrictModes no\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nUsePAM no\nPermitTTY yes\nX11Forwarding no\nAllowTcpForwarding no\n"
            f"PrintMotd no\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            f"SetEnv PATH={tools}:{os.environ['PATH']} FAKE_DOCKER_STATE=/var/lib/docker\n"
        )
        system_log, user = folder / "system.log", self.ssh_user
        listening = (
            f"for _ in $(seq 1000); do (exec 3<>/dev/tcp/{address}/{self.ssh_port}) 2>/dev/null && exit 0; "
            "sleep 0.02; done; exit 1"
        )
        scripts = {
            "docker": f'exec {sys.executable} {FAKE_DOCKER} "$@"',
            "sudo": 'if [ "$1" = -n ]; then shift; fi\nexec "$@"',
            "getent": f'[ "$1 $2" = "passwd {user}" ] && echo "{user}:x:0:0::/home/{user}:/bin/sh"',
            "systemctl": f'echo "systemctl $*" >> {system_log}\n'
            f'if [ "$1 $2" = "restart sshd" ]; then {SSHD} -f {config} && {listening}; fi',
            **{name: f'echo "{name} $*" >> {system_log}' for name in ("service", "mount", "shutdown")},
        }
        for name, body in scripts.items():
            (tools / name).write_text(f"#!/bin/bash\n{body}\n")
            (tools / name).chmod(0o755)


_DNS = "nebula_test_dns"  # the attribute of moto's Instance that holds the VM's public DNS name


@contextmanager
def booting_vms(folder: Path, *, region: str, ssh_port: int, ssh_user: str) -> Iterator[VmHost]:
    """A started VmHost; its VMs halted on the way out. Skips where a VM cannot be made here."""
    if os.getuid() != 0 or shutil.which("unshare") is None or not os.path.exists(SSHD):
        pytest.skip("booting an instance here needs root, unshare and OpenSSH's sshd")
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    host = VmHost(folder, region, ssh_port, ssh_user)
    dns_name = MotoInstance.public_dns_name
    run_instances = InstanceBackend.run_instances

    def public_dns_name(self: Any) -> str | None:  # a booted VM's name resolves to its address
        return getattr(self, _DNS, None) or dns_name.fget(self)  # type: ignore[attr-defined, no-any-return]

    def launching(self: Any, *args: Any, **kwargs: Any) -> Any:
        reservation = run_instances(self, *args, **kwargs)
        host.launched(list(reservation.instances))
        return reservation

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MotoInstance, "public_dns_name", property(public_dns_name))
        patch.setattr(InstanceBackend, "run_instances", launching)
        host.start()
        try:
            yield host
        finally:
            host.stop()
