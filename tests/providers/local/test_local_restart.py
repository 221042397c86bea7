"""Restart in place with real processes: the workload runs again in the same instance, the
ended run's output is served as `--previous`, the run count persists, one workload at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState, LogOptions, ProvisionRequest
from providers.errors import InvalidRequest, NotFound, ProviderError
from providers.local import LocalProvider, folder
from tests.support.factories import make_pod_spec
from tests.support.local_cleanup import kill_leftovers, live_supervisors
from tests.support.polling import wait_for

CLAIM = ClaimName("ns-pod-abcdefghij")
SECRET = "restart-s3cr3t"
ROOT = Path(__file__).resolve().parents[3]
# Run 1 exits 3 at once; every later run stays up. Each start appends a line to `starts`
# (in the instance folder, the workload's cwd) and writes what env it saw to `token.<n>`.
COUNTING = (
    'echo x >> starts; n=$(wc -l < starts); printf %s "$TOKEN" > token.$n; echo "run $n"; '
    '[ "$n" -ge 2 ] && exec sleep 300; exit 3'
)


@pytest.fixture
def options(tmp_path: Path) -> Iterator[dict[str, object]]:
    options: dict[str, object] = {"state_dir": str(tmp_path), "grace_period": 1}
    yield options
    provider = LocalProvider("local", options)
    for instance in provider.list():
        provider.terminate(instance.id)
    kill_leftovers(tmp_path)


@pytest.fixture
def provider(options: dict[str, object]) -> LocalProvider:
    return LocalProvider("local", options)


def start(provider: LocalProvider, script: str = COUNTING, **pod: object) -> InstanceId:
    spec = make_pod_spec(args=(script,), **pod)
    return provider.provision(spec, ProvisionRequest(CLAIM, env={"TOKEN": SECRET})).instance_id


def in_state(provider: LocalProvider, instance_id: InstanceId, *states: InstanceState) -> Instance | None:
    instance = provider.get(instance_id)
    return instance if instance is not None and instance.state in states else None


def ended(provider: LocalProvider, instance_id: InstanceId) -> Instance:
    found: Instance = wait_for(lambda: in_state(provider, instance_id, InstanceState.SUCCEEDED, InstanceState.FAILED))
    return found


def read_all(provider: LocalProvider, instance_id: InstanceId, **options: object) -> bytes:
    stream = provider.logs(instance_id, LogOptions(**options))  # type: ignore[arg-type]
    chunks = []
    while chunk := stream.read():
        chunks.append(chunk)
    stream.close()
    return b"".join(chunks)


def test_restart_runs_the_workload_again_and_serves_the_ended_runs_output_as_previous(
    provider: LocalProvider, options: dict[str, object]
) -> None:
    instance_id = start(provider)
    first = ended(provider, instance_id)
    assert (first.state, first.exit_code, first.runs) == (InstanceState.FAILED, 3, 1)
    provider.restart(instance_id)
    at_once = provider.get(instance_id)
    assert at_once is not None and at_once.runs == 2
    assert at_once.state in (InstanceState.INITIALIZING, InstanceState.RUNNING) and at_once.exit_code is None
    wait_for(lambda: read_all(provider, instance_id) == b"run 2\n")
    path = provider.root / CLAIM
    assert (path / "starts").read_text() == "x\nx\n" and (path / "token.2").read_text() == SECRET
    assert read_all(provider, instance_id, previous=True) == b"run 1\n"
    assert read_all(provider, instance_id, previous=True, follow=True) == b"run 1\n"  # ends at its end
    assert read_all(provider, instance_id, previous=True, tail_lines=0) == b""
    stamped = read_all(provider, instance_id, previous=True, timestamps=True)
    assert stamped.endswith(b"Z run 1\n") and len(stamped) == len(b"run 1\n") + 31
    again = LocalProvider("local", options).get(instance_id)  # a restarted manager
    assert again is not None and again.runs == 2 and again.state is InstanceState.RUNNING
    assert again.started_at is not None and first.finished_at is not None and again.started_at >= first.finished_at


def test_restart_of_a_workload_that_has_not_ended_is_an_invalid_request(provider: LocalProvider) -> None:
    instance_id = start(provider, "exec sleep 300")
    wait_for(lambda: in_state(provider, instance_id, InstanceState.RUNNING))
    with pytest.raises(InvalidRequest, match="is running: only a workload that ended is restarted"):
        provider.restart(instance_id)
    instance = provider.get(instance_id)
    assert instance is not None and instance.runs == 1 and not (provider.root / CLAIM / "previous").exists()


def test_restart_of_an_unknown_or_terminated_instance_is_not_found(provider: LocalProvider) -> None:
    with pytest.raises(NotFound):
        provider.restart(InstanceId(folder.instance_id_for(provider.owner.key, "nothing-here")))
    instance_id = start(provider, "true")
    ended(provider, instance_id)
    provider.terminate(instance_id)
    with pytest.raises(NotFound):
        provider.restart(instance_id)


def test_previous_without_a_previous_run_is_not_found(provider: LocalProvider) -> None:
    instance_id = start(provider, "echo once")
    ended(provider, instance_id)
    with pytest.raises(NotFound, match="no previous run"):
        provider.logs(instance_id, LogOptions(previous=True))


def test_only_the_run_before_the_current_one_is_kept(provider: LocalProvider) -> None:
    instance_id = start(provider, 'echo x >> starts; echo "run $(wc -l < starts)"')
    for _ in range(2):
        ended(provider, instance_id)
        provider.restart(instance_id)
    instance = ended(provider, instance_id)
    assert (instance.runs, instance.state, instance.exit_reason) == (3, InstanceState.SUCCEEDED, "Completed")
    assert read_all(provider, instance_id) == b"run 3\n"
    assert read_all(provider, instance_id, previous=True) == b"run 2\n"


RESTART_IN_A_PROCESS = """
import sys
from providers.base import InstanceId
from providers.errors import InvalidRequest
from providers.local import LocalProvider
provider = LocalProvider("local", {"state_dir": sys.argv[1], "grace_period": 1})
print("ready", flush=True)
sys.stdin.readline()
try:
    provider.restart(InstanceId(sys.argv[2]))
    print("restarted", flush=True)
except InvalidRequest:
    print("refused", flush=True)
"""


def test_concurrent_restarts_from_threads_and_processes_start_one_workload(
    provider: LocalProvider, options: dict[str, object]
) -> None:
    """However many threads and processes restart one ended instance at once, one of them
    starts the next run and every other finds it running (InvalidRequest)."""
    instance_id = start(provider)
    ended(provider, instance_id)
    others = [
        subprocess.Popen(
            [sys.executable, "-c", RESTART_IN_A_PROCESS, str(options["state_dir"]), instance_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        for _ in range(2)
    ]
    for other in others:
        assert other.stdout is not None and other.stdout.readline() == b"ready\n"
    outcomes: list[str] = []
    gate = threading.Barrier(5)

    def restart() -> None:
        gate.wait()
        try:
            provider.restart(instance_id)
            outcomes.append("restarted")
        except ProviderError as exc:
            outcomes.append("refused" if isinstance(exc, InvalidRequest) else repr(exc))

    threads = [threading.Thread(target=restart) for _ in range(4)]
    for thread in threads:
        thread.start()
    for other in others:
        assert other.stdin is not None
        other.stdin.write(b"go\n")
        other.stdin.flush()
    gate.wait()
    for thread in threads:
        thread.join()
    for other in others:
        out, _ = other.communicate(timeout=60)
        outcomes.append(out.decode().strip())
    assert sorted(outcomes) == ["refused"] * 5 + ["restarted"]
    wait_for(lambda: in_state(provider, instance_id, InstanceState.RUNNING))
    path = provider.root / CLAIM
    # Running says the process started, not that its first line ran: wait for its mark (a
    # stress run read the file between the two), then check no third run ever started.
    wait_for(lambda: (path / "starts").read_text() != "x\n", what="the second run's first line")
    assert (path / "starts").read_text() == "x\nx\n" and len(live_supervisors(path)) == 1
    instance = provider.get(instance_id)
    assert instance is not None and instance.runs == 2


def test_a_restart_cut_short_after_its_commit_is_completed_by_the_next_observer(
    provider: LocalProvider, options: dict[str, object]
) -> None:
    """As if the manager died right after writing the next run's number: the old run's records
    are stale, so the instance reads as a launch not yet begun, and the next provider object
    to look launches run 2 with an empty log, run 1's kept as previous."""
    instance_id = start(provider)
    ended(provider, instance_id)
    path = provider.root / CLAIM
    lock = wait_for(lambda: folder.take_launch_lock(path))  # the ended run's supervisor let go
    (path / "previous").mkdir()
    for name in (folder.LOG_FILE, folder.LOG_INDEX_FILE):
        os.link(path / name, path / "previous" / name)
    folder.write_json_atomic(path / folder.RUNS_FILE, {"runs": 2})
    lock.close()
    observer = LocalProvider("local", options)
    waiting = observer.get(instance_id)
    assert waiting is not None and waiting.runs == 2 and waiting.exit_code is None
    assert waiting.state in (InstanceState.PROVISIONING, InstanceState.INITIALIZING, InstanceState.RUNNING)
    wait_for(lambda: in_state(observer, instance_id, InstanceState.RUNNING))
    wait_for(lambda: read_all(observer, instance_id) == b"run 2\n")
    assert read_all(observer, instance_id, previous=True) == b"run 1\n"
    assert (path / "starts").read_text() == "x\nx\n" and len(live_supervisors(path)) == 1


def test_after_a_restart_an_old_follower_ends_and_attach_reaches_the_new_run(provider: LocalProvider) -> None:
    """A follow opened on run 1 ends once run 2 begins (it never hangs on a log that gets no
    more output); attach after the restart talks to run 2's stdin and console."""
    instance_id = start(provider, 'echo x >> starts; [ "$(wc -l < starts)" -ge 2 ] && exec cat; exit 0', stdin=True)
    ended(provider, instance_id)
    follower = provider.logs(instance_id, LogOptions(follow=True))
    provider.restart(instance_id)
    wait_for(lambda: in_state(provider, instance_id, InstanceState.RUNNING))
    assert follower.read() == b"" and read_all(provider, instance_id) == b""
    follower.close()
    attachment = provider.attach(instance_id, stdin=True, tty=False)
    try:
        attachment.write_stdin(b"ping\n")
        assert attachment.read_stdout() == b"ping\n"
        assert attachment.wait(timeout=0) is None
    finally:
        attachment.close()
