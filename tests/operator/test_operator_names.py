"""Every name the operator derives from an InferenceService's name, and every name the controllers
it drives derive from those (KEDA's HPA, a LeaderWorkerSet's StatefulSets and pods), fits the API
server's limits for the longest name the CRD accepts; and the CRD's limits are the tightest that
do: one character more and a derived name breaks."""

from __future__ import annotations

import kube_names
import pytest

from minisgl_operator import constants, crd, render, spec

KEDA = {"prometheusAddress": "http://prometheus:9090", "target": "4"}
EVERYTHING = {
    "model": "m",
    "router": {"gateway": {"name": "gw"}},
    "autoscaling": {"minReplicas": 0, "maxReplicas": 4, "keda": KEDA},
    "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]},
}
# As many groups as the LWS webhook allows: the longest group index in the StatefulSet names.
MULTI_NODE = {"model": "m", "tp": 16, "gpusPerNode": 8, "replicas": kube_names.LWS_MAX_REPLICAS,
              "router": {"gateway": {"name": "gw"}}, "modelCache": {"claimName": "models"}}  # fmt: skip
CASES = [("single node", EVERYTHING, crd.NAME_MAX), ("multi-node", MULTI_NODE, crd.MULTI_NODE_NAME_MAX)]


def objects(spec_: dict, name: str) -> list[dict]:
    meta = {"name": name, "namespace": "llm", "uid": "u1"}
    obj = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta, "spec": spec_}
    return render.render(obj)


@pytest.mark.parametrize("what, spec_, longest", CASES, ids=[case[0] for case in CASES])
def test_the_longest_accepted_name_gives_valid_names_everywhere(fake, what, spec_, longest):
    name = "a" * longest
    rendered = objects(spec_, name)
    for obj in rendered:
        assert kube_names.object_problems(obj) == [], obj["kind"]
        assert kube_names.derived_problems(obj) == [], obj["kind"]
        fake.apply(obj)  # names, labels and the webhooks' own limits (KEDA's HPA name, LWS's DNS-1035 name)


@pytest.mark.parametrize("what, spec_, longest", CASES, ids=[case[0] for case in CASES])
def test_one_character_more_is_refused_by_the_crd(what, spec_, longest):
    meta = {"name": "a" * (longest + 1), "namespace": "llm"}
    obj = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta, "spec": spec_}
    with pytest.raises(spec.SpecError, match="metadata.name"):
        spec.parse(obj)


def test_the_single_node_limit_is_where_kedas_hpa_name_breaks(fake):
    (scaled,) = [o for o in objects(EVERYTHING, "a" * crd.NAME_MAX) if o["kind"] == "ScaledObject"]
    assert len(f"keda-hpa-{scaled['metadata']['name']}") == kube_names.LABEL_MAX
    scaled["metadata"]["name"] += "a"
    scaled["metadata"]["labels"] = {}
    with pytest.raises(Exception, match="HPA name .* must be no more than 63 characters"):
        fake.apply(scaled)


def test_the_multi_node_limit_is_where_the_last_groups_statefulset_labels_break():
    (lws,) = [o for o in objects(MULTI_NODE, "a" * crd.MULTI_NODE_NAME_MAX) if o["kind"] == "LeaderWorkerSet"]
    hashes = [p["metadata"]["labels"]["controller-revision-hash"] for p in kube_names.derived(lws) if p["kind"] == "Pod"]
    assert max(map(len, hashes)) == kube_names.LABEL_MAX
    lws["metadata"]["name"] += "a"
    assert any("controller-revision-hash" in p or "must be no more than 63 characters" in p for p in kube_names.derived_problems(lws))


def test_a_derived_name_that_breaks_is_named_with_the_api_servers_words():
    lws = {"kind": "LeaderWorkerSet", "metadata": {"name": "a" * 50}, "spec": {"replicas": 20, "leaderWorkerTemplate": {"size": 2}}}
    problems = kube_names.derived_problems(lws)
    assert (f'Pod {"a" * 50}-19-1: metadata.labels: Invalid value: "{"a" * 50}-19-{"h" * 10}": '
            "must be no more than 63 characters") in problems
