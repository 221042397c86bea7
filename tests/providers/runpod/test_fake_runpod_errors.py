"""What goes wrong, as the runpod SDK sees it from the fake RunPod: a wrong key, an outage (a
502 page, a closed port), a malformed query (the SDK inlines strings unescaped), a field no type
has, and an unknown pod. No pod runs here, so none of this needs root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import runpod  # type: ignore[import-untyped]
from runpod.api import ctl_commands  # type: ignore[import-untyped]
from runpod.api.graphql import run_graphql_query  # type: ignore[import-untyped]

from tests.providers.runpod.fake_runpod import FakeRunPod, start_fake_runpod
from tests.providers.runpod.fake_runpod_api import CATALOG, SCHEMA


@pytest.fixture(name="fake")
def fake_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    with start_fake_runpod(api_key="rpa_right", folder=tmp_path / "runpod") as fake:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", fake.url)
        monkeypatch.setattr(runpod, "api_key", fake.api_key)
        yield fake


def test_a_wrong_key_is_an_authentication_error(fake: FakeRunPod) -> None:
    with pytest.raises(runpod.error.AuthenticationError):
        ctl_commands.get_pods(api_key="rpa_wrong")
    assert ctl_commands.get_pods(api_key="rpa_right") == []
    by_query = requests.post(f"{fake.url}/graphql?api_key=rpa_right", json={"query": "{ myself { id } }"}, timeout=10)
    assert by_query.json() == {"data": {"myself": {"id": "user_fake"}}}


def test_an_outage_is_a_502_page_or_a_closed_port_and_then_ends(fake: FakeRunPod) -> None:
    fake.outage(True)
    with pytest.raises(requests.exceptions.JSONDecodeError):
        ctl_commands.get_pods()
    fake.outage("503")
    assert requests.post(f"{fake.url}/graphql", data=b"{}", timeout=10).status_code == 503
    fake.outage("refused")
    with pytest.raises(requests.exceptions.ConnectionError):
        ctl_commands.get_gpus()
    fake.outage(False)
    assert ctl_commands.get_pods() == []


def test_a_quote_inlined_by_the_sdk_is_a_syntax_error(fake: FakeRunPod) -> None:
    with pytest.raises(runpod.error.QueryError, match="^Syntax Error"):
        ctl_commands.create_pod("q", "img", "NVIDIA A40", docker_args='bash -c "sleep 1"')
    assert fake.pods() == []


def test_an_unknown_field_or_operation_is_refused_as_graphql_does(fake: FakeRunPod) -> None:
    with pytest.raises(runpod.error.QueryError, match='Cannot query field "bogus" on type "Pod".'):
        run_graphql_query("query { myself { pods { id bogus } } }")
    with pytest.raises(runpod.error.QueryError, match='Cannot query field "nothing" on type "Query".'):
        run_graphql_query("query { nothing }")
    with pytest.raises(runpod.error.QueryError, match=r"must have a selection of subfields\."):
        run_graphql_query("query { myself }")


def test_escaped_strings_reach_the_pod_and_unknown_pods_are_errors_or_null(fake: FakeRunPod) -> None:
    mutation = (
        'mutation { deployCpuPod(input: {name: "n \\"q\\"", imageName: "img", cloudType: ALL, '
        'env: [{key: "K", value: "a\\\\b \\u00e9"}]}) { name env } }'
    )  # a CPU pod that does not run: queued
    fake.queue(True)
    assert run_graphql_query(mutation)["data"]["deployCpuPod"] == {"name": 'n "q"', "env": ["K=a\\b \u00e9"]}
    assert ctl_commands.get_pod("nosuchpod00000") is None
    with pytest.raises(runpod.error.QueryError, match="Pod not found"):
        ctl_commands.terminate_pod("nosuchpod00000")
    with pytest.raises(ValueError, match="No GPU found"):
        ctl_commands.create_pod("g", "img", "NVIDIA Quantum 9000")


def selection(type_name: str) -> str:
    fields = []
    for name, child in SCHEMA[type_name].items():
        arguments = "(input: {gpuCount: 2})" if name == "lowestPrice" else ""
        fields.append(f"{name}{arguments} {{ {selection(child)} }}" if child else name)
    return " ".join(fields)


def test_every_field_of_the_schema_is_answered(fake: FakeRunPod) -> None:
    fake.queue(True)  # the pod is listed but runs nothing (runtime null)
    ctl_commands.create_pod("all", "img", "NVIDIA A40", env={"A": "1"})
    answer = run_graphql_query(f"query {{ myself {{ {selection('User')} }} gpuTypes {{ {selection('GpuType')} }} }}")
    [pod] = answer["data"]["myself"]["pods"]
    assert set(pod) == set(SCHEMA["Pod"]) and pod["runtime"] is None and pod["env"] == ["A=1"]
    assert pod["machine"]["gpuDisplayName"] == "A40" and pod["podType"] == "RESERVED"
    assert {gpu["id"] for gpu in answer["data"]["gpuTypes"]} == {gpu.id for gpu in CATALOG}
    assert all(set(gpu) == set(SCHEMA["GpuType"]) for gpu in answer["data"]["gpuTypes"])
