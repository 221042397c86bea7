"""The kubelet API's pure pieces: the URL map, query validation, protocol negotiation,
resize messages and error-channel payloads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from providers import errors
from providers.base import LogOptions
from vnode.kubelet import execparams, logparams, problems, routes
from vnode.kubelet.remote import parse_resize
from vnode.kubelet.spdyexec import expected_streams

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/containerLogs/ns/p/c", routes.Route(routes.Kind.LOGS, "ns", "p", "c")),
        ("POST", "/exec/ns/p/c", routes.Route(routes.Kind.EXEC, "ns", "p", "c")),
        ("GET", "/exec/ns/p/uid-1/c", routes.Route(routes.Kind.EXEC, "ns", "p", "c")),
        ("POST", "/attach/ns/p/c", routes.Route(routes.Kind.ATTACH, "ns", "p", "c")),
        ("GET", "/portForward/ns/p", routes.Route(routes.Kind.PORT_FORWARD, "ns", "p")),
        ("GET", "/runningpods/", routes.Route(routes.Kind.RUNNING_PODS)),
        ("GET", "/stats/summary/", routes.Route(routes.Kind.STATS)),
        ("GET", "/metrics/resource", routes.Route(routes.Kind.METRICS)),
        ("GET", "/healthz", routes.Route(routes.Kind.HEALTHZ)),
        ("GET", "/admin/", None),
        ("GET", "/containerLogs/ns/p", None),
        ("GET", "/containerLogs/ns//c", None),
        ("GET", "/exec/ns/p/a/b/c", None),
        ("GET", "/" + "x" * 5000, None),
    ],
)
def test_kubelet_paths_resolve_to_routes_and_anything_else_to_none(
    method: str, path: str, expected: routes.Route | None
) -> None:
    assert routes.resolve(method, path) == expected


def test_a_known_path_with_the_wrong_method_is_method_not_allowed() -> None:
    with pytest.raises(routes.MethodNotAllowed):
        routes.resolve("POST", "/containerLogs/ns/p/c")


def test_log_options_are_parsed_like_the_kubelet() -> None:
    query = "follow=true&tailLines=3&limitBytes=100&timestamps=1&sinceSeconds=10&previous=F"
    assert logparams.parse_log_options(query, now=NOW) == LogOptions(
        follow=True, tail_lines=3, limit_bytes=100, timestamps=True, since=NOW - timedelta(seconds=10), previous=False
    )
    since = logparams.parse_log_options("sinceTime=2024-01-02T03%3A04%3A05Z&tail=all", now=NOW)
    assert since.since == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC) and since.tail_lines is None
    assert logparams.parse_log_options("tailLines=&follow=", now=NOW) == LogOptions()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("tailLines=-1", '"tailLines" is -1'),
        ("tailLines=x", 'could not parse "tailLines"'),
        ("tailLines=\u0663", 'could not parse "tailLines"'),  # Arabic-Indic 3: Go's ParseInt takes ASCII digits only
        ("limitBytes=\uff15", 'could not parse "limitBytes"'),  # a full-width 5
        ("sinceSeconds=+-5", 'could not parse "sinceSeconds"'),
        ("limitBytes=0", '"limitBytes" is 0'),
        ("sinceSeconds=-10", '"sinceSeconds" is -10'),
        ("sinceSeconds=99999999999999999999", "too large"),  # I7: past datetime's range, not a 500
        ("sinceSeconds=5&sinceTime=2024-01-02T03:04:05Z", 'both "sinceSeconds" and "sinceTime" are set'),
        ("sinceTime=yesterday", 'could not parse "sinceTime"'),
        ("follow=yes", 'could not parse "follow"'),
        ("stream=Stderr", "stdout and stderr merged"),
    ],
)
def test_bad_log_options_are_refused_with_the_kubelets_message(query: str, message: str) -> None:
    with pytest.raises(logparams.InvalidParameter, match=message):
        logparams.parse_log_options(query, now=NOW)


def test_a_provider_without_source_stamps_drops_timestamps_and_since_and_names_them() -> None:
    asked = LogOptions(timestamps=True, since=NOW, tail_lines=2)
    assert logparams.honoured_by(asked, stamps_at_source=True) == (asked, [])
    kept, dropped = logparams.honoured_by(asked, stamps_at_source=False)
    assert kept == LogOptions(tail_lines=2) and dropped == ["timestamps", "since"]


def test_exec_parameters_keep_the_command_order_and_need_a_stream() -> None:
    query = "command=sh&command=-c&command=echo+hi%3B+exit+3&error=1&output=1"
    request = execparams.parse_stream_request(query, attach=False)
    assert request == execparams.StreamRequest(("sh", "-c", "echo hi; exit 3"), False, True, True, False)
    with pytest.raises(problems.Problem, match="at least one of stdin, stdout, stderr"):
        execparams.parse_stream_request("command=ls", attach=False)
    with pytest.raises(problems.Problem, match="at least one command"):
        execparams.parse_stream_request("output=1", attach=False)
    assert execparams.parse_stream_request("input=true&output=true&tty=true", attach=True).command == ()


def test_tty_with_stderr_merges_stderr_into_the_terminal() -> None:
    request = execparams.parse_stream_request("command=sh&error=1&output=1&tty=1", attach=False)
    assert request.tty and not request.stderr


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v4.channel.k8s.io", "v3.channel.k8s.io"], "v4.channel.k8s.io"),
        (["x.k8s.io, v5.channel.k8s.io"], "v5.channel.k8s.io"),
    ],
)
def test_spdy_negotiation_takes_the_clients_first_supported_protocol(offered: list[str], chosen: str) -> None:
    assert execparams.negotiate_spdy(offered) == chosen


@pytest.mark.parametrize(("offered", "code"), [([], 400), (["portforward.k8s.io"], 403)], ids=["missing", "unknown"])
def test_spdy_negotiation_refuses_no_protocol_with_400_and_only_unknown_ones_with_403(
    offered: list[str], code: int
) -> None:
    with pytest.raises(problems.Problem) as refused:
        execparams.negotiate_spdy(offered)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["v5.channel.k8s.io", "v4.channel.k8s.io"], "v5.channel.k8s.io"),
        (["v4.base64.channel.k8s.io"], "v4.base64.channel.k8s.io"),
        ([], ""),
        (["v6.channel.k8s.io"], None),
    ],
)
def test_websocket_negotiation_accepts_the_channel_family_and_refuses_the_rest(
    offered: list[str], chosen: str | None
) -> None:
    assert execparams.negotiate_websocket(offered) == chosen


TTY = execparams.StreamRequest(("sh",), True, True, False, True)
PLAIN = execparams.StreamRequest(("ls",), False, True, True, False)


@pytest.mark.parametrize(
    ("request_", "protocol", "streams"),
    [
        (TTY, "v4.channel.k8s.io", {"error", "stdin", "stdout", "resize"}),
        (TTY, "v2.channel.k8s.io", {"error", "stdin", "stdout"}),
        (PLAIN, "v5.channel.k8s.io", {"error", "stdout", "stderr"}),
    ],
)
def test_streams_expected_follow_the_request_and_the_protocol_version(
    request_: execparams.StreamRequest, protocol: str, streams: set[str]
) -> None:
    assert expected_streams(request_, protocol) == streams


@pytest.mark.parametrize(
    ("message", "size"),
    [
        (b'{"Width":100,"Height":30}', (100, 30)),
        (b'{"width":80,"height":24}', (80, 24)),
        (b'{"Width":-1,"Height":30}', None),
        (b"not json", None),
    ],
)
def test_resize_messages_are_read_case_insensitively_and_junk_is_ignored(
    message: bytes, size: tuple[int, int] | None
) -> None:
    assert parse_resize(message) == size


def test_the_error_channel_carries_the_exit_code_as_kubectl_expects() -> None:
    failure = json.loads(problems.exec_status_bytes(3, None, attach=False, json_status=True))
    assert failure["reason"] == "NonZeroExitCode"
    assert failure["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert problems.exec_status_bytes(0, None, attach=False, json_status=True) == b'{"metadata":{},"status":"Success"}'
    assert problems.exec_status_bytes(0, None, attach=False, json_status=False) == b""
    assert problems.exec_status_bytes(3, None, attach=False, json_status=False).startswith(b"command terminated")
    assert (
        json.loads(problems.exec_status_bytes(-9, None, attach=False, json_status=True))["details"]["causes"][0][
            "message"
        ]
        == "255"
    )
    internal = json.loads(problems.exec_status_bytes(None, errors.NotFound("gone"), attach=True, json_status=True))
    assert internal["reason"] == "InternalError" and "error attaching to container: gone" in internal["message"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.NotFound("x"), 404),
        (errors.NotSupported("x"), 404),
        (errors.InvalidRequest("x"), 400),
        (errors.Unavailable("x"), 503),
        (RuntimeError("secret detail"), 500),
    ],
)
def test_provider_errors_map_to_http_in_one_place(error: Exception, code: int) -> None:
    problem = problems.problem_from(error)
    assert problem.code == code
    assert json.loads(problem.body())["code"] == code
    assert "secret detail" not in problem.message
