"""A stand-in `docker` for running the AWS user-data script on a machine without a Docker
engine: each "container" is a local process. Installed first on PATH by
tests/providers/aws/test_aws_userdata.py; nothing here is a test.

It records every call's argv (one JSON list a line in `$FAKE_DOCKER_STATE/calls.jsonl`) and
serves what the script uses: `pull`; `run -d --name N [opts] IMAGE [args]` (the command runs
with the `-e` env; each `-v host:path` is honoured by rewriting `path` to `host` in the
command's arguments, the one thing a local process cannot have: a mount namespace);
`logs --timestamps --follow N` (Docker's `<RFC 3339 nanoseconds>Z <line>` lines);
`wait N` (prints the exit code); `stop [-t T] N` and `kill [-s SIG] N` (below);
`exec [-i] [-t] N COMMAND...` (COMMAND with N's env, its mounts rewritten; exit 1 if N is
not running); `inspect -f '{{.State.Pid}}' N` (the container process's pid, 0 once it ended).

Signals as Docker delivers them: each container's processes are a process group of their
own (its "pid namespace"), led by the command's process (its "PID 1"). `stop -t T` sends
SIGTERM to that main process only, then SIGKILL to the whole group T seconds later unless
it ended, and returns once it ended (each `stop` has its own timer: a second one with a
shorter T kills sooner); `kill` sends SIGKILL (or `-s SIG`) at once; both answer "No such
container" (exit 1) for a name never run. When the main process
ends, whatever else of the container still runs is killed (as the kernel does when a pid
namespace's init exits). The exit code is Docker's: the code, or 128 + the signal that
killed it (143 for SIGTERM, 137 for SIGKILL). Not modelled: a real PID 1 ignores a signal
it has no handler for, so on Docker a `sleep` run as the container's command outlives
SIGTERM (137 at the end of the grace) where here it dies of it (143).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

_POLL = 0.02
_VALUED = {"--name", "--log-driver", "--gpus", "-p", "-w", "-e", "-v", "--network", "--entrypoint"}


def _state() -> Path:
    return Path(os.environ["FAKE_DOCKER_STATE"])


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _run(argv: list[str]) -> int:
    options: dict[str, list[str]] = {}
    rest = argv
    while rest and rest[0].startswith("-"):
        flag = rest[0]
        if flag in _VALUED:
            options.setdefault(flag, []).append(rest[1])
            rest = rest[2:]
        else:
            rest = rest[1:]
    name = options["--name"][0]
    if (_state() / f"{name}.json").exists():
        print(f"docker: Error response from daemon: Conflict. The container name {name} is already in use.",
              file=sys.stderr)  # fmt: skip
        return 125
    command = options.get("--entrypoint", []) + rest[1:]
    mounts = [volume.split(":")[:2] for volume in options.get("-v", [])]
    for host, path in mounts:
        command = [arg.replace(path, host) for arg in command]
    env = dict(os.environ)
    env.update(item.split("=", 1) for item in options.get("-e", []))  # type: ignore[arg-type]
    spec = {"command": command, "env": env, "mounts": mounts}
    (_state() / f"{name}.json").write_text(json.dumps(spec))
    subprocess.Popen(
        [sys.executable, __file__, "_supervise", name], start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    print(f"fake{name}")
    return 0


def _supervise(name: str) -> int:
    """The container's process, its stamped output to `<name>.log`, its code to `<name>.code`."""
    spec = json.loads((_state() / f"{name}.json").read_text())
    log = (_state() / f"{name}.log").open("ab", buffering=0)
    child = subprocess.Popen(spec["command"], env=spec["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    (_state() / f"{name}.pid.tmp").write_text(str(child.pid))
    (_state() / f"{name}.pid.tmp").rename(_state() / f"{name}.pid")
    assert child.stdout is not None
    for line in iter(child.stdout.readline, b""):
        log.write(f"{_stamp()} ".encode() + line.rstrip(b"\n") + b"\n")
    # The main process has ended but is not reaped yet, so its pid (the group's id) is not
    # another's: the rest of the container dies with it, as a pid namespace does with its init.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    code = child.wait()
    code = 128 - code if code < 0 else code
    (_state() / f"{name}.code.tmp").write_text(str(code))
    (_state() / f"{name}.code.tmp").rename(_state() / f"{name}.code")
    return 0


def _logs(name: str) -> int:
    path = _state() / f"{name}.log"
    while not path.exists():
        time.sleep(_POLL)
    with path.open("rb") as handle:
        while True:
            done = (_state() / f"{name}.code").exists()
            data = handle.read()
            if data:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            elif done:
                return 0
            else:
                time.sleep(_POLL)


def _wait(name: str) -> int:
    code = _state() / f"{name}.code"
    while not code.exists():
        time.sleep(_POLL)
    print(code.read_text().strip())
    return 0


def _signal(name: str, number: int, *, group: bool) -> None:
    """`number` to the container's main process (or its whole group), only while its
    supervisor has not reaped it (no `.code` yet): once it has, the pid may be another's."""
    while not (_state() / f"{name}.pid").exists():  # created, its process starting
        time.sleep(_POLL)
    pid = int((_state() / f"{name}.pid").read_text())
    if (_state() / f"{name}.code").exists():
        return
    try:
        os.killpg(pid, number) if group else os.kill(pid, number)
    except ProcessLookupError:
        pass


def _missing(name: str) -> bool:
    """Docker's answer for a container never created (`docker run` made none of that name)."""
    if (_state() / f"{name}.json").exists():
        return False
    print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
    return True


def _stop(argv: list[str]) -> int:
    grace = float(argv[argv.index("-t") + 1]) if "-t" in argv else 10.0
    name = argv[-1]
    if _missing(name):
        return 1
    _signal(name, signal.SIGTERM, group=False)
    deadline = time.monotonic() + grace
    killed = False
    while not (_state() / f"{name}.code").exists():
        if time.monotonic() >= deadline and not killed:
            _signal(name, signal.SIGKILL, group=True)
            killed = True
        time.sleep(_POLL)
    print(name)
    return 0


def _kill(argv: list[str]) -> int:
    asked = argv[argv.index("-s") + 1].upper().removeprefix("SIG") if "-s" in argv else "KILL"
    number = signal.Signals[f"SIG{asked}"]
    name = argv[-1]
    if _missing(name):
        return 1
    _signal(name, number, group=number == signal.SIGKILL)
    print(name)
    return 0


def _exec(argv: list[str]) -> int:
    rest = [arg for arg in argv if arg not in ("-i", "-t")]
    name, command = rest[0], rest[1:]
    spec = _state() / f"{name}.json"
    if not spec.exists() or (_state() / f"{name}.code").exists():
        print(f"Error response from daemon: container {name} is not running", file=sys.stderr)
        return 1
    values = json.loads(spec.read_text())
    for host, path in values["mounts"]:
        command = [arg.replace(path, host) for arg in command]
    return subprocess.run(command, env=values["env"]).returncode


def _inspect(argv: list[str]) -> int:
    """Only `inspect -f '{{.State.Pid}}' N`: the container's process, 0 once it ended (as Docker)."""
    if argv[:2] != ["-f", "{{.State.Pid}}"]:
        print("fake docker: inspect serves only -f '{{.State.Pid}}'", file=sys.stderr)
        return 2
    name = argv[-1]
    pid, ended = _state() / f"{name}.pid", (_state() / f"{name}.code").exists()
    print(pid.read_text().strip() if pid.exists() and not ended else "0")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] != ["_supervise"]:
        with (_state() / "calls.jsonl").open("a") as calls:
            calls.write(json.dumps(argv) + "\n")
    verb, rest = argv[0], argv[1:]
    if verb == "pull":
        return 0
    if verb == "run":
        return _run(rest)
    if verb == "_supervise":
        return _supervise(rest[0])
    if verb == "logs":
        return _logs(rest[-1])
    if verb == "wait":
        return _wait(rest[-1])
    if verb == "stop":
        return _stop(rest)
    if verb == "kill":
        return _kill(rest)
    if verb == "exec":
        return _exec(rest)
    if verb == "inspect":
        return _inspect(rest)
    print(f"fake docker: {verb} is not served", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
