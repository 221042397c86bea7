"""Which pip extra installs each cloud SDK, and the one check a provider package runs before it
imports its SDK-bound modules: a missing SDK becomes one `MissingExtraError` naming the extra
(`pip install 'nebula[modal]'`), not an ImportError traceback from deep inside the package.

Called at import time by `providers.aws`, `providers.modal` and `providers.runpod` (their
`__init__`); `providers.registry` turns the error into a configuration error for the alias.
Never imports an SDK (it only asks whether one could be found). Tests:
tests/nebula_site/test_install.py::test_a_provider_without_its_sdk_names_the_extra_that_installs_it.
"""

from __future__ import annotations

import importlib.util


class MissingExtraError(ImportError):
    """A provider's SDK is not installed; the message says which extra installs it."""


def require(*modules: str, extra: str) -> None:
    """Raise MissingExtraError unless every top-level module in `modules` can be imported."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{', '.join(missing)} not installed: this provider needs Nebula's {extra!r} extra"
            f" (pip install 'nebula[{extra}]')",
            name=missing[0],
        )
