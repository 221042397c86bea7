"""The API layer: one HTTP request (already read) in, one reply out, plus what to log.

`server.py` parses the wire and calls `Api.handle`; this module negotiates media types (with
`negotiation`), routes, applies selectors and Tables, and calls `Resources`. Watches and kubelet
proxying need the socket, so they come back as `WatchReply` / `ProxyReply` for the server to run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devcluster import (
    admission,
    crddefaults,
    csrkind,
    discovery,
    kubelettarget,
    metricsapi,
    negotiation,
    nodeaddress,
    openapi,
    replybytes,
    reviews,
    scale,
    selectors,
    tables,
)
from devcluster.errors import ApiError, bad_request
from devcluster.metricsscrape import MetricsStore
from devcluster.registry import Registry, ResourceType
from devcluster.resources import PATCH_TYPES, Resources
from devcluster.routing import Discovery, ResourceRoute, resolve
from devcluster.routing import not_found as route_not_found

MAX_BODY = 3 * 1024 * 1024
_TRUE = ("true", "1")


@dataclass
class Request:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes

    def param(self, name: str, default: str = "") -> str:
        for key, value in self.query:
            if key == name:
                return value
        return default

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


@dataclass
class Reply:
    code: int
    body: bytes
    content_type: str = "application/json"
    warnings: tuple[str, ...] = ()  # sent as `Warning: 299 - "<text>"` headers, as the API server does


@dataclass
class Info:
    """What the request log records about a request."""

    verb: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


@dataclass
class WatchReply:
    rt: ResourceType
    namespace: str | None
    since: int | None
    label: selectors.LabelSelector
    field: selectors.FieldSelector
    timeout: float | None
    bookmarks: bool
    initial_events_end: bool
    table: str | None  # includeObject policy when the client asked for Table events
    defaults: crddefaults.Schema | None = None  # a custom resource's schema with defaults, applied on read


@dataclass
class ProxyReply:
    host: str
    port: int
    target: str
    subresource: str = "log"


AnyReply = Reply | WatchReply | ProxyReply


def json_reply(code: int, obj: Any) -> Reply:
    return Reply(code, replybytes.encode_object(obj))


def status_reply(err: ApiError) -> Reply:
    return json_reply(err.code, err.status())


class Api:
    def __init__(
        self,
        resources: Resources,
        registry: Registry,
        *,
        server_address: str,
        preferred_address_types: Sequence[str] = nodeaddress.DEFAULT_PREFERRED_ADDRESS_TYPES,
        review: reviews.Reviews | None = None,
    ) -> None:
        self.review = review
        self.resources = resources
        self.registry = registry
        self.server_address = server_address
        self.preferred_address_types = tuple(preferred_address_types)
        self.metrics: MetricsStore | None = None  # the embedded metrics-server's points, once started
        self.written = replybytes.WrittenObjects(resources.store)  # write replies share their watch lines

    def handle(self, request: Request, info: Info) -> AnyReply:
        try:
            return self._handle(request, info)
        except ApiError as err:
            return status_reply(err)
        except selectors.SelectorError as err:
            return status_reply(bad_request(f"unable to parse requirement: {err}"))

    def _handle(self, request: Request, info: Info) -> AnyReply:
        path = request.path
        info.verb = request.method.lower() if request.method != "GET" else "get"
        if path in ("/healthz", "/readyz", "/livez") or path.startswith(("/healthz/", "/readyz/", "/livez/")):
            return Reply(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return json_reply(200, discovery.VERSION_INFO)
        if path == "/openapi/v2":
            if "protobuf" in request.header("accept"):
                return Reply(200, b"", "application/octet-stream")
            return json_reply(200, discovery.openapi_v2_json())
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            return self._openapi_v3(path)
        if path == "/api" or path.startswith(("/api/", "/apis")):
            target = resolve(self.registry, path)
            if isinstance(target, Discovery):
                self._only(request, "GET")
                return self._discovery(target)
            return self._resource(request, target, info)
        raise route_not_found()

    def _openapi_v3(self, path: str) -> Reply:
        crds, _ = self.resources.store.list_objects(openapi.CRDS_KEY)
        if path == "/openapi/v3":
            return json_reply(200, openapi.index(crds))
        parts = path.removeprefix("/openapi/v3/").split("/")
        document = None
        if len(parts) == 3 and parts[0] == "apis":
            document = openapi.group_version_document(crds, parts[1], parts[2])
        if document is None:
            raise route_not_found()
        return json_reply(200, document)

    @staticmethod
    def _only(request: Request, *methods: str) -> None:
        if request.method not in methods:
            raise ApiError(405, f"the server does not allow this method on the requested resource ({request.method})")

    def _discovery(self, target: Discovery) -> Reply:
        if target.legacy and target.version is None:
            return json_reply(200, discovery.api_versions(self.server_address))
        if target.group is None:
            return json_reply(200, discovery.api_group_list(self.registry))
        if target.version is None:
            group = discovery.api_group(self.registry, target.group)
            if group is None:
                raise route_not_found()
            return json_reply(200, group)
        document = discovery.resource_list(self.registry, target.group, target.version)
        if document is None:
            raise route_not_found()
        return json_reply(200, document)

    def _resource(self, request: Request, route: ResourceRoute, info: Info) -> AnyReply:
        rt, method, sub = route.rt, request.method, route.subresource
        info.resource, info.subresource = rt.plural, sub
        info.namespace, info.name = route.namespace or "", route.name
        dry_run = request.param("dryRun") == "All"
        ns = route.namespace or ""
        if metricsapi.serves(rt):
            return self._metrics(request, route, info)
        if sub in ("log", "exec", "attach", "portforward"):
            self._only(request, *(("GET",) if sub == "log" else ("GET", "POST")))
            info.verb = "get" if sub == "log" else "create"
            return self._proxy(route, request)
        if reviews.serves(rt, sub):
            self._only(request, "POST")
            info.verb = "create"
            if self.review is None or bool(route.name) != (sub == "token"):
                raise route_not_found()
            return json_reply(201, self.review.create(route, _body(request), request.header("authorization")))
        if sub == "binding":
            self._only(request, "POST")
            info.verb = "create"
            self.resources.bind(ns, route.name, _body(request))
            return json_reply(
                201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
            )
        if sub == scale.SUBRESOURCE and scale.serves(rt):
            self._only(request, "GET", "PUT", "PATCH")
            info.verb = {"GET": "get", "PUT": "update", "PATCH": "patch"}[method]
            body = _body(request) if method == "PUT" else request.body
            kind = negotiation.media_type(request.header("content-type"))
            answer = scale.handle(
                self.resources, rt, ns, route.name, method=method, content_type=kind, body=body, dry_run=dry_run
            )
            return json_reply(200, answer)
        if not route.name:
            self._only(request, "GET", "POST")
            if method == "POST":
                info.verb = "create"
                if rt.namespaced and route.namespace is None:
                    raise ApiError(405, f"a namespace is required to create {rt.plural}")
                body = _body(request)
                warnings: list[str] = []
                if rt.kind == "Pod" and not rt.group:
                    body = admission.admit_pod(self.resources.store, ns, body, warnings=warnings)
                if csrkind.is_csr(rt.kind, rt.group) and self.review is not None:
                    caller = self.review.caller(request.header("authorization"))
                    body = csrkind.with_requester(body, username=caller.username, uid=caller.uid, groups=caller.groups)
                obj = self.resources.create(rt, ns, body, dry_run=dry_run)
                info.name = obj["metadata"].get("name", "")
                return Reply(201, self.written.encode(obj), warnings=tuple(warnings))
            if request.param("watch") in _TRUE:
                info.verb = "watch"
                return self._watch(request, route)
            info.verb = "list"
            return self._list(request, route)
        self._only(request, *(("GET", "PUT", "PATCH") if sub else ("GET", "PUT", "PATCH", "DELETE")))
        if method == "GET":
            if request.param("watch") in _TRUE:
                info.verb = "watch"
                return self._watch(request, route, name=route.name)
            obj = self.resources.get(rt, ns, route.name)
            table = _table_request(request)
            if table is not None:
                rv = obj["metadata"].get("resourceVersion", "")
                return json_reply(
                    200,
                    tables.to_table(
                        rt.kind, [obj], resource_version=rv, include_object=table, custom=rt.printer_columns
                    ),
                )
            return json_reply(200, obj)
        if method == "PUT":
            info.verb = "update"
            obj = self.resources.replace(rt, ns, route.name, _body(request), subresource=sub, dry_run=dry_run)
            return Reply(200, self.written.encode(obj))
        if method == "PATCH":
            info.verb = "patch"
            content_type = negotiation.media_type(request.header("content-type"))
            if content_type not in PATCH_TYPES:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    + ", ".join(PATCH_TYPES),
                )
            obj, created = self.resources.patch(
                rt, ns, route.name, content_type, request.body, subresource=sub, dry_run=dry_run
            )
            return Reply(201 if created else 200, self.written.encode(obj))
        info.verb = "delete"
        options = _body(request) if request.body.strip() else {}
        options = self._delete_options(request, options)
        return Reply(200, self.written.encode(self.resources.delete(rt, ns, route.name, options, dry_run=dry_run)))

    @staticmethod
    def _delete_options(request: Request, options: Any) -> dict[str, Any]:
        if not isinstance(options, dict):
            raise bad_request("the request body must be a DeleteOptions object")
        grace = request.param("gracePeriodSeconds")
        if grace:
            try:
                options["gracePeriodSeconds"] = int(grace)
            except ValueError:
                raise bad_request(f"invalid gracePeriodSeconds {grace!r}") from None
        policy = request.param("propagationPolicy")
        if policy:
            options["propagationPolicy"] = policy
        return options

    def _list(self, request: Request, route: ResourceRoute) -> Reply:
        label = selectors.parse_label_selector(request.param("labelSelector"))
        field_sel = selectors.parse_field_selector(request.param("fieldSelector"))
        items, rv = self.resources.store.list_objects(route.rt.storage_key, route.namespace)
        schema = crddefaults.schema_of(self.resources.store, route.rt)
        items = [crddefaults.defaulted(schema, o) for o in items if label.matches(o) and field_sel.matches(o)]
        table = _table_request(request)
        if table is not None:
            return json_reply(
                200,
                tables.to_table(
                    route.rt.kind,
                    items,
                    resource_version=str(rv),
                    include_object=table,
                    custom=route.rt.printer_columns,
                ),
            )
        return json_reply(
            200,
            {
                "kind": f"{route.rt.kind}List",
                "apiVersion": route.rt.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            },
        )

    def _watch(self, request: Request, route: ResourceRoute, *, name: str = "") -> WatchReply:
        field_text = request.param("fieldSelector")
        if name:
            field_text = ",".join(t for t in (field_text, f"metadata.name={name}") if t)
        rv_text = request.param("resourceVersion")
        initial = request.param("sendInitialEvents") in _TRUE
        since: int | None = None
        if rv_text not in ("", "0") and not initial:
            try:
                since = int(rv_text)
            except ValueError:
                raise bad_request(f"invalid resourceVersion {rv_text!r}") from None
        timeout: float | None = None
        if request.param("timeoutSeconds"):
            try:
                timeout = float(request.param("timeoutSeconds"))
            except ValueError:
                raise bad_request("timeoutSeconds must be a number") from None
        return WatchReply(
            rt=route.rt,
            namespace=route.namespace,
            since=since,
            label=selectors.parse_label_selector(request.param("labelSelector")),
            field=selectors.parse_field_selector(field_text),
            timeout=timeout,
            bookmarks=request.param("allowWatchBookmarks") in _TRUE,
            initial_events_end=initial,
            table=_table_request(request),
            defaults=crddefaults.schema_of(self.resources.store, route.rt),
        )

    def _metrics(self, request: Request, route: ResourceRoute, info: Info) -> Reply:
        self._only(request, "GET")
        info.verb = "get" if route.name else "list"
        if self.metrics is None or route.subresource:
            raise route_not_found()
        if request.param("watch") in _TRUE:
            raise ApiError(405, "the server does not allow this method on the requested resource (watch)")
        query = {key: value for key, value in request.query}
        return json_reply(200, metricsapi.handle(
            route.rt, namespace=route.namespace, name=route.name, query=query,
            store=self.resources.store, metrics=self.metrics,
        ))  # fmt: skip

    def _proxy(self, route: ResourceRoute, request: Request) -> ProxyReply:
        host, port, target = kubelettarget.locate(
            self.resources, route, request.query, request.param("container") or None, self.preferred_address_types
        )
        return ProxyReply(host=host, port=port, target=target, subresource=route.subresource)


def _body(request: Request) -> Any:
    return negotiation.decode_body(request.header("content-type"), request.body)


def _table_request(request: Request) -> str | None:
    return negotiation.table_policy(request.header("accept"), request.param("includeObject"))
