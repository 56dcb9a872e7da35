"""The operator's image (operator/Dockerfile), read with Docker's own parser.

It is a plain Python image running kopf on the operator package that lives in operator/, with the
minisgl package installed without dependencies (the operator reads minisgl.server.args only).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import tomllib

from tests.docker.dockerfiles import OPERATOR_DOCKERFILE, REPO, exec_form, global_args, healthcheck_argv, parse, resolve

STAGES = parse(OPERATOR_DOCKERFILE)
GLOBAL_ARGS = global_args(OPERATOR_DOCKERFILE)
RUNTIME = STAGES[-1]
ENTRYPOINT = exec_form(RUNTIME.last("ENTRYPOINT"))
CMD = exec_form(RUNTIME.last("CMD"))


def option(argv: list[str], name: str) -> str:
    """The value of `--name VALUE` or `--name=VALUE` in an argv."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} is not in {argv}")


def test_plain_python_312_slim_base_pinned_by_exact_tag():
    """By default; BASE_IMAGE picks another (test_container.py builds on a debootstrapped Debian)."""
    assert {stage.base for stage in STAGES} == {"${BASE_IMAGE}"}, "one base for both stages"
    assert re.fullmatch(r"python:3\.12\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", GLOBAL_ARGS["BASE_IMAGE"])


def test_installs_minisgl_without_dependencies_then_the_operator_package():
    runs = " ".join(stage.run_text() for stage in STAGES)
    minisgl = runs.index("pip install --no-cache-dir --no-deps . ")
    operator = runs.index("pip install --no-cache-dir ./operator")
    assert minisgl < operator, "minisgl must be in place before the operator's install resolves"
    assert not re.search(r"\btorch\b", runs), "the operator image carries no torch"


def test_runs_the_operators_handlers_with_kopf():
    assert ENTRYPOINT[:2] == ["kopf", "run"]
    module = option(ENTRYPOINT, "--module")
    package, _, submodule = module.partition(".")
    assert package != "operator", "`operator` is a standard-library module"
    package_dir = REPO / "operator" / package
    assert (package_dir / "__init__.py").is_file(), f"{module}: no package {package_dir}"
    assert (package_dir / f"{submodule}.py").is_file() or (package_dir / submodule / "__init__.py").is_file(), module


def test_the_operator_package_has_its_own_pyproject():
    pyproject = REPO / "operator" / "pyproject.toml"
    assert pyproject.is_file(), "`pip install ./operator` needs operator/pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    assert any(re.match(r"kopf\b", dep) for dep in project.get("dependencies", [])), "kopf is a dependency"


def test_default_arguments_pick_the_watched_namespaces():
    assert "--all-namespaces" in CMD or "-A" in CMD or "--namespace" in " ".join(CMD)


def test_healthcheck_and_exposed_port_match_kopfs_liveness_endpoint():
    liveness = urlsplit(option(ENTRYPOINT, "--liveness"))
    assert liveness.hostname == "0.0.0.0", "reachable by the kubelet, not only from inside the pod"
    urls = re.findall(r"http://[^'\"\s]+", " ".join(healthcheck_argv(RUNTIME.last("HEALTHCHECK"))))
    assert urls == [f"http://127.0.0.1:{liveness.port}{liveness.path}"]
    exposed = {p.split("/")[0] for c in RUNTIME.all("EXPOSE") for p in c.value}
    assert exposed == {str(liveness.port)}


def test_runs_as_a_numeric_non_root_user():
    user = RUNTIME.last("USER").value[0]
    uid = user.partition(":")[0]
    assert uid.isdigit() and int(uid) != 0, user
    assert f"useradd --system --uid {uid} " in RUNTIME.run_text()


def test_oci_labels():
    labels = RUNTIME.labels()
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert resolve(labels["org.opencontainers.image.base.name"], GLOBAL_ARGS) == GLOBAL_ARGS["BASE_IMAGE"]
