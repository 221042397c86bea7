"""The Dockerfile, checked without a Docker engine: its shape (slim Python 3.11, multi-stage,
non-root, no build tools or HEALTHCHECK, `manage.py runvnode` as the entry point), and the
image's file set, staged from the build context as `.dockerignore` filters it, which must be
enough for the entry point to parse `--help` and for Django's deploy checks to pass."""

from __future__ import annotations

import functools
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.deploy import image as image_config
from tests.support.deploy.manifests import ROOT, find, manager_container, render
from tests.support.mirror_db import interrupt_after_commit

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
BUILD_TOOLS = ("gcc", "g++", "make", "build-essential", "clang", "cargo", "rustc", "libc6-dev", "python3-dev")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    return image_config.instructions(DOCKERFILE.read_text())


def stages() -> list[list[tuple[str, str]]]:
    """Instructions grouped by FROM (the ARGs before the first FROM are dropped)."""
    grouped: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            grouped.append([])
        if grouped:
            grouped[-1].append(instruction)
    return grouped


def base_images() -> list[str]:
    """Each stage's base image, with the ARG defaults before the first FROM substituted."""
    args: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key] = value
    images = []
    for stage in stages():
        image = stage[0][1].split()[0]
        images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[str(m.group(1))], image))
    return images


def test_both_stages_build_from_slim_python_3_11() -> None:
    assert len(stages()) >= 2
    for image in base_images():
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", image), image


def test_the_final_stage_runs_runvnode_as_a_non_root_user_without_healthcheck() -> None:
    final = stages()[-1]
    users = [rest for word, rest in final if word == "USER"]
    assert users, "the final stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    (entrypoint,) = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entrypoint.startswith("["), "exec form, so SIGTERM reaches the manager"
    assert re.findall(r'"([^"]*)"', entrypoint) == ["python", "manage.py", "runvnode"]
    assert all(word != "HEALTHCHECK" for word, _ in instructions())
    assert [rest for word, rest in final if word == "WORKDIR"] == ["/app"]


def test_no_build_tools_or_package_installs_reach_the_final_stage() -> None:
    final = stages()[-1]
    for word, rest in final:
        if word == "RUN":
            assert not re.search(r"\b(apt-get|apt|apk|pip)\b\s+install", rest), rest
            assert not any(re.search(rf"\b{re.escape(tool)}\b", rest) for tool in BUILD_TOOLS), rest
        if word == "COPY" and "--from=" in rest:
            assert rest.split()[1] in ("/opt/venv", "/app"), rest


def test_the_dependencies_come_from_wheels_pinned_in_requirements_txt() -> None:
    build = "\n".join(rest for word, rest in stages()[0] if word == "RUN")
    assert "--only-binary=:all:" in build and "--requirement /tmp/requirements.txt" in build
    pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert pins and all("==" in pin for pin in pins)


def test_the_image_listens_where_the_deployment_expects() -> None:
    exposed = {int(p) for word, rest in instructions() if word == "EXPOSE" for p in rest.split()}
    ports = {p["containerPort"] for p in manager_container(render("production"))["ports"]}
    assert exposed == ports


# -- the build context ------------------------------------------------------------------------
def _pattern(pattern: str) -> re.Pattern[str]:
    text = re.escape(pattern.strip().rstrip("/"))
    text = text.replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    return re.compile(text)


def ignored(relative: str, rules: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for rule in rules:
        negated = rule.startswith("!")
        pattern = _pattern(rule[1:] if negated else rule)
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return excluded


@functools.cache
def context_files() -> list[str]:
    """Files `docker build` sends, as .dockerignore filters the repository (cached: the walk
    skips a folder only when it is ignored and no rule could let something under it back in)."""
    rules = [r.strip() for r in DOCKERIGNORE.read_text().splitlines() if r.strip() and not r.startswith("#")]
    negations = [r[1:].rstrip("/") for r in rules if r.startswith("!")]
    found = []
    for folder, dirs, files in os.walk(ROOT):
        base = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = [
            d for d in dirs if not ignored(prefix + d, rules) or any(n.startswith(prefix + d + "/") for n in negations)
        ]
        found += [prefix + f for f in files if not ignored(prefix + f, rules)]
    return sorted(found)


def test_every_file_the_build_copies_by_name_is_in_the_context() -> None:
    files = set(context_files())
    for word, rest in instructions():
        if word == "COPY" and "--from=" not in rest:
            *sources, _destination = shlex.split(rest)
            for source in sources:
                if source != ".":
                    assert source in files, f"COPY {source}: missing from the build context"


def test_the_context_holds_no_tests_local_state_or_the_embedded_cluster() -> None:
    files = context_files()
    assert "manage.py" in files and "nebula_site/settings.py" in files
    forbidden = ("tests/", "bench/", "devcluster/", ".nebula/", "docs/", "deploy/", ".ci/")
    assert [f for f in files if f.startswith(forbidden) or "__pycache__" in f] == []


@pytest.fixture(scope="module")
def staged_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/app as the image has it: the build context after .dockerignore."""
    app = tmp_path_factory.mktemp("image") / "app"
    for relative in context_files():
        target = app / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    return app


def image_env(app: Path) -> dict[str, str]:
    """The environment the production Deployment gives the container."""
    settings = find(render("production"), "ConfigMap", "nebula-settings")["data"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NEBULA_", "PYTHONPATH"))}
    env.update(settings)
    env.update(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        NEBULA_DB_PATH=str(app / ".nebula" / "console.sqlite3"),
        NEBULA_STATE_DIR=str(app / ".nebula" / "state"),
    )
    return env


def run_in_image(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=app,
        env=image_env(app),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_entry_point_parses_help_from_the_image_files(staged_image: Path) -> None:
    result = run_in_image(staged_image, "runvnode", "--help")
    assert result.returncode == 0, result.stderr
    assert "--kubelet-addr" in result.stdout


def test_the_image_files_pass_the_deploy_checks_under_production_settings(staged_image: Path) -> None:
    result = run_in_image(staged_image, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("vnode/handler.py", False),
        ("vnode/__pycache__/kube.cpython-311.pyc", True),
        ("tests/deploy/test_dockerfile.py", True),
        ("devcluster/api.py", True),
        ("manage.py", False),
        ("README.md", True),
    ],
)
def test_the_context_filter_follows_dockers_last_match_rule(path: str, expected: bool) -> None:
    rules = ["*", "!manage.py", "!vnode/", "**/__pycache__"]
    assert ignored(path, rules) is expected


def test_the_init_container_migrates_the_console_database_from_the_image_files(staged_image: Path) -> None:
    (init,) = find(render("production"), "Deployment", "nebula-manager")["spec"]["template"]["spec"]["initContainers"]
    program, script, *args = init["command"]
    assert (program, script) == ("python", "manage.py")
    (staged_image / ".nebula").mkdir(exist_ok=True)  # the emptyDir the Deployment mounts there
    result = run_in_image(staged_image, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    database = staged_image / ".nebula" / "console.sqlite3"
    assert database.stat().st_size > 0
    # Killed between a migration's commit and its record, the init container restarts on
    # the same emptyDir and must not fail there forever.
    interrupt_after_commit(database)
    again = run_in_image(staged_image, *args)
    assert again.returncode == 0, again.stdout + again.stderr
