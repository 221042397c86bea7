"""The user-data of a Pod with init containers, a native sidecar, two app containers and
volumes, run for real: `bash` executes the rendered script in a temporary folder standing
for `/`, with a fake `docker` (tests/providers/aws/fake_docker.py) first on PATH.

The boundary we cannot reach here: there is no Docker engine on this machine, so each
"container" is a local process the fake starts (its `-v` mounts honoured by rewriting the
mount path to the host folder in its arguments), and `systemctl`, `service`, `mount` and
`shutdown` are recorders. Everything else is the script itself: the order it starts and
waits for containers in, the volume files and modes it writes, the per-container log files
and exit records, and the console markers the provider reads back (`providers.aws.containers`).
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.aws import containers, logs
from providers.aws.exits import exit_code_in
from providers.aws.mounts import VOLUME_DIR
from providers.base import PodSpec
from providers.shape import Mount, Volume, VolumeFile
from tests.providers.aws.vm_script import Vm, name_of, pod_of, render, runs_of, sh, temporary_vm

SECRET = b"t0ken 'with' $quotes\n"


@pytest.fixture
def vm(tmp_path: Path) -> Iterator[Vm]:
    with temporary_vm(tmp_path) as made:
        yield made


def render_with_token(vm: Vm, pod: PodSpec, volumes: tuple[Volume, ...] = ()) -> str:
    return render(vm, pod, volumes, env={"main": {"TOKEN": SECRET.decode()}})


CACHE = Mount("cache", "/cache")
VOLUMES = (
    Volume("config", "configMap", files=(VolumeFile("app.conf", b"mode: test\n", 0o644),
                                         VolumeFile("nested/deep.conf", b"deep\n", 0o600))),
    Volume("token", "secret", files=(VolumeFile("token", SECRET, 0o400),)),
    Volume("cache", "emptyDir"),
)  # fmt: skip
MAIN = sh(
    'echo main >> "$ORDER"; cat /etc/app/app.conf; cat /cache/model; '
    '[ "$(cat /etc/token/token)" = "$(printf "%s" "$TOKEN")" ] && echo token matches; echo "main is $WHO"',
    mounts=(Mount("config", "/etc/app", read_only=True), Mount("token", "/etc/token/token", "token", True), CACHE),
    name="main",
)  # fmt: skip
SIDE = sh('echo side >> "$ORDER"; echo side failing; exit 3', name="side")
FETCH = sh('echo fetch >> "$ORDER"; echo weights > /cache/model; echo fetched', mounts=(CACHE,), name="fetch")
# The sidecar says it is up once its TERM trap is set; the init container after it waits for
# that (as one would for a sidecar it uses), so the stop cannot beat the trap.
METRICS = sh(
    """trap 'echo metrics-stopped >> "$ORDER"; echo metrics stopping; exit 0' TERM; echo metrics up
touch "$ORDER.up"; while :; do sleep 0.05; done""",
    sidecar=True, name="metrics",
)  # fmt: skip
AFTER_METRICS = 'until [ -e "$ORDER.up" ]; do sleep 0.02; done; '
MIGRATE = sh(AFTER_METRICS + 'echo migrate >> "$ORDER"', name="migrate")


def test_the_script_of_several_containers_is_valid_bash(tmp_path: Path) -> None:
    vm = Vm(tmp_path, tmp_path, tmp_path, tmp_path, {})
    script = render_with_token(vm, pod_of(init=(FETCH, METRICS, MIGRATE), apps=(MAIN, SIDE)), VOLUMES)
    checked = subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True, timeout=30)
    assert checked.returncode == 0, checked.stderr.decode()


def test_init_containers_run_in_order_to_completion_then_the_apps_start_and_the_sidecar_stops_after_them(
    vm: Vm,
) -> None:
    result = vm.run(render_with_token(vm, pod_of(init=(FETCH, METRICS, MIGRATE), apps=(MAIN, SIDE)), VOLUMES))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert [name_of(argv) for argv in runs_of(vm)] == [f"nebula-{n}" for n in ("fetch", "metrics", "migrate", "main",
                                                                              "side")]  # fmt: skip
    order = vm.order.read_text().split()
    assert order[:2] == ["fetch", "migrate"] and sorted(order[2:4]) == ["main", "side"]
    assert order[4:] == ["metrics-stopped"]  # stopped only once both app containers had exited
    calls = [" ".join(argv) for argv in vm.calls()]
    assert calls.index("wait nebula-fetch") < calls.index(next(c for c in calls if "nebula-migrate" in c))
    assert vm.system_log.read_text().splitlines()[-1] == "shutdown -h now"


def test_volumes_are_written_with_their_modes_and_bind_mounted_where_each_container_asks(vm: Vm) -> None:
    result = vm.run(render_with_token(vm, pod_of(init=(FETCH,), apps=(MAIN, SIDE)), VOLUMES))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    folder = f"{vm.root}{VOLUME_DIR}"
    modes = {path: stat.S_IMODE(vm.file(f"{VOLUME_DIR}/{path}").stat().st_mode)
             for path in ("config/app.conf", "config/nested/deep.conf", "token/token")}  # fmt: skip
    assert modes == {"config/app.conf": 0o644, "config/nested/deep.conf": 0o600, "token/token": 0o400}
    assert vm.file(f"{VOLUME_DIR}/token/token").read_bytes() == SECRET
    main = next(argv for argv in runs_of(vm) if name_of(argv) == "nebula-main")
    mounts = [main[i + 1] for i, arg in enumerate(main) if arg == "-v"]
    assert mounts == [
        f"{folder}/config:/etc/app:ro",
        f"{folder}/token/token:/etc/token/token:ro",
        f"{folder}/cache:/cache",
    ]
    assert main[main.index("--network") + 1] == "host"
    assert f"mount -t tmpfs -o mode=0755 tmpfs {folder}/token" in vm.system_log.read_text()
    # What main read through its mounts: the ConfigMap, the emptyDir the init container wrote, the Secret.
    lines = [line.split(" ", 1)[1] for line in vm.file("/var/log/nebula/main.log").read_text().splitlines()]
    assert lines == ["mode: test", "weights", "token matches", "main is main"]


def test_each_container_has_its_stamped_log_its_exit_record_and_console_markers_and_no_secret_reaches_them(
    vm: Vm,
) -> None:
    result = vm.run(render_with_token(vm, pod_of(init=(FETCH, METRICS, MIGRATE), apps=(MAIN, SIDE)), VOLUMES))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    exits = {name: vm.file(f"/var/log/nebula/{name}.exit").read_text().strip()
             for name in ("fetch", "metrics", "migrate", "main", "side")}  # fmt: skip
    assert exits == {"fetch": "0", "metrics": "0", "migrate": "0", "main": "0", "side": "3"}
    side_log = vm.file("/var/log/nebula/side.log").read_bytes()
    stamp, _, text = side_log.partition(b" ")
    assert text == b"side failing\n" and stamp.endswith(b"Z") and stamp[10:11] == b"T"
    output = vm.console()
    events = containers.events_in(output)
    codes = {name: event.exit_code for name, event in events.items()}
    assert codes == {"fetch": 0, "metrics": 0, "migrate": 0, "main": 0, "side": 3}
    assert all(event.started_at is not None and event.finished_at is not None for event in events.values())
    assert exit_code_in(output) == 3  # the workload's: the first non-zero code
    assert logs.lines_of(output, b"side ") == side_log
    everything = output + b"".join(path.read_bytes() for path in vm.file("/var/log/nebula").iterdir())
    assert SECRET.strip() not in everything


def test_a_failing_init_container_ends_the_sequence_and_its_code_is_the_workloads(vm: Vm) -> None:
    failing = sh(AFTER_METRICS + 'echo fetch >> "$ORDER"; echo no weights; exit 2', name="fetch")
    result = vm.run(render_with_token(vm, pod_of(init=(METRICS, failing, MIGRATE), apps=(MAIN, SIDE)), VOLUMES))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert [name_of(argv) for argv in runs_of(vm)] == ["nebula-metrics", "nebula-fetch"]
    assert vm.order.read_text().split() == ["fetch", "metrics-stopped"]
    events = containers.events_in(vm.console())
    assert sorted(events) == ["fetch", "metrics"] and events["fetch"].exit_code == 2
    assert exit_code_in(vm.console()) == 2
    assert not vm.file("/var/log/nebula/main.log").exists()


def test_a_pod_of_one_container_gets_its_volumes_mounted_and_keeps_the_one_workload_log(vm: Vm) -> None:
    reader = sh("cat /etc/app/app.conf; ls /etc/app/nested", mounts=(Mount("config", "/etc/app", read_only=True),),
                name="main")  # fmt: skip
    result = vm.run(render(vm, pod_of(init=(), apps=(reader,)), VOLUMES[:1]))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    (run,) = runs_of(vm)
    assert name_of(run) == "nebula-workload" and f"{vm.root}{VOLUME_DIR}/config:/etc/app:ro" in run
    lines = [line.split(" ", 1)[1] for line in vm.file("/var/log/nebula/workload.log").read_text().splitlines()]
    assert lines == ["mode: test", "deep.conf"]
    assert exit_code_in(vm.console()) == 0 and containers.events_in(vm.console()) == {}
