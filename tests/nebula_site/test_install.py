"""`pip install .` gives a working `nebula` command: the wheel built from a copy of the
checkout, installed (without its dependencies) into a fresh virtualenv that sees this one's
packages through a `.pth` file, then `nebula --version` and `nebula run --dev-cluster` from an
empty folder: the console answers and renders its pages from the installed package's templates
(top-level templates/ in the checkout), the node is there, SIGTERM exits 0. Nothing of the
checkout is on the installed command's path, and nothing is built inside the checkout."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.clients.kubectl import KUBECTL_137
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nebula_site", "console", "vnode", "placement", "providers", "kube", "devcluster")
# What the build reads: the packages, the metadata, and the templates, CRD and manifests the package links to.
SOURCES = (*PACKAGES, "pyproject.toml", "requirements.txt", "README.md", "templates", "deploy/crds")
SOURCES += ("deploy/base/console-roles.yaml", "deploy/webhook")


@dataclass(frozen=True)
class Installed:
    venv: Path
    nebula: Path
    site_packages: Path


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def clean_env(home: Path) -> dict[str, str]:
    """No settings, database or kubeconfig of the test run leak into the installed command."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "NEBULA_", "KUBERNETES_", "PYTHON")) and k != "KUBECONFIG"
    }
    return {**env, "HOME": str(home)}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("install")
    source = base / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=ignore)
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = base / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", wheels, source, cwd=base)
    (wheel,) = wheels.glob("nebula-*.whl")
    venv = base / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=base)
    python = venv / "bin" / "python"
    site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=base).strip())
    # This venv's packages (Django, kubernetes, ...) without downloading them again; after the
    # fresh venv's own site-packages on sys.path, so the installed Nebula is the one imported.
    (site_packages / "shared-venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--quiet", wheel, cwd=base)
    return Installed(venv, venv / "bin" / "nebula", site_packages)


@pytest.mark.slow
def test_nebula_version_is_the_package_metadata_and_the_code_comes_from_the_install(
    installed: Installed, tmp_path: Path
) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert run(installed.nebula, "--version", cwd=tmp_path, env=clean_env(tmp_path)).strip() == f"nebula {version}"
    where = run(
        installed.venv / "bin" / "python", "-c", "import nebula_site; print(nebula_site.__file__)", cwd=tmp_path
    )
    assert Path(where.strip()).is_relative_to(installed.site_packages)
    assert "usage: nebula <command>" in run(installed.nebula, cwd=tmp_path, env=clean_env(tmp_path))


@pytest.mark.slow
def test_the_installed_crd_is_deploys_file_and_templates_ship(installed: Installed) -> None:
    crd = installed.site_packages / "nebula_site" / "crds" / "nodepool.yaml"
    assert not crd.is_symlink()
    assert crd.read_bytes() == (ROOT / "deploy" / "crds" / "nodepool.yaml").read_bytes()
    assert (installed.site_packages / "nebula_site" / "templates" / "console" / "dashboard.html").is_file()
    assert (installed.site_packages / "console" / "migrations" / "0001_initial.py").is_file()


RENDER = """
import django
from django.template.loader import get_template
django.setup()
template = get_template("console/dashboard.html")
print(template.origin.name)
print(template.render({"refresh_seconds": 5}))
"""


@pytest.mark.slow
def test_the_installed_package_renders_the_dashboard_from_its_own_templates(
    installed: Installed, tmp_path: Path
) -> None:
    env = {**clean_env(tmp_path), "DJANGO_SETTINGS_MODULE": "nebula_site.settings"}
    origin, _, page = run(installed.venv / "bin" / "python", "-c", RENDER, cwd=tmp_path, env=env).partition("\n")
    assert Path(origin).is_relative_to(installed.site_packages / "nebula_site" / "templates")
    assert not Path(origin).is_relative_to(ROOT)
    assert "<title>Nebula console</title>" in page


@pytest.fixture
def nebula_run(installed: Installed, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "run.log"
    folder = tmp_path / "empty"
    folder.mkdir()
    argv = [str(installed.nebula), "run", "--dev-cluster", "--dev-cluster-addr", "127.0.0.1:0"]
    argv += ["--provider", "local", "--console-addr", "127.0.0.1:0"]
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=folder, env=clean_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process, folder
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)


@pytest.mark.slow
def test_nebula_run_from_an_empty_folder_serves_the_console_and_the_node_and_stops_cleanly(
    nebula_run: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, folder = nebula_run
    log = folder.parent / "run.log"
    started = wait_for(
        lambda: re.search(r"console (http://127\.0\.0\.1:\d+)", log.read_text()) if "virtual nodes:" in log.read_text()
        else None,
        90, 0.1, what="nebula run's start-up lines",
    )  # fmt: skip
    console = started.group(1)
    with urllib.request.urlopen(f"{console}/healthz", timeout=30) as answer:
        assert answer.status == 200
    with urllib.request.urlopen(f"{console}/", timeout=30) as answer:  # to the login page, our own template
        assert answer.status == 200 and 'id="kube-token-row"' in answer.read().decode()
    kubeconfig = folder / ".nebula" / "kubeconfig"
    env = {**os.environ, "HOME": str(folder.parent)}

    def kubectl(*args: str) -> str:
        result = subprocess.run(
            [KUBECTL_137, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, env=env, timeout=60
        )
        return result.stdout if result.returncode == 0 else ""

    wait_for(lambda: "nebula-local" in kubectl("get", "node", "nebula-local", "-o", "name"), 60, 0.2, what="the node")
    assert "nodepools" in kubectl("api-resources", "--api-group", "nebula.io", "-o", "name")  # the packaged CRD
    assert (folder / ".nebula" / "console.sqlite3").is_file()  # the database in the working folder
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, log.read_text()
