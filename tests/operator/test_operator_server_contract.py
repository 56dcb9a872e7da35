"""The operator takes the server's flags, default port and probe paths from minisgl.server.args,
the single place they are defined, and never spells them out itself."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest

from minisgl.server import args as server_args
from minisgl_operator import server

PACKAGE = Path(server.__file__).resolve().parent


def test_probe_paths_port_and_drain_come_from_the_server():
    assert server.LIVENESS_PATH is server_args.LIVENESS_PATH
    assert server.READINESS_PATH is server_args.READINESS_PATH
    assert server.METRICS_PATH is server_args.METRICS_PATH
    assert server.DEFAULT_PORT == server_args.DEFAULT_PORT
    assert server.DEFAULT_DRAIN_TIMEOUT == server_args.defaults()["drain_timeout"]


def test_the_flags_the_operator_sets_are_server_flags():
    parser_flags = {opt for action in server_args.build_parser()._actions for opt in action.option_strings}
    for flag in (*server.OWNED_FLAGS, *server.FORBIDDEN_FLAGS, server.FLAG_DRAIN_TIMEOUT):
        assert flag in parser_flags, flag


def test_asking_for_a_field_the_server_does_not_have_fails_loudly():
    with pytest.raises(KeyError):
        server.flag("gpus")
    assert {server.flag(f.name) for f in dataclasses.fields(server_args.ServerArgs)} <= {
        opt for action in server_args.build_parser()._actions for opt in action.option_strings
    }


def _string_literals(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_no_module_of_the_operator_repeats_a_server_flag_or_probe_path():
    server_strings = {server_args.LIVENESS_PATH, server_args.READINESS_PATH, server_args.METRICS_PATH}
    server_strings |= {"--" + f.name.replace("_", "-") for f in dataclasses.fields(server_args.ServerArgs)}
    for module in sorted(PACKAGE.glob("*.py")):
        repeated = _string_literals(module) & server_strings
        assert not repeated, f"{module.name} spells out {sorted(repeated)}: import it from minisgl.server.args"
        assert str(server_args.DEFAULT_PORT) not in _string_literals(module), module.name


def test_the_server_module_reads_minisgl_server_args_and_nothing_heavier():
    imports = set()
    for node in ast.walk(ast.parse((PACKAGE / "server.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imports.add(node.module)
        elif isinstance(node, ast.Import):
            imports |= {alias.name for alias in node.names}
    assert {m for m in imports if m.startswith("minisgl")} == {"minisgl.server"}
    # minisgl.server.args, and each minisgl module it imports in turn (with the packages' __init__
    # files, which run on import), imports only the standard library: the operator image installs
    # minisgl with --no-deps.
    root = Path(server_args.__file__).parents[2]
    todo, seen = ["minisgl.server.args"], set()
    while todo:
        module = todo.pop()
        parts = module.split(".")
        files = [root.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
        files.append(root.joinpath(*parts[:-1], parts[-1] + ".py"))
        for source in files:
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minisgl"):
                    names = [node.module, *[f"{node.module}.{a.name}" for a in node.names]]  # a.name may be a module
                    todo += [n for n in names if n not in seen and root.joinpath(*n.split(".")).with_suffix(".py").exists()]
                    seen.update(names)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    for name in names:
                        assert name and name.split(".")[0] in sys.stdlib_module_names, f"{source} imports {name}"


def test_the_server_exports_the_gauge_the_hpa_scales_on():
    # The observability side of the server defines the metrics; the operator's HPA names one of them.
    metrics = pytest.importorskip("minisgl.server.http.metrics", reason="the server's metrics module is not there yet")
    from prometheus_client import generate_latest

    from minisgl_operator import constants

    exposition = generate_latest(metrics.ServerMetrics("m", "m").registry).decode()
    assert f"# TYPE {constants.WAITING_REQUESTS_METRIC} gauge" in exposition


def test_the_server_exports_what_the_endpoint_picker_and_keda_read():
    """The router's EPP config and KEDA's queries name series of the server's /metrics: each exists
    with the type its reader expects, and the cache info carries the labels the picker reads."""
    from prometheus_client.parser import text_string_to_metric_families

    from minisgl.message import SchedulerStatsMsg
    from minisgl.server.http.metrics import ServerMetrics
    from minisgl_operator import constants
    from minisgl_operator.router import ENGINE_METRICS

    metrics = ServerMetrics("m", "m")
    metrics.apply(SchedulerStatsMsg(pid=1, num_running=1, num_waiting=2, used_pages=3, num_pages=40,
                                    info={"page_size": "16"}))
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition()[0].decode())}
    for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
        assert families[ENGINE_METRICS[key]].type == "gauge", key
    (info,) = families[ENGINE_METRICS["cacheInfoSpec"]].samples
    assert info.labels[ENGINE_METRICS["cacheBlockSizeLabelName"]] == "16"
    assert info.labels[ENGINE_METRICS["cacheNumBlocksLabelName"]] == "40"
    assert families[constants.TTFT_BUCKET_METRIC.removesuffix("_bucket")].type == "histogram"
