"""`pip install .` gives a working `nebula` command: the wheel built from a copy of the
checkout, installed (without its dependencies) into a fresh virtualenv that sees this one's
packages through a `.pth` file, then `nebula --version` and `nebula run --dev-cluster` from an
empty folder: the console answers and renders its pages from the installed package's templates
(top-level templates/ in the checkout), the node is there, SIGTERM exits 0. Nothing of the
checkout is on the installed command's path, and nothing is built inside the checkout.

The slim install: the built metadata has the cloud SDKs only as the extras aws, modal and runpod
(each from its requirements-<extra>.txt); a provider whose SDK is missing says which extra it
needs in one line; the local path (runvnode, the local and fake providers, the system checks)
imports no SDK. The package counts of a real `pip install .` are in docs/development.md."""

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
# The requirements of each extra (pyproject.toml reads them), aws, modal and runpod in that order.
REQUIREMENTS_EXTRAS = ("requirements-aws.txt", "requirements-modal.txt", "requirements-runpod.txt")
# What the build reads: the packages, the metadata and its requirements files, and the templates
# CRD and manifests the package links to.
METADATA = ("pyproject.toml", "requirements.txt", *REQUIREMENTS_EXTRAS, "README.md")
SOURCES = (*PACKAGES, *METADATA, "templates", "deploy/crds", "deploy/base/console-roles.yaml", "deploy/webhook")


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
    for name in ("nodepool.yaml", "blocklistentry.yaml"):
        crd = installed.site_packages / "nebula_site" / "crds" / name
        assert not crd.is_symlink()
        assert crd.read_bytes() == (ROOT / "deploy" / "crds" / name).read_bytes()
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


# -- the slim install: cloud SDKs are extras ------------------------------------------------------
EXTRAS = dict(zip(("aws", "modal", "runpod"), REQUIREMENTS_EXTRAS, strict=True))
SDK_MODULES = ("boto3", "botocore", "modal", "modal_proto", "grpclib", "runpod", "asyncssh")


def pins(name: str) -> set[str]:
    return {line for line in (ROOT / name).read_text().splitlines() if line and not line.startswith("#")}


def metadata_requirements(installed: Installed) -> tuple[set[str], dict[str, set[str]]]:
    """The wheel's Requires-Dist: the core ones, and each extra's (markers read back)."""
    (dist_info,) = installed.site_packages.glob("nebula-*.dist-info")
    core: set[str] = set()
    extras: dict[str, set[str]] = {}
    for line in (dist_info / "METADATA").read_text().splitlines():
        if line.startswith("Provides-Extra: "):
            extras.setdefault(line.split(": ", 1)[1], set())
        elif line.startswith("Requires-Dist: "):
            requirement, _, marker = line.split(": ", 1)[1].partition(";")
            found = re.fullmatch(r'\s*extra\s*==\s*"([^"]+)"\s*', marker)
            (extras.setdefault(found.group(1), set()) if found else core).add(requirement.strip().replace(" ", ""))
    return core, extras


@pytest.mark.slow
def test_the_built_metadata_has_one_extra_per_cloud_sdk_and_the_core_needs_none(installed: Installed) -> None:
    """One source: requirements.txt is the core, requirements-<extra>.txt each extra, as built;
    requirements-dev.txt (what `make test` installs) includes all of them."""
    core, extras = metadata_requirements(installed)
    assert core == {pin.replace(" ", "") for pin in pins("requirements.txt")}
    assert extras == {name: {pin.replace(" ", "") for pin in pins(file)} for name, file in EXTRAS.items()}
    assert not any(pin.split("==")[0].split("[")[0].lower() in SDK_MODULES for pin in core), core
    assert {"boto3==1.44.8", "asyncssh==2.24.1"} <= extras["aws"] and "modal==1.6.4" in extras["modal"]
    assert "runpod==1.12.0" in extras["runpod"]
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert {f"-r {file}" for file in ("requirements.txt", *EXTRAS.values())} <= set(dev)


MISSING_SDK = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
from providers import registry
try:
    registry.build_providers({"gpu": {"BACKEND": sys.argv[2]}}, ["gpu"], cluster="c")
except registry.MissingSdkError as exc:
    print(exc)
"""


@pytest.mark.parametrize(
    ("backend", "missing", "extra"),
    [
        ("providers.aws.AwsProvider", "boto3", "aws"),
        ("providers.aws.AwsProvider", "asyncssh", "aws"),
        ("providers.modal.ModalProvider", "modal", "modal"),
        ("providers.runpod.RunPodProvider", "runpod", "runpod"),
    ],
)
def test_a_provider_without_its_sdk_names_the_extra_that_installs_it(
    backend: str, missing: str, extra: str, tmp_path: Path
) -> None:
    """One line naming the module and `pip install 'nebula[<extra>]'`, no traceback (a fresh
    interpreter, with the SDK's module blocked as if not installed)."""
    out = run(sys.executable, "-c", MISSING_SDK, missing, backend, cwd=ROOT, env=clean_env(tmp_path))
    assert out.strip().splitlines() == [
        f"provider 'gpu': BACKEND {backend!r}: {missing} not installed: this provider needs Nebula's"
        f" {extra!r} extra (pip install 'nebula[{extra}]')"
    ]


CHECK_WITHOUT_SDK = """
import sys
sys.modules["modal"] = None
from nebula_site import checks
for message in checks._check_providers({"gpu": {"BACKEND": "providers.modal.ModalProvider"}}):
    print(message.id, "|", message.hint)
"""


def test_the_system_check_of_a_provider_without_its_sdk_hints_at_the_extra(tmp_path: Path) -> None:
    """`nebula check` (and the start-up's checks) say to install the extra, not to check a path."""
    out = run(sys.executable, "-c", CHECK_WITHOUT_SDK, cwd=ROOT, env=clean_env(tmp_path))
    assert out.strip().splitlines() == ["nebula.E002 | Install the extra it names, or remove the provider."]


WITHOUT_SDKS = """
import sys
blocked = sys.argv[1].split(",")
for name in blocked:
    sys.modules[name] = None
import django
django.setup()
from django.core.management import call_command
from nebula_site.management.commands import runvnode
from providers import registry
from nebula_site import config
providers = registry.build_providers(config.BUILTIN_PROVIDERS, ["local", "fake"], cluster="c")
call_command("check")
print(sorted(providers), [name for name in blocked if sys.modules.get(name) is not None])
"""


def test_the_local_and_fake_providers_and_runvnode_need_no_cloud_sdk(tmp_path: Path) -> None:
    """What `nebula run --provider local --dev-cluster` imports works with every SDK missing,
    and the system checks pass (the built-in providers need no extra)."""
    env = {**clean_env(tmp_path), "DJANGO_SETTINGS_MODULE": "nebula_site.settings"}
    out = run(sys.executable, "-c", WITHOUT_SDKS, ",".join(SDK_MODULES), cwd=ROOT, env=env)
    assert out.strip().splitlines()[-1] == "['fake', 'local'] []"
