"""The adapter over the official kubernetes client, against a recording HTTP stub on 127.0.0.1.

No API server runs here: the stub answers each request with a canned JSON reply and records the
method, path, query, content type and body, so these tests pin down the HTTP requests the operator
makes (server-side apply, the status merge patch, events), not any cluster behaviour.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from minisgl_operator import constants, reconcile
from minisgl_operator.kube import ApiError, KubernetesApi


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.replies: dict[tuple[str, str], tuple[int, dict]] = {}

    def reply(self, method: str, path: str, status: int, body: dict) -> None:
        self.replies[(method, path)] = (status, body)


@pytest.fixture
def stub():
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            state.requests.append(
                {
                    "method": self.command,
                    "path": url.path,
                    "query": parse_qs(url.query),
                    "content_type": self.headers.get("Content-Type"),
                    "body": json.loads(raw) if raw else None,
                }
            )
            status, body = state.replies.get((self.command, url.path), (200, {"kind": "Echo", "metadata": {"name": "x"}}))
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _handle

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def api(stub) -> KubernetesApi:
    configuration = client.Configuration()
    configuration.host = stub.host
    configuration.retries = 0
    return KubernetesApi(client.ApiClient(configuration))


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "chat", "namespace": "llm"},
    "spec": {"replicas": 1},
}


def test_apply_is_a_forced_server_side_apply_as_the_operator(api, stub):
    stub.reply("PATCH", "/apis/apps/v1/namespaces/llm/deployments/chat", 200, {**DEPLOYMENT, "status": {}})
    result = api.apply(DEPLOYMENT)
    (request,) = stub.requests
    assert request["method"] == "PATCH"
    assert request["path"] == "/apis/apps/v1/namespaces/llm/deployments/chat"
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["query"]["fieldManager"] == [constants.FIELD_MANAGER]
    assert [v.lower() for v in request["query"]["force"]] == ["true"]  # Go's ParseBool takes "True" too
    assert request["body"] == DEPLOYMENT
    assert result == {**DEPLOYMENT, "status": {}}  # plain dicts back, in the API's own field names


@pytest.mark.parametrize(
    "kind, path",
    [
        ("Service", "/api/v1/namespaces/llm/services/chat"),
        ("PersistentVolumeClaim", "/api/v1/namespaces/llm/persistentvolumeclaims/chat"),
        ("HorizontalPodAutoscaler", "/apis/autoscaling/v2/namespaces/llm/horizontalpodautoscalers/chat"),
        ("PodDisruptionBudget", "/apis/policy/v1/namespaces/llm/poddisruptionbudgets/chat"),
        ("ConfigMap", "/api/v1/namespaces/llm/configmaps/chat"),
        ("ServiceAccount", "/api/v1/namespaces/llm/serviceaccounts/chat"),
        ("Role", "/apis/rbac.authorization.k8s.io/v1/namespaces/llm/roles/chat"),
        ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/namespaces/llm/rolebindings/chat"),
        ("LeaderWorkerSet", "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/chat"),
        ("ScaledObject", "/apis/keda.sh/v1alpha1/namespaces/llm/scaledobjects/chat"),
        ("InferencePool", "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools/chat"),
        ("HTTPRoute", "/apis/gateway.networking.k8s.io/v1/namespaces/llm/httproutes/chat"),
    ],
)
def test_every_child_kind_goes_to_its_api(api, stub, kind, path):
    api.apply({"kind": kind, "metadata": {"name": "chat", "namespace": "llm"}})
    api.get(kind, "llm", "chat")
    api.delete(kind, "llm", "chat")
    assert [(r["method"], r["path"]) for r in stub.requests] == [("PATCH", path), ("GET", path), ("DELETE", path)]
    assert stub.requests[0]["content_type"] == "application/apply-patch+yaml"
    query = stub.requests[0]["query"]
    assert query["fieldManager"] == [constants.FIELD_MANAGER] and [v.lower() for v in query["force"]] == ["true"]
    assert stub.requests[2]["query"] == {"propagationPolicy": ["Background"]}


def test_a_delete_with_a_uid_deletes_only_that_object(api, stub):
    api.delete("Job", "llm", "chat-load", uid="uid-1")
    (request,) = stub.requests
    assert request["method"] == "DELETE" and request["body"]["preconditions"] == {"uid": "uid-1"}


def test_get_returns_none_for_a_missing_object(api, stub):
    stub.reply("GET", "/apis/apps/v1/namespaces/llm/deployments/gone", 404, {"kind": "Status", "reason": "NotFound", "code": 404})
    assert api.get("Deployment", "llm", "gone") is None
    stub.reply("GET", "/apis/minisgl.io/v1alpha1/namespaces/llm/inferenceservices/gone", 404, {"kind": "Status", "code": 404})
    assert api.get(constants.KIND, "llm", "gone") is None


def test_get_reads_an_inferenceservice(api, stub):
    body = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "chat"}, "spec": {"model": "m"}}
    stub.reply("GET", "/apis/minisgl.io/v1alpha1/namespaces/llm/inferenceservices/chat", 200, body)
    assert api.get(constants.KIND, "llm", "chat") == body


def test_rejections_carry_the_api_servers_message(api, stub):
    message = 'Deployment.apps "chat" is invalid: spec.template.spec.containers[0].image: Required value'
    stub.reply("PATCH", "/apis/apps/v1/namespaces/llm/deployments/chat", 422, {"kind": "Status", "message": message, "code": 422})
    with pytest.raises(ApiError) as info:
        api.apply(DEPLOYMENT)
    assert info.value.status == 422
    assert info.value.message == message
    assert not info.value.retryable


def test_server_errors_are_retryable(api, stub):
    stub.reply("PATCH", "/apis/apps/v1/namespaces/llm/deployments/chat", 503, {"kind": "Status", "message": "etcd", "code": 503})
    with pytest.raises(ApiError) as info:
        api.apply(DEPLOYMENT)
    assert info.value.retryable


def test_no_api_server_is_a_retryable_error():
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: nothing listens
    configuration.retries = 0
    with pytest.raises(ApiError) as info:
        KubernetesApi(client.ApiClient(configuration)).get("Deployment", "llm", "chat")
    assert info.value.status == 0 and info.value.retryable


def test_status_is_a_merge_patch_of_the_status_subresource(api, stub):
    status = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
    api.patch_status("llm", "chat", status)
    (request,) = stub.requests
    assert (request["method"], request["path"]) == ("PATCH", "/apis/minisgl.io/v1alpha1/namespaces/llm/inferenceservices/chat/status")
    assert request["content_type"] == "application/merge-patch+json"
    assert request["body"] == {"status": status}


def test_scale_is_a_merge_patch_of_the_scale_subresource(api, stub):
    api.scale("llm", "chat", 2)
    (request,) = stub.requests
    assert (request["method"], request["path"]) == ("PATCH", "/apis/minisgl.io/v1alpha1/namespaces/llm/inferenceservices/chat/scale")
    assert request["content_type"] == "application/merge-patch+json"
    assert request["body"] == {"spec": {"replicas": 2}}


def test_events_are_core_v1_events_in_the_objects_namespace(api, stub):
    body = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "chat", "namespace": "llm", "uid": "u1"}}
    event = reconcile.event(body, "Warning", "InvalidSpec", "spec.tp: 3 is not one of [1, 2, 4, 8]", "2026-01-01T00:00:00Z")
    api.create_event(event)
    (request,) = stub.requests
    assert (request["method"], request["path"]) == ("POST", "/api/v1/namespaces/llm/events")
    sent = request["body"]
    assert sent["involvedObject"] == {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "chat", "namespace": "llm", "uid": "u1", "resourceVersion": "",
    }  # fmt: skip
    assert (sent["type"], sent["reason"], sent["message"]) == ("Warning", "InvalidSpec", event["message"])
    assert sent["source"] == {"component": constants.OPERATOR_NAME}
    assert sent["metadata"] == {"generateName": "chat.", "namespace": "llm"}


def test_unknown_kinds_are_refused_before_any_request(api, stub):
    with pytest.raises(ValueError):
        api.apply({"kind": "Secret", "metadata": {"name": "x", "namespace": "llm"}})
    assert stub.requests == []


@pytest.fixture
def silent_server():
    """An API server that accepts the connection and never answers: a half-open connection."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_request_that_gets_no_answer_times_out_as_a_retryable_error(silent_server, monkeypatch):
    # Without a timeout the handler would block forever, holding its object's lock.
    from concurrent.futures import ThreadPoolExecutor

    from minisgl_operator import kube

    connect, read = kube.REQUEST_TIMEOUT_SECONDS
    assert 0 < connect <= 10 and 0 < read <= 60
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT_SECONDS", (1.0, 1.0))
    configuration = client.Configuration()
    configuration.host = silent_server
    configuration.retries = 0
    api = KubernetesApi(client.ApiClient(configuration))
    pool = ThreadPoolExecutor(1)
    try:
        error = pool.submit(api.get, "Deployment", "llm", "chat").exception(timeout=20)  # not forever
    finally:
        pool.shutdown(wait=False)  # closing the silent server ends a request that had no timeout
    assert isinstance(error, ApiError)
    assert error.status == 0 and error.retryable


def test_list_pods_asks_the_api_server_to_filter_by_label(api, stub):
    stub.reply("GET", "/api/v1/namespaces/llm/pods", 200, {"kind": "PodList", "items": [{"metadata": {"name": "p"}}]})
    assert api.list_pods("llm", "app.kubernetes.io/instance=chat") == [{"metadata": {"name": "p"}}]
    (request,) = stub.requests
    assert request["query"]["labelSelector"] == ["app.kubernetes.io/instance=chat"]


def test_crd_apply_server_side_applies_the_operators_own_crd(stub, tmp_path, monkeypatch, capsys):
    # What the chart's pre-upgrade hook runs: Helm never upgrades a chart's crds/ itself.
    from minisgl_operator import cli, crd

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": stub.host}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "u"}}],
                "current-context": "stub",
            }
        )
    )
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))  # $KUBECONFIG, read at import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{constants.CRD_NAME}"
    stub.reply("PATCH", path, 200, {"metadata": {"name": constants.CRD_NAME, "resourceVersion": "42"}})

    assert cli.main(["crd", "--apply"]) == 0
    (request,) = stub.requests
    assert (request["method"], request["path"]) == ("PATCH", path)
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["query"]["fieldManager"] == [constants.FIELD_MANAGER]
    assert request["body"] == crd.crd_manifest()
    assert constants.CRD_NAME in capsys.readouterr().out


def test_server_side_applys_500_for_an_undeclared_field_is_not_retryable(api, stub):
    # The API server's answer to a field its type does not declare, the same on every try.
    message = ('failed to create typed patch object (apps/v1, Kind=Deployment): '
               '.spec.template.spec.containers[name="server"].resorces: field not declared in schema')  # fmt: skip
    stub.reply("PATCH", "/apis/apps/v1/namespaces/llm/deployments/chat", 500, {"kind": "Status", "message": message, "code": 500})
    with pytest.raises(ApiError) as info:
        api.apply(DEPLOYMENT)
    assert info.value.status == 500 and info.value.message == message
    assert not info.value.retryable
