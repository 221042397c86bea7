"""The console's small parts: the mirror's diff and restart, the one projection seen alike by
the mirror and the API (gated Pods included), log formats and redaction, readiness,
DATABASE_URL parsing, and API request counting."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from console import cells, metrics, models, runtime, snapshot, views
from console.mirror import Mirror, diff
from console.observer import ConsoleObserver
from kube import names, observe
from nebula_site.dburl import database_from_url
from nebula_site.logconfig import JsonFormatter, RedactSecrets, logging_config, redact
from placement.gated import Waiting
from tests.support.rigs.offline import adopt_new_pod, offline_handler

ROW = {"uid": "u1", "phase": "Running"}


@pytest.mark.parametrize(
    ("written", "taken", "stale", "upserts", "deletes"),
    [
        ({"pods": {"u1": ROW}}, {"pods": {"u1": ROW}}, False, {}, []),
        ({"pods": {"u1": ROW}}, {"pods": {"u1": {**ROW, "phase": "Failed"}}}, False, {"u1"}, []),
        ({"pods": {"u1": ROW}}, {"pods": {"u1": ROW}}, True, {"u1"}, []),  # last_seen is due
        ({"pods": {"u1": ROW}}, {"pods": {}}, False, {}, ["u1"]),
        ({}, {"pods": {"u1": ROW}}, False, {"u1"}, []),
    ],
)
def test_diff_writes_only_changed_rows_and_deletes_what_left_memory(
    written: dict[str, Any], taken: dict[str, Any], stale: bool, upserts: set[str], deletes: list[str]
) -> None:
    changes = diff(written, snapshot.Snapshot(taken), stale=lambda table, key: stale)
    assert set(changes.upserts["pods"]) == set(upserts)
    assert changes.deletes["pods"] == deletes


def test_a_restarted_mirror_rebuilds_from_memory_and_reads_nothing_back(
    db: Any, fake_provider: Callable[..., Any], observer: ConsoleObserver, installed_runtime: Callable[..., Any]
) -> None:
    models.TrackedPod.objects.create(
        uid="left-over", namespace="default", name="old", provider="x", node="n", claim="c"
    )
    handler = offline_handler(fake_provider("restart"))
    adopt_new_pod(handler, "fresh")
    installed_runtime(handlers=[handler])
    mirror = Mirror(runtime.current, observer=lambda: observer)
    assert mirror.sync_once() >= 2  # the Pod and the node
    assert list(models.TrackedPod.objects.values_list("name", flat=True)) == ["fresh"]
    assert mirror.sync_once() == 0  # nothing changed: nothing written


PRICED = {names.HOURLY_PRICE_ANNOTATION: "2.5", names.POOL_ANNOTATION: "train", names.REGION_ANNOTATION: "eu-1"}


WAITING = Waiting(
    "u-gated",
    names.EVENT_WAITING_FOR_CAPACITY,
    "waiting for capacity: gpu-a/h100 x8 Spot in us-east-1 sold out; next look at 12:01:00Z at the latest",
    next_look=1.0,
)


@pytest.mark.parametrize("status", ["from the instance", "none yet", "gated"])
def test_the_mirror_row_and_the_api_row_of_a_pod_agree(
    db: Any,
    fake_provider: Callable[..., Any],
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
    holding_placement: Callable[..., Any],
    status: str,
) -> None:
    """Both serialise `console.rows`: every field the API returns reads the same in the mirror
    (where a NOT NULL text column holds "" for the API's null), a Pod with no status yet is
    `Pending` in both, the API carries the endpoint and the hourly price, and a Pod placement
    holds gated is Pending/SchedulingGated with its pool and what it waits for."""
    handler = offline_handler(fake_provider("agree"))
    placement = None
    if status == "gated":
        placement = holding_placement(("train-0", "train", WAITING))
        uid = WAITING.uid
    else:
        pod = adopt_new_pod(handler, "train-0", **PRICED)
        uid = pod["metadata"]["uid"]
        entry = handler.tracked("default/train-0")
        assert entry is not None
        if status == "none yet":
            entry.desired_status = None
    installed_runtime(handlers=[handler], placement=placement)
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    client = Client()
    client.force_login(User.objects.create_user("reader", password="pw-reader-1234"))
    (api,) = client.get("/api/pods/").json()["results"]
    mirrored = models.TrackedPod.objects.values().get(uid=uid)
    for name, value in api.items():
        stored = mirrored[name]
        if isinstance(stored, datetime):
            stored = stored.isoformat().replace("+00:00", "Z")
            value = value and value.replace("+00:00", "Z")
        assert stored == ("" if value is None and isinstance(stored, str) else value), name
    if status == "gated":
        assert (api["phase"], api["reason"], api["pool"]) == ("Pending", names.REASON_SCHEDULING_GATED, "train")
        assert (api["wait_reason"], api["waiting_for"]) == (WAITING.reason, WAITING.message)
        assert api["provider"] is None and api["node"] is None and api["instance_id"] is None
        return
    assert api["hourly_price"] == 2.5 and api["pool"] == "train" and api["region"] == "eu-1"
    assert entry is not None and entry.last_instance is not None and entry.last_instance.endpoint
    assert api["endpoint"] == entry.last_instance.endpoint
    assert api["wait_reason"] is None and api["waiting_for"] is None
    if status == "none yet":
        assert api["phase"] == mirrored["phase"] == "Pending"


def test_a_pod_a_handler_tracks_is_shown_once_though_placements_watch_still_reads_it_gated(
    db: Any,
    fake_provider: Callable[..., Any],
    observer: ConsoleObserver,
    installed_runtime: Callable[..., Any],
    holding_placement: Callable[..., Any],
) -> None:
    handler = offline_handler(fake_provider("once"))
    pod = adopt_new_pod(handler, "train-0", **PRICED)
    placement = holding_placement(("train-0", "train", None), ("train-1", "train", None))
    placement.controller.pods.cache["default/train-0"]["metadata"]["uid"] = pod["metadata"]["uid"]
    installed_runtime(handlers=[handler], placement=placement)
    client = Client()
    client.force_login(User.objects.create_user("reader", password="pw-reader-1234"))
    listed = client.get("/api/pods/").json()["results"]
    assert [(p["name"], p["node"], p["phase"], p["wait_reason"]) for p in listed] == [
        ("train-0", "nebula-once", "Running", None),
        ("train-1", None, "Pending", None),  # gated, not looked at yet
    ]
    assert listed[1]["reason"] == names.REASON_SCHEDULING_GATED != listed[0]["reason"]
    Mirror(runtime.current, observer=lambda: observer).sync_once()
    assert models.TrackedPod.objects.count() == 2


def test_json_lines_name_pod_claim_and_instance() -> None:
    stream = io.StringIO()
    config = logging_config("json", "INFO")
    config["handlers"]["console"]["stream"] = stream
    config["loggers"] = {"probe": {"level": "INFO", "handlers": ["console"], "propagate": False}}
    logging.config.dictConfig(config)
    try:
        observer = ConsoleObserver()
        logging.getLogger("probe").info(
            "provision ok", extra={"pod": "default/a", "claim": "default-a-x", "instance": "i-1"}
        )
        observer.provisioned("gpu", "ok", 0.25, observe.Subject("default/a", "default-a-x", "i-1"))
    finally:
        logging.config.dictConfig(_settings_logging())
    line = json.loads(stream.getvalue().splitlines()[0])
    assert line["pod"] == "default/a" and line["claim"] == "default-a-x" and line["instance"] == "i-1"
    assert line["level"] == "INFO" and line["message"] == "provision ok"


def _settings_logging() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.LOGGING)


def test_text_is_the_default_format() -> None:
    assert logging_config()["handlers"]["console"]["formatter"] == "text"
    assert logging_config("JSON")["handlers"]["console"]["formatter"] == "json"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("env TOKEN=abc123secretvalue set", "abc123secretvalue"),
        ('{"password": "hunter2hunter2"}', "hunter2hunter2"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9.payload.sig"),
        (
            "key -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXk",
        ),
        ("aws AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
        ("postgres://nebula:pa55word@db:5432/nebula", "pa55word"),
        ("api_key: sk-live-1234567890", "sk-live-1234567890"),
    ],
)
def test_secret_shaped_values_are_redacted(text: str, secret: str) -> None:
    assert secret not in redact(text)
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s", (text,), None)
    assert RedactSecrets().filter(record)
    assert secret not in JsonFormatter().format(record)


def test_ordinary_lines_are_left_alone() -> None:
    text = "provision on gpu-a: ok after 0.120s (pod default/train-0, instance fake-1)"
    assert redact(text) == text


def test_readyz_follows_leadership_and_node_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client()
    monkeypatch.setattr(views, "installed_observer", lambda: None)
    assert client.get("/readyz").status_code == 503
    observer = ConsoleObserver()
    monkeypatch.setattr(views, "installed_observer", lambda: observer)
    assert client.get("/readyz").status_code == 503  # never reached the cluster
    observer.node_synced("nebula-x")
    assert json.loads(client.get("/readyz").content)["role"] == "leader"
    observer.leadership(False)
    assert json.loads(client.get("/readyz").content) == {
        "ready": True,
        "role": "standby",
        "reason": "cluster reachable",
    }
    observer.leadership(None)
    assert client.get("/readyz").status_code == 503


def test_database_url_selects_postgresql_and_never_echoes_the_password() -> None:
    entry = database_from_url("postgres://nebula:p%40ss@db.example:5433/console?sslmode=require")
    assert entry["ENGINE"] == "django.db.backends.postgresql"
    assert (entry["NAME"], entry["USER"], entry["PASSWORD"], entry["HOST"], entry["PORT"]) == (
        "console",
        "nebula",
        "p@ss",
        "db.example",
        "5433",
    )
    assert entry["OPTIONS"] == {"sslmode": "require"}
    with pytest.raises(ValueError) as raised:
        database_from_url("mysql://nebula:topsecret@db/console")
    assert "topsecret" not in str(raised.value)


def test_api_requests_are_counted_by_verb_and_code(db: Any) -> None:
    def count(code: str) -> float:
        text = generate_latest(metrics.REGISTRY).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "nebula_api_requests_total" and sample.labels == {"verb": "GET", "code": code}:
                    return sample.value
        return 0.0

    before = count("401"), count("200")
    Client().get("/api/pods/")  # anonymous: refused
    client = Client()
    client.force_login(User.objects.create_user("reader", password="pw-reader-1234"))
    client.get("/api/pods/")
    client.get("/admin/")  # not the API: not counted
    assert (count("401") - before[0], count("200") - before[1]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("status", "bad"),
    [("Running", False), ("Pending", False), ("Completed", False), ("ContainerCreating", False),
     ("Terminating", False), ("SchedulingGated", False), ("Init:0/2", False), ("CrashLoopBackOff", True),
     ("ErrImagePull", True), ("ImagePullBackOff", True), ("Error", True), ("OOMKilled", True), ("Failed", True),
     ("Unknown", True), ("Init:Error", True), ("Init:CrashLoopBackOff", True), ("ExitCode:3", True), ("", False)],
)  # fmt: skip
def test_only_bad_pod_states_are_marked(status: str, bad: bool) -> None:
    assert cells.is_bad(status) is bad
    assert ('class="bad"' in cells.status_cell(status)) is bad


def test_long_names_keep_their_start_and_end_and_free_text_breaks_only_at_spaces() -> None:
    name = "default/llama-3-70b-instruct-finetune-sweep-worker-007"
    assert cells.shorten(name, 30) == "default/llama-3-70b…worker-007" and len(cells.shorten(name, 30)) == 30
    assert cells.shorten("short", 30) == "short"
    assert f'title="{name}"' in cells.cut(name, 30)
    assert cells.words("in eu-west-3 <now>") == (
        '<span class="w">in</span> <span class="w">eu-west-3</span> <span class="w">&lt;now&gt;</span>'
    )
