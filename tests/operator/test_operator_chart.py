"""The Helm chart, linted and templated by Helm's own library, and its objects checked against the
official Kubernetes schemas and against what the operator actually needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from operator_chart_tools import CHART, NAMESPACE, crds, helm_lint_sdkpy, helm_lint_strict, helm_notes, helm_template

from minisgl.server import args as server_args
from minisgl_operator import __version__, constants, kube, render

K8S_VERSION = kubernetes_validate.latest_version()
MONITORING = "monitoring.coreos.com/v1"
ALL_ON = {
    "metrics": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    "grafanaDashboard": {"enabled": True},
    "prometheusRule": {"enabled": True},
}
VALUE_SETS = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["llm", "research"]},
    "everything-on": {**ALL_ON, "watchNamespaces": ["llm"], "operator": {"logLevel": "debug"}},
    "no-rbac-no-sa": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops"}},
}


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def is_hook(obj: dict) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def installed(objects: list[dict]) -> list[dict]:
    """The release's own objects, without Helm hooks (which run and are deleted again)."""
    return [o for o in objects if not is_hook(o)]


def operator_deployment(objects: list[dict]) -> dict:
    (dep,) = by_kind(objects, "Deployment")
    return dep


# --- helm lint ------------------------------------------------------------------------------------


def test_helm_lint_passes():
    report = helm_lint_sdkpy()
    assert report["TotalChartsLinted"] == 1
    assert not report["Errors"], report
    assert all(m["Severity"] < 2 for m in report["Messages"]), report  # info only, no warnings


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict_passes_for_every_value_set(name):
    report = helm_lint_strict(VALUE_SETS[name])
    assert report["errors"] == [], report
    assert all(m["severity"] < 2 for m in report["messages"]), report


@pytest.mark.parametrize(
    "values",
    [{"watchNamespaces": "llm"}, {"operator": {"logLevel": "loud"}}, {"imag": {}}, {"image": {"pullPolicy": "Sometimes"}}],
)
def test_helm_lint_rejects_bad_values(values):
    assert helm_lint_strict(values)["errors"], values


# --- helm template: valid objects ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_templated_object_is_valid_for_a_current_kubernetes(name):
    objects = helm_template(VALUE_SETS[name])
    assert objects
    for obj in objects:
        if obj["apiVersion"] == MONITORING:
            continue  # Prometheus Operator kinds: no official schema; checked field by field below
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_crd_ships_in_crds_and_is_valid():
    (crd,) = crds()
    assert crd["metadata"]["name"] == constants.CRD_NAME
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def test_default_install_objects():
    objects = helm_template()
    kinds = sorted(o["kind"] for o in installed(objects))
    assert kinds == ["ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount"]
    assert sorted(o["kind"] for o in objects if is_hook(o)) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE


# --- the operator Deployment --------------------------------------------------------------------------


def test_the_operator_runs_kopf_standalone_on_our_handlers_once():
    dep = operator_deployment(helm_template())
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}  # never two operators at once
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][:5] == ["kopf", "run", "--standalone", "--module=minisgl_operator.handlers", "--liveness=http://0.0.0.0:8080/healthz"]
    assert ctr["command"][5:] == ["--all-namespaces"]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in ctr["ports"]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_images_default_to_the_app_version_which_is_the_operators_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    (ctr,) = operator_deployment(helm_template())["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == f"minisgl/minisgl-operator:{__version__}"
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert env[constants.SERVER_IMAGE_ENV] == f"minisgl/minisgl:{__version__}" == constants.DEFAULT_SERVER_IMAGE
    assert float(env[constants.RESYNC_SECONDS_ENV]) == 60

    (ctr,) = operator_deployment(helm_template({"serverImage": {"repository": "r/s", "tag": "7"}, "image": {"tag": "8"}}))[
        "spec"
    ]["template"]["spec"]["containers"]
    assert ctr["image"] == "minisgl/minisgl-operator:8"
    assert {e["name"]: e["value"] for e in ctr["env"]}[constants.SERVER_IMAGE_ENV] == "r/s:7"


def test_watched_namespaces_reach_kopf():
    (ctr,) = operator_deployment(helm_template(VALUE_SETS["namespaced"]))["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][5:] == ["--namespace=llm", "--namespace=research"]


# --- RBAC: exactly what the operator uses ------------------------------------------------------------


def _grants(role: dict) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


EXPECTED = {key: set(verbs) for key, verbs in kube.PERMISSIONS.items()}


def test_cluster_wide_rbac_grants_exactly_the_operators_permissions():
    objects = installed(helm_template())
    (binding,) = by_kind(objects, "ClusterRoleBinding")
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == binding["roleRef"]["name"]]
    assert _grants(role) == EXPECTED
    (sa,) = by_kind(objects, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert operator_deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_namespaced_rbac_is_a_role_per_namespace_and_nothing_cluster_wide_for_the_operator():
    objects = installed(helm_template(VALUE_SETS["namespaced"]))
    roles = by_kind(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["llm", "research"]
    for role in roles:
        assert _grants(role) == EXPECTED
    assert sorted(b["metadata"]["namespace"] for b in by_kind(objects, "RoleBinding")) == ["llm", "research"]
    assert by_kind(objects, "ClusterRoleBinding") == []
    # The only ClusterRoles left are the aggregated user roles, bound to nobody by this chart.
    for role in by_kind(objects, "ClusterRole"):
        assert any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in role["metadata"]["labels"])


def test_no_wildcards_and_no_secrets_anywhere():
    for values in VALUE_SETS.values():
        for role in by_kind(helm_template(values), "ClusterRole") + by_kind(helm_template(values), "Role"):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
                assert "secrets" not in rule["resources"]


def test_user_roles_let_admins_and_editors_manage_inferenceservices():
    objects = helm_template()
    editor = next(r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("-editor"))
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "create" in _grants(editor)[(constants.GROUP, constants.PLURAL)]
    assert "update" in _grants(editor)[(constants.GROUP, f"{constants.PLURAL}/scale")]  # kubectl scale


def test_without_rbac_and_service_account_the_chart_uses_the_given_account():
    objects = helm_template(VALUE_SETS["no-rbac-no-sa"])
    assert {o["kind"] for o in objects} == {"Deployment"}
    assert operator_deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


@pytest.mark.parametrize("values", [{"serviceAccount": {"create": False}}, {"serviceAccount": {"create": False, "name": ""}}])
def test_without_a_created_account_a_name_is_required_never_the_default_account(values):
    # Binding the operator's ClusterRole to "default" would hand it to every pod of the namespace.
    with pytest.raises(Exception, match="serviceAccount"):
        helm_template(values)
    assert helm_lint_strict(values)["errors"] != []


# --- the CRD upgrade hook ---------------------------------------------------------------------------


def test_every_install_and_upgrade_applies_the_operators_crd_first():
    # Helm installs crds/ once and never upgrades them: the hook does, with the operator's image.
    hooks = [o for o in helm_template() if is_hook(o)]
    for obj in hooks:
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert "hook-succeeded" in obj["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    (job,) = by_kind(hooks, "Job")
    (ctr,) = job["spec"]["template"]["spec"]["containers"]
    (operator_ctr,) = operator_deployment(helm_template())["spec"]["template"]["spec"]["containers"]
    assert ctr["image"] == operator_ctr["image"]  # the CRD of the operator's own version
    assert ctr["command"] == ["minisgl-operator", "crd", "--apply"]
    # The account, role and binding exist before the Job runs (lower weight), and grant this CRD only.
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks}
    assert max(w for k, w in weights.items() if k != "Job") < weights["Job"]
    (role,) = by_kind(hooks, "ClusterRole")
    for rule in role["rules"]:
        assert rule["resources"] == ["customresourcedefinitions"]
        assert rule.get("resourceNames") == [constants.CRD_NAME] or rule["verbs"] == ["create"]
    (binding,) = by_kind(hooks, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == job["spec"]["template"]["spec"]["serviceAccountName"]
    # The operator Deployment's selector does not match the Job's pod.
    selector = operator_deployment(helm_template())["spec"]["selector"]["matchLabels"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert not all(pod_labels.get(k) == v for k, v in selector.items())
    for obj in hooks:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_crd_upgrade_hook_can_be_turned_off():
    assert not any(is_hook(o) for o in helm_template({"crdUpgrade": {"enabled": False}}))


# --- monitoring ----------------------------------------------------------------------------------------


def _pod_labels() -> dict:
    example = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "x", "namespace": "llm"},
               "spec": {"model": "m"}}
    dep = next(o for o in render.render(example) if o["kind"] == "Deployment")
    return dep["spec"]["template"]["metadata"]["labels"]


def test_monitors_are_off_by_default():
    assert [o for o in helm_template() if o["apiVersion"] == MONITORING] == []


def test_pod_and_service_monitors_alike_label_series_with_their_inference_service():
    """KEDA's queries select on inference_service: whichever monitor values.yaml turns on must add it."""
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"], "targetLabel": constants.PROMETHEUS_ISVC_LABEL}
    for mode in ("podMonitor", "serviceMonitor"):
        objects = helm_template({"metrics": {mode: {"enabled": True}}})
        monitors = [o for o in objects if o["apiVersion"] == MONITORING]
        assert len(monitors) == 2, mode  # the servers' and the endpoint pickers'
        for monitor in monitors:
            endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"]["endpoints"]
            assert all(relabel in e["relabelings"] for e in endpoints), (mode, monitor["metadata"]["name"])


def test_pod_and_service_monitors_scrape_the_inference_servers_metrics_path():
    objects = helm_template({**ALL_ON, "watchNamespaces": ["llm"]})
    (pm,) = [m for m in by_kind(objects, "PodMonitor") if m["metadata"]["name"].endswith("-servers")]
    (sm,) = [m for m in by_kind(objects, "ServiceMonitor") if m["metadata"]["name"].endswith("-servers")]
    # The series carry their InferenceService's name: what KEDA's queries select on.
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"], "targetLabel": constants.PROMETHEUS_ISVC_LABEL}
    assert constants.LABEL_INSTANCE.replace(".", "_").replace("/", "_") in relabel["sourceLabels"][0]
    assert pm["spec"]["podMetricsEndpoints"] == [
        {"port": constants.PORT_NAME, "path": server_args.METRICS_PATH, "interval": "15s", "relabelings": [relabel]}
    ]
    assert sm["spec"]["endpoints"] == [
        {"port": constants.PORT_NAME, "path": server_args.METRICS_PATH, "interval": "15s", "relabelings": [relabel]}
    ]
    labels = _pod_labels()
    for monitor in (pm, sm):
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["llm"]}
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()  # it selects the operator's pods (and Services)
    for everywhere in by_kind(helm_template({**ALL_ON}), "PodMonitor"):
        assert everywhere["spec"]["namespaceSelector"] == {"any": True}


def test_the_monitors_scrape_the_endpoint_pickers_whose_queue_wakes_a_service_scaled_to_zero():
    # KEDA's scale-from-zero trigger reads llm_d_epp_flow_control_queue_size: unscraped, its
    # `or vector(0)` reads a healthy 0 and no request ever wakes the first pod.
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    example = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "x", "namespace": "llm"},
               "spec": {"model": "m", "router": {}, "autoscaling": {"minReplicas": 0, "maxReplicas": 2, "keda": keda}}}  # fmt: skip
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in render.render(example)}
    picker = rendered[("Deployment", "x-epp")]["spec"]["template"]
    picker_service = rendered[("Service", "x-epp")]
    (held,) = [t for t in rendered[("ScaledObject", "x")]["spec"]["triggers"] if constants.EPP_QUEUE_METRIC in t["metadata"]["query"]]
    assert held["metadata"]["activationThreshold"] == "0"
    objects = helm_template({**ALL_ON, "watchNamespaces": ["llm"]})

    def scraping(monitors, labels):
        return [m for m in monitors if m["spec"]["selector"]["matchLabels"].items() <= labels.items()]

    (pm,) = scraping(by_kind(objects, "PodMonitor"), picker["metadata"]["labels"])
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    (ctr,) = picker["spec"]["containers"]
    port = next(p for p in ctr["ports"] if p["name"] == endpoint["port"])
    assert ctr["args"][ctr["args"].index("--metrics-port") + 1] == str(port["containerPort"])
    assert "--metrics-endpoint-auth=false" in ctr["args"]  # Prometheus scrapes without a token
    (sm,) = scraping(by_kind(objects, "ServiceMonitor"), picker_service["metadata"]["labels"])
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in picker_service["spec"]["ports"]}
    # Neither picker monitor scrapes the servers, nor a server monitor the pickers (no double series).
    server_pod = rendered[("Deployment", "x")]["spec"]["template"]["metadata"]["labels"]
    assert pm not in scraping(by_kind(objects, "PodMonitor"), server_pod)
    assert len(scraping(by_kind(objects, "PodMonitor"), server_pod)) == 1


# --- the dashboard and alert rules from files/ (another part of the project writes them) ---------


@pytest.fixture
def chart_copy(tmp_path) -> Path:
    dest = tmp_path / "minisgl-operator"
    shutil.copytree(CHART, dest)
    shutil.rmtree(dest / "files", ignore_errors=True)
    return dest


DASHBOARD = {"title": "minisgl", "panels": [{"type": "timeseries", "title": "Waiting requests"}]}
ALERTS = {
    "groups": [
        {
            "name": "minisgl",
            "rules": [
                {
                    "alert": "MinisglQueueGrowing",
                    "expr": "avg(minisgl_num_requests_waiting) > 10",
                    "for": "10m",
                    "labels": {"severity": "warning"},
                    "annotations": {"summary": "{{ $labels.namespace }}: requests are queueing"},
                }
            ],
        }
    ]
}


def test_without_the_files_nothing_is_rendered_even_when_enabled(chart_copy):
    objects = helm_template(ALL_ON, chart=chart_copy)
    assert by_kind(objects, "PrometheusRule") == []
    assert [o for o in by_kind(objects, "ConfigMap") if "grafana" in o["metadata"]["name"]] == []
    assert helm_lint_strict(ALL_ON, chart=chart_copy)["errors"] == []


def test_with_the_files_the_dashboard_and_rules_are_rendered_when_enabled(chart_copy):
    (chart_copy / "files").mkdir()
    (chart_copy / "files" / "grafana-dashboard.json").write_text(json.dumps(DASHBOARD, indent=2))
    (chart_copy / "files" / "alerts.yaml").write_text(yaml.safe_dump(ALERTS))

    assert by_kind(helm_template({}, chart=chart_copy), "PrometheusRule") == []  # still opt-in

    objects = helm_template({**ALL_ON, "grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}, chart=chart_copy)
    (cm,) = by_kind(objects, "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["minisgl.json"]) == DASHBOARD
    kubernetes_validate.validate(cm, K8S_VERSION, strict=True)

    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["apiVersion"] == MONITORING
    assert rule["spec"] == ALERTS  # Prometheus templates in annotations survive untouched
    assert helm_lint_strict(ALL_ON, chart=chart_copy)["errors"] == []


def test_an_alerts_file_that_is_not_a_rule_file_fails_the_render(chart_copy):
    (chart_copy / "files").mkdir()
    (chart_copy / "files" / "alerts.yaml").write_text("rules:\n  - alert: X\n")
    with pytest.raises(Exception, match="groups"):
        helm_template({"prometheusRule": {"enabled": True}}, chart=chart_copy)


def test_the_charts_own_files_render_when_present():
    files = CHART / "files"
    objects = helm_template(ALL_ON)
    if (files / "alerts.yaml").exists():
        (rule,) = by_kind(objects, "PrometheusRule")
        assert rule["spec"]["groups"]
    if (files / "grafana-dashboard.json").exists():
        (cm,) = by_kind(objects, "ConfigMap")
        json.loads(cm["data"]["minisgl.json"])
        kubernetes_validate.validate(cm, K8S_VERSION, strict=True)


def test_notes_show_how_to_serve_a_model():
    notes = helm_notes()
    assert "kind: InferenceService" in notes
    assert "kubectl get misvc" in notes


def test_the_notes_say_what_an_install_still_needs():
    """After `helm install`: the images to build and push (no public registry has them), the release
    label kube-prometheus-stack selects monitors by, and the cluster-wide grant watchNamespaces narrows."""
    notes = helm_notes()
    assert "docker build" in notes and "docker push" in notes and "serverImage.repository" in notes
    assert "watchNamespaces" in notes and "ClusterRole" in notes
    assert "release:" not in notes  # no monitor, nothing to label
    for mode in ("podMonitor", "serviceMonitor"):
        monitored = helm_notes({"metrics": {mode: {"enabled": True}}})
        assert "release:" in monitored and f"metrics.{mode}.labels" in monitored
    assert "ClusterRole" not in helm_notes({"watchNamespaces": ["llm"]})
