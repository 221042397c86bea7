"""docs/providers.md's shape table is what each provider's `capabilities().shapes` says: the
table is rendered here from the providers themselves and must appear in the doc verbatim."""

from __future__ import annotations

from pathlib import Path

from providers.aws import AwsProvider
from providers.base import Capabilities
from providers.egress import EgressMode
from providers.fake import FakeProvider
from providers.local import LocalProvider
from providers.modal import ModalProvider
from providers.runpod import RunPodProvider
from providers.shape import VOLUME_KINDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def shape_rows(capabilities: dict[str, Capabilities]) -> list[tuple[str, list[bool]]]:
    shapes = {name: c.shapes for name, c in capabilities.items()}
    rows: list[tuple[str, list[bool]]] = [
        ("several containers", [s.several_containers for s in shapes.values()]),
        ("init containers", [s.init_containers for s in shapes.values()]),
        ("native sidecars (`restartPolicy: Always` init containers)", [s.sidecars for s in shapes.values()]),
    ]
    rows += [
        (f"`{kind}` probes", [kind in s.probes for s in shapes.values()]) for kind in ("exec", "tcpSocket", "httpGet")
    ]
    rows += [(f"`{kind}` volumes", [kind in s.volumes for s in shapes.values()]) for kind in VOLUME_KINDS]
    rows.append(("restart in place", [c.restarts_in_place for c in capabilities.values()]))
    rows += [
        (f"NodePool egress `{mode.value}`", [mode in c.egress for c in capabilities.values()])
        for mode in (EgressMode.BLOCKED, EgressMode.ALLOWLIST)
    ]
    return rows


def render(capabilities: dict[str, Capabilities]) -> str:
    lines = ["| shape | " + " | ".join(f"`{name}`" for name in capabilities) + " |"]
    lines.append("|---" * (len(capabilities) + 1) + "|")
    for label, served in shape_rows(capabilities):
        lines.append(f"| {label} | " + " | ".join("yes" if s else "no" for s in served) + " |")
    return "\n".join(lines)


def test_the_docs_shape_table_is_what_the_providers_declare(tmp_path: Path) -> None:
    capabilities = {
        "local": LocalProvider("local", {"state_dir": str(tmp_path)}).capabilities(),
        "fake": FakeProvider("fake", {}).capabilities(),
        "aws": AwsProvider("aws", {"regions": ["us-east-1"], "ami": "ami-12345678", "ssh": False}).capabilities(),
        "modal": ModalProvider("modal", {}).capabilities(),
        "runpod": RunPodProvider("runpod", {}).capabilities(),
    }
    table = render(capabilities)
    assert table in DOC.read_text(), f"docs/providers.md must carry this table:\n{table}"
