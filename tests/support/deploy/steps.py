"""The shell steps of docs/deploy.md, run as written: a step's ```sh block is read from the
document and run by bash inside the install's Pod network, with `kubectl` the 1.37 binary on
the install's kubeconfig. A test that runs a step proves the step, not a paraphrase of it.

Used by tests/deploy/test_rendered_install.py; nothing here is a test.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.support.clients.kubectl import KUBECTL_137
from tests.support.deploy.manifests import ROOT
from tests.support.rigs.install import Install

DOCS = ROOT / "docs" / "deploy.md"


def doc_block(section: str, step: int, *, text: str | None = None) -> str:
    """The first ```sh block of item `step.` in the `## section` of docs/deploy.md."""
    document = text if text is not None else DOCS.read_text()
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", document, re.M | re.S)
    assert match, f"docs/deploy.md has no section {section!r}"
    item = re.search(rf"^{step}\. (.*?)(?=^\d+\. |\Z)", match.group(1), re.M | re.S)
    assert item, f"docs/deploy.md, {section!r}: no step {step}"
    block = re.search(r"```sh\n(.*?)```", item.group(1), re.S)
    assert block, f"docs/deploy.md, {section!r} step {step}: no sh block"
    return "\n".join(line[3:] if line.startswith("   ") else line for line in block.group(1).splitlines())


def run_step(
    install: Install, script: str, *, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`script` under `bash -euo pipefail` in `cwd`; fails the test, with its output, when it fails."""
    cwd.mkdir(parents=True, exist_ok=True)
    prelude = f'kubectl() {{ {shlex.quote(KUBECTL_137)} --kubeconfig {shlex.quote(str(install.kubeconfig))} "$@"; }}\n'
    result = subprocess.run(
        install.network.argv(["bash", "-euo", "pipefail", "-c", prelude + script]),
        cwd=cwd, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, f"the docs' step failed:\n{script}\n{result.stdout}\n{result.stderr}"
    return result
