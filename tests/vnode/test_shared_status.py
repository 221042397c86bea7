"""Equal status pieces of many Pods are one frozen dict or list (vnode.model.shared): never changed
in place, a copy is a plain dict or list, the status reads and serialises as before, and the tables
are bounded."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState
from vnode.model import shared
from vnode.model.status import condition, status_from_instance
from vnode.model.stopping import failed_status

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _pod(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": status,
    }


def _instance(instance_id: str) -> Instance:
    return Instance(
        id=InstanceId(instance_id),
        claim=ClaimName(f"c-{instance_id}"),
        state=InstanceState.RUNNING,
        created_at=NOW - timedelta(minutes=5),
        started_at=NOW - timedelta(minutes=4),
    )


def test_equal_conditions_and_running_states_of_two_pods_are_one_frozen_dict() -> None:
    one = status_from_instance(_pod("a"), _instance("i-a"), now=NOW)
    two = status_from_instance(_pod("b"), _instance("i-b"), now=NOW)
    assert one["conditions"] is two["conditions"] and isinstance(one["conditions"], shared.FrozenList)
    for mine, theirs in zip(one["conditions"], two["conditions"], strict=True):
        assert mine is theirs and isinstance(mine, shared.Frozen)
    assert one["containerStatuses"][0]["state"] is two["containerStatuses"][0]["state"]
    assert one["containerStatuses"][0]["containerID"] != two["containerStatuses"][0]["containerID"]
    later = status_from_instance(_pod("c"), _instance("i-c"), now=NOW + timedelta(seconds=1))
    assert later["conditions"][0] is not one["conditions"][0]  # another time: another piece
    assert later["conditions"][0]["lastTransitionTime"] != one["conditions"][0]["lastTransitionTime"]


def test_a_shared_status_piece_is_never_changed_in_place() -> None:
    status = status_from_instance(_pod("a"), _instance("i-a"), now=NOW)
    piece = status["conditions"][3]
    before = dict(piece)
    for change in (
        lambda: piece.__setitem__("status", "False"),
        lambda: piece.__delitem__("status"),
        lambda: piece.pop("status"),
        lambda: piece.pop("absent", None),
        piece.popitem,
        piece.clear,
        lambda: piece.setdefault("reason", "x"),
        lambda: piece.update(status="False"),
        lambda: piece.__ior__({"status": "False"}),
        lambda: status["containerStatuses"][0]["state"]["running"].__setitem__("startedAt", "x"),
        lambda: status["conditions"].append({"type": "DisruptionTarget"}),
        lambda: status["conditions"].__setitem__(0, {}),
        lambda: status["conditions"].__delitem__(0),
        lambda: status["conditions"].__iadd__([{}]),
        lambda: status["conditions"].__imul__(2),
        lambda: status["conditions"].extend([{}]),
        lambda: status["conditions"].insert(0, {}),
        lambda: status["conditions"].pop(),
        lambda: status["conditions"].remove(piece),
        status["conditions"].clear,
        status["conditions"].sort,
        status["conditions"].reverse,
    ):
        with pytest.raises(TypeError, match="never changed in place"):
            change()
    assert len(status["conditions"]) == 4 and status["conditions"][3] is piece
    assert piece == before and status_from_instance(_pod("b"), _instance("i-b"), now=NOW)["conditions"][3] == before


def test_a_copy_of_a_shared_piece_is_a_plain_dict_and_the_status_serialises_as_before() -> None:
    status = status_from_instance(_pod("a"), _instance("i-a"), now=NOW)
    piece = status["conditions"][0]
    for copied in (dict(piece), copy.copy(piece), {**piece}):
        assert type(copied) is dict and copied == piece
        copied["status"] = "False"
    for listed in (list(status["conditions"]), copy.copy(status["conditions"]), [*status["conditions"]]):
        assert type(listed) is list and listed == status["conditions"]
        listed.append({"type": "DisruptionTarget"})
    deep = copy.deepcopy(status)
    assert type(deep["conditions"]) is list and type(deep["conditions"][0]) is dict
    deep["conditions"].pop()
    deep["conditions"][0]["status"] = "False"
    deep["containerStatuses"][0]["state"]["running"]["startedAt"] = "x"
    assert piece["status"] == "True"
    assert json.loads(json.dumps(status)) == status
    assert json.dumps(piece) == json.dumps(dict(piece))
    assert pickle.loads(pickle.dumps(status)) == status
    failed = failed_status(status, reason="R", message="m", now="2026-11-30T12:00:00Z")  # builds new pieces
    assert [c["status"] for c in failed["conditions"]] == ["True", "True", "False", "False"]
    assert piece["status"] == "True"


def test_a_condition_whose_time_is_not_a_string_is_built_unshared() -> None:
    old = {"Ready": {"type": "Ready", "status": "True", "lastTransitionTime": {"not": "a time"}}}
    built = condition(old, "Ready", "True", NOW)
    assert type(built) is dict and built["lastTransitionTime"] == {"not": "a time"}
    built["status"] = "False"  # its own: free to change


def test_the_shared_table_is_bounded() -> None:
    for second in range(shared.MAX_SHARED + 100):
        moment = NOW + timedelta(seconds=second)
        condition({}, "Ready", "True", moment)
        status_from_instance(_pod("a"), _instance("i-a"), now=moment)
    assert shared.condition.cache_info().currsize == shared.MAX_SHARED
    assert shared.running.cache_info().currsize <= shared.MAX_SHARED
    assert shared._conditions.cache_info().currsize == shared.MAX_SHARED
    assert shared.table_size() <= 3 * shared.MAX_SHARED


def test_a_list_of_conditions_not_all_shared_is_a_plain_list_of_its_own() -> None:
    unshared = {"type": "Ready", "status": "True", "lastTransitionTime": 0}
    pieces = [shared.condition("PodScheduled", "True", "2026-11-30T12:00:00Z"), unshared]
    assert shared.conditions(pieces) is pieces and type(pieces) is list
