"""What the `Dockerfile`'s final stage gives a container: its entry point, command, working
directory, user and environment, read from the file as `docker build` would record them in
the image config (exec-form ENTRYPOINT/CMD, `ENV K=V ...` with `$VAR` from earlier ENVs).

Used by tests/support/deploy/kubelet.py, which runs a container of the rendered Deployment the way
the kubelet runs it on this image; nothing here is a test.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# Docker's PATH for an image that sets none (the python:*-slim images keep it, adding /usr/local/bin first).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    workdir: str
    user: str
    env: dict[str, str] = field(default_factory=dict)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuations joined, comments and blank lines dropped."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        joined.append(pending + line)
        pending = ""
    result = []
    for line in joined:
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def _exec_form(text: str, instruction: str) -> tuple[str, ...]:
    try:
        value = json.loads(text)
    except ValueError:
        raise AssertionError(f"{instruction} {text!r}: only the exec form (a JSON list) is supported here") from None
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"{instruction} {text!r}"
    return tuple(value)


def _expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def image_config(dockerfile: Path) -> ImageConfig:
    """The final stage's config (what `docker inspect` would show for the built image)."""
    stages: list[list[tuple[str, str]]] = []
    for word, rest in instructions(dockerfile.read_text()):
        if word == "FROM":
            stages.append([])
        elif stages:
            stages[-1].append((word, rest))
    assert stages, f"{dockerfile}: no FROM"
    env = {"PATH": BASE_PATH}
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir, user = "/", "root"
    for word, rest in stages[-1]:
        if word == "ENV":
            for pair in shlex.split(rest):
                key, equals, value = pair.partition("=")
                assert equals, f"ENV {rest!r}: only the KEY=VALUE form is supported here"
                env[key] = _expand(value, env)
        elif word == "WORKDIR":
            workdir = rest if rest.startswith("/") else f"{workdir.rstrip('/')}/{rest}"
        elif word == "USER":
            user = rest
        elif word == "ENTRYPOINT":
            entrypoint, cmd = _exec_form(rest, word), ()  # a new ENTRYPOINT resets CMD, as Docker does
        elif word == "CMD":
            cmd = _exec_form(rest, word)
    return ImageConfig(entrypoint=entrypoint, cmd=cmd, workdir=workdir, user=user, env=env)
