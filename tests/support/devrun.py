"""`runvnode --dev-cluster --provider local` as a user starts it, for the end-to-end tests of
`make run`: in a folder of its own, on free ports, its output in `run.log`; killed at the end
and its instances terminated, so no Pod's process outlives a failed test.

Used by tests/nebula_site/test_make_run.py, test_devstart.py and test_first_hour.py,
tests/devcluster/test_jobs_local.py and tests/vnode/kubelet/test_kubelet_auth_runvnode.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from providers.local import LocalProvider
from providers.owner import Owner

ROOT = Path(__file__).resolve().parents[2]
# What `make run` runs, on free ports (the console's, the embedded cluster's) and no metrics.
DEV_RUN = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--dev-cluster", "--dev-cluster-addr", "127.0.0.1:0"]
DEV_RUN += ["--provider", "local", "--console-addr", "127.0.0.1:0", "--metrics-addr", ""]
DEV_OWNER = Owner("dev-cluster", "local")  # --dev-cluster's owner of the local provider's instances


@contextmanager
def dev_run(
    folder: Path, argv: Sequence[str] = DEV_RUN, *, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `argv` in `folder` (output to `folder/run.log`); at the end kill it if it still runs
    and terminate every instance it left."""
    with (folder / "run.log").open("wb") as log:
        process = subprocess.Popen(list(argv), cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        options = {"state_dir": str(folder / ".nebula" / "state"), "grace_period": 0}
        observer = LocalProvider("local", options, owner=DEV_OWNER)
        for instance in observer.list():
            observer.terminate(instance.id)
