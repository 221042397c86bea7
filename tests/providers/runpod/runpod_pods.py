"""The containers of the fake RunPod: each pod's start command (`dockerArgs`) runs as a real
process on this machine, in a mount namespace of its own (`unshare -m`, as root), the technique
of tests/providers/aws/ec2_vms.py: a folder of the pod's own is bound over `/root`, `/etc/ssh`
and `/var/log`, so what the pod writes there is its own.

What RunPod's official images do before the start command, the "image" here does too: it
authorizes the `PUBLIC_KEY` env var for root (`/root/.ssh/authorized_keys`), makes a host key
and starts the pod's own OpenSSH sshd, listening on the pod's address (127.<n>.x.y, one per
pod) and port (its `publicPort`); then it execs `bash -c <dockerArgs>` (`sleep infinity` when
there is none), with the pod's env (the request's `env`, RUNPOD_POD_ID, RUNPOD_PUBLIC_IP,
RUNPOD_TCP_PORT_22, PATH, HOME=/root) and nothing of the test's environment.
(On the real RunPod a custom start command replaces the image's /start.sh, which is what
starts sshd there; this fake always starts it, as the brief of this fake asks.)

A halt kills every process of the pod: every process in its mount namespace (the main one, its
sshd and every SSH session), found by the namespace's inode. The box holds the namespace open
(`pin`) from its start to the end of its halt: a freed namespace's inode number is given to the
next one made, and a halt that read a stale number killed another pod's container.
Imported by tests/providers/runpod/fake_runpod.py; nothing here is a test.

Tests: tests/providers/runpod/test_fake_runpod.py
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.servers.sshd import PRIVSEP_DIR, SSHD

BOUND = ("root", "etc/ssh", "var/log")
MOUNT = shutil.which("mount") or "/bin/mount"
KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"

_IMAGE = """\
folder="$1"; shift
readlink /proc/self/ns/mnt > "$folder/ns"
mkdir -p /root/.ssh && chmod 700 /root/.ssh && touch /root/.ssh/authorized_keys
if [ -n "$PUBLIC_KEY" ] && ! grep -qxF "$PUBLIC_KEY" /root/.ssh/authorized_keys; then
  printf '%s\\n' "$PUBLIC_KEY" >> /root/.ssh/authorized_keys
fi
chmod 600 /root/.ssh/authorized_keys
[ -f /etc/ssh/ssh_host_ed25519_key ] || {keygen} -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
{sshd} -f "$folder/sshd_config" -E /var/log/sshd.log
if [ -z "$1" ]; then exec sleep infinity; fi
exec bash -c "$1"
"""


def can_run_pods() -> str | None:
    """Why pods cannot run here, or None when they can."""
    if os.getuid() != 0:
        return "a RunPod pod here is a mount namespace with its own sshd: it needs root"
    if shutil.which("unshare") is None or not os.path.exists(SSHD):
        return "a RunPod pod here needs unshare and OpenSSH's sshd"
    return None


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


@dataclass
class PodBox:
    """One pod's container: its folder (`root` is its `/`), address, sshd port and process."""

    pod_id: str
    folder: Path
    address: str
    ssh_port: int
    env: dict[str, str]
    command: str
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    exit_codes: list[int] = field(default_factory=list)
    pin: int | None = None  # an open descriptor of the container's mount namespace

    @property
    def root(self) -> Path:
        return self.folder / "root"

    def file(self, path: str) -> Path:
        """A file of the pod, by its path inside the pod (under the bound folders)."""
        return Path(f"{self.root}{path}")

    def start(self) -> None:
        """Start (or restart) the container: the image's set-up, then the start command."""
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        for bound in BOUND:
            (self.root / bound).mkdir(parents=True, exist_ok=True)
        (self.folder / "ns").unlink(missing_ok=True)
        self._write_config()
        script = self.folder / "image.sh"
        script.write_text(_IMAGE.format(keygen=KEYGEN, sshd=SSHD))
        binds = " && ".join(f"{MOUNT} --bind {self.root / bound} /{bound}" for bound in BOUND)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root", **self.env,
            "RUNPOD_POD_ID": self.pod_id, "RUNPOD_PUBLIC_IP": self.address, "RUNPOD_TCP_PORT_22": str(self.ssh_port),
        }  # fmt: skip
        output = (self.folder / "container.log").open("ab")
        self.process = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "--", "bash", "-c", f'{binds} && exec bash "$0" "$@"',
             str(script), str(self.folder), self.command], env=env, cwd="/", stdin=subprocess.DEVNULL,
            stdout=output, stderr=output, start_new_session=True,
        )  # fmt: skip
        output.close()
        self.started_at = time.monotonic()
        self._pin_namespace(self.process)

    def _pin_namespace(self, process: subprocess.Popen[bytes]) -> None:
        """Hold the container's mount namespace open once `unshare` has made it (a few ms)."""
        own = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10.0
        while process.poll() is None and time.monotonic() < deadline:
            try:
                link = f"/proc/{process.pid}/ns/mnt"
                if os.readlink(link) != own:
                    fd = os.open(link, os.O_RDONLY)
                    if os.readlink(f"/proc/self/fd/{fd}") != own:
                        self.pin = fd
                        return
                    os.close(fd)
            except OSError:
                pass
            time.sleep(0.005)

    def _namespace(self) -> str:
        """The container's mount namespace ("mnt:[inode]"), or "" while it is not known."""
        if self.pin is not None:
            return os.readlink(f"/proc/self/fd/{self.pin}")
        ns_file = self.folder / "ns"
        return ns_file.read_text().strip() if ns_file.exists() else ""

    def _write_config(self) -> None:
        (self.folder / "sshd_config").write_text(
            f"Port {self.ssh_port}\nListenAddress {self.address}\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
            f"PidFile {self.folder / 'sshd.pid'}\nAuthorizedKeysFile /root/.ssh/authorized_keys\n"
            "StrictModes no\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nUsePAM no\nPermitTTY yes\nX11Forwarding no\nAllowTcpForwarding yes\n"
            "PrintMotd no\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited(self) -> int | None:
        """The main process's exit code once it has exited (the rest of the pod is then halted)."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        self.halt()
        return code

    def host_key(self) -> str | None:
        """The pod's sshd public host key ("ssh-ed25519 AAAA..."), once the image made it."""
        public = self.file("/etc/ssh/ssh_host_ed25519_key.pub")
        return " ".join(public.read_text().split()[:2]) if public.exists() else None

    def ssh_listening(self) -> bool:
        try:
            with socket.create_connection((self.address, self.ssh_port), timeout=2) as sock:
                return sock.recv(8).startswith(b"SSH-")
        except OSError:
            return False

    def halt(self, code: int | None = None) -> None:
        """Kill every process of the pod; `code` is recorded as its exit code when given."""
        process, self.process = self.process, None
        if process is None:
            return
        for _attempt in range(20):
            victims = self._members(process.pid)
            if not victims:
                break
            for pid in victims:
                try:
                    os.killpg(pid, signal.SIGKILL) if pid == process.pid else os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if process.poll() is None:
                try:
                    process.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
        process.wait(30)
        if self.pin is not None:
            os.close(self.pin)
            self.pin = None
        self.exit_codes.append(process.returncode if code is None else code)

    def usage(self) -> tuple[float, float]:
        """The container's (cpuPercent, memoryPercent): its processes' CPU time over its uptime
        (of one core), and their resident memory over the machine's."""
        if self.process is None:
            return 0.0, 0.0
        ticks, pages = 0, 0
        for pid in self._members(self.process.pid):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
                ticks += int(stat[11]) + int(stat[12])
                pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                pass
        uptime = max(time.monotonic() - self.started_at, 0.001)
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        cpu = 100.0 * ticks / os.sysconf("SC_CLK_TCK") / uptime
        # Four places: a shell of a few MiB is 0.01 % of a 24 GiB machine, and two places rounded it to 0.
        return round(cpu, 1), round(100.0 * pages * os.sysconf("SC_PAGE_SIZE") / total, 4)

    def _members(self, main: int) -> list[int]:
        """Every live process of the pod: the main one's group and its mount namespace's members."""
        found: set[int] = set()
        try:
            os.killpg(main, 0)
            found.add(main)
        except (ProcessLookupError, PermissionError):
            pass
        namespace = self._namespace()
        own = os.readlink("/proc/self/ns/mnt")
        if not namespace or namespace == own:
            return sorted(found)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/mnt") == namespace and _alive(int(entry)):
                        found.add(int(entry))
                except OSError:
                    pass
        return sorted(found)


def _alive(pid: int) -> bool:
    """Not a zombie (a zombie has no namespace links, but a racing reader may still see it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False
