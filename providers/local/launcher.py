"""Start the supervisors of an instance's containers, one launch per container folder at a time
in this process.

Owned by `LocalProvider`: `provision` launches every container of a new folder; `get` and
`list` resume, in the background, a container whose launch an earlier process began and never
finished. The set of folders being launched here keeps one launch in flight per folder in this
process; the supervisor's launch lock keeps it to one workload across processes (I1). A failure
of a resumed launch is recorded in that container's folder, so the instance reports it.
Tests: tests/providers/local/test_local.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from providers.errors import ProviderError
from providers.local import folder, launch, runs


class Launcher:
    """The container folders this provider object is launching now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._launching: set[Path] = set()

    def begin(self, container: Path) -> bool:
        """Mark `container` as being launched by this object; False if it already is."""
        with self._lock:
            if container in self._launching:
                return False
            self._launching.add(container)
            return True

    def _end(self, container: Path) -> None:
        with self._lock:
            self._launching.discard(container)

    def launch(self, instance: Path, containers: Sequence[Path], *, every: Sequence[Path]) -> None:
        """Start the supervisors of `containers` (begun with `begin`) of the instance in
        `instance`, whose container folders are `every`; if none of those ever recorded a
        supervisor, drop the folder so a retry starts afresh. Raises what the launch raised."""
        try:
            for container in containers:
                launch.start_supervisor(container)
        except BaseException:
            if not any((each / folder.LAUNCH_FILE).exists() for each in every):
                folder.remove_unsupervised(instance)
            raise
        finally:
            for container in containers:
                self._end(container)

    def resume(self, container: Path) -> None:
        """Launch, in the background, a container whose launch an earlier process began and
        never finished; a failure is recorded in its folder."""
        if not self.begin(container):
            return

        def resume() -> None:
            try:
                launch.start_supervisor(container)
            except (ProviderError, OSError) as exc:
                message = str(exc) if isinstance(exc, ProviderError) else exc.strerror or type(exc).__name__
                try:
                    record = {"message": message, "run": runs.current(container)}
                    folder.write_json_atomic(container / folder.LAUNCH_ERROR_FILE, record)
                except OSError:
                    pass  # the folder went away: the instance is gone anyway
            finally:
                self._end(container)

        threading.Thread(target=resume, name=f"local-launch-{container.name}", daemon=True).start()
