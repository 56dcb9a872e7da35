"""The kopf handlers: thin wrappers that hand each InferenceService to the reconciler.

Run with ``kopf run --standalone -m minisgl_operator.handlers (--all-namespaces | -n NS ...)``.

- create / update / resume: reconcile the object kopf hands over;
- InferenceService events: remember which objects exist, for the resync;
- a resync thread: reconcile every known object every ``MINISGL_OPERATOR_RESYNC_SECONDS`` (drift
  in Services, HPAs, PDBs and PVCs, which no watch reports). Not a ``kopf.timer``: kopf puts a
  finalizer on every object a timer or daemon serves, and deleting one (or its namespace) would
  then hang whenever the operator is down or uninstalled;
- Deployment, Job and pod events (of objects this operator manages, filtered by label in the API
  server, not in the operator): reconcile the owner, so status follows the rollout, a deleted or
  edited Deployment comes back at once, and the server pods start once the model loader is done;
- delete: nothing to do, the garbage collector deletes the children through their ownerReferences
  (the handler is optional, so kopf adds no finalizer). No handler here requires one.

A bad spec never raises (Degraded + Event instead); transient API errors raise
``kopf.TemporaryError`` and kopf retries with a delay, so nothing crash-loops.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from . import cache, config, constants
from .kube import KubeApi, KubernetesApi
from .reconcile import Outcome, Reconciler, RetryableError, utc_now

RETRY_DELAY_SECONDS = 15

_reconciler: Reconciler | None = None
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def configure(api: KubeApi, default_image: str | None = None, clock: Callable[[], str] = utc_now) -> Reconciler:
    """Set the API the handlers write through (the real client at startup, a fake in tests)."""
    global _reconciler
    _reconciler = Reconciler(api, default_image or config.default_server_image(), clock, config.endpoint_picker_image())
    return _reconciler


def _get_reconciler() -> Reconciler:
    if _reconciler is None:
        raise RuntimeError("minisgl_operator.handlers.configure() was not called")
    return _reconciler


def _lock(uid: str) -> threading.Lock:
    # Several handlers (an update, a Deployment event, the timer) may fire for one object at once.
    with _locks_guard:
        return _locks.setdefault(uid, threading.Lock())


def _indexes(kwargs: Mapping[str, Any]) -> None:
    """Hand kopf's indexes (live, read-only views it keeps current) to the reconciler's reads. kopf
    passes them to every handler, and runs none before each index has its initial listing."""
    found = {kind: kwargs[cache.index_id(kind)] for kind in cache.INDEXED_KINDS if cache.index_id(kind) in kwargs}
    if found:
        _get_reconciler().api.indexes.update(found)


def _index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict]:
    return {(namespace or "", name): copy.deepcopy(dict(body))}


# One index per kind the reconciler reads; the children's watches carry the operator's label selector.
for _kind, (_group, _version, _plural) in cache.INDEXED_KINDS.items():
    kopf.index(_group, _version, _plural, id=cache.index_id(_kind),
               labels=None if _kind == constants.KIND else {constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME})(_index)  # fmt: skip


def _run(body: Mapping[str, Any], logger: logging.Logger | logging.LoggerAdapter) -> Outcome:
    plain = copy.deepcopy(dict(body))
    with _lock(plain["metadata"].get("uid", "")):
        try:
            outcome = _get_reconciler().reconcile(plain)
        except RetryableError as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.delay or RETRY_DELAY_SECONDS) from exc
    if outcome.applied or outcome.deleted:
        logger.info("applied %s, deleted %s", outcome.applied, outcome.deleted)
    if outcome.problem is not None:
        logger.warning("degraded: %s: %s", outcome.problem.reason, outcome.problem.message)
    return outcome


# The label every object this operator writes carries, and the pods too (meta.labels): watches
# ask the API server for these only, instead of streaming every Deployment and pod in the cluster.
MANAGED_SELECTOR = f"{constants.LABEL_MANAGED_BY}={constants.OPERATOR_NAME}"
WATCHED_CHILDREN = tuple((group, plural) for kind, (group, _, plural) in cache.INDEXED_KINDS.items() if kind != constants.KIND)
# kopf's own API calls: a half-open connection must fail, not hang the handler.
CONNECT_TIMEOUT_SECONDS = 10.0


class Resync:
    """Reconciles every known InferenceService periodically, from a thread of its own.

    kopf's watch stream tells ``remember``/``forget`` which objects exist; ``run_once`` reads each
    one fresh and reconciles it, so drift that no watch reports is repaired."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], None] = {}
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def remember(self, namespace: str, name: str) -> None:
        with self._guard:
            self._known[(namespace, name)] = None

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._known.pop((namespace, name), None)

    def known(self) -> list[tuple[str, str]]:
        with self._guard:
            return list(self._known)

    def run_once(self, logger: logging.Logger | logging.LoggerAdapter) -> None:
        for namespace, name in self.known():
            try:
                body = _get_reconciler().api.get(constants.KIND, namespace, name)
                if body is None:
                    self.forget(namespace, name)
                    continue
                _run(body, logger)
            except Exception as exc:  # one object's failure must not stop the others' resync
                logger.warning("resync of %s/%s failed: %s", namespace, name, exc)

    def start(self, interval: float, logger: logging.Logger | logging.LoggerAdapter) -> None:
        def loop() -> None:
            while not self._stop.wait(interval):
                self.run_once(logger)

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name="minisgl-resync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


resyncer = Resync()


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any) -> None:
    # One operator replica (the chart's Deployment uses the Recreate strategy): no peering.
    settings.peering.standalone = True
    # The CRD is installed with the chart; no need to watch CRDs or namespaces (and no RBAC for it).
    settings.scanning.disabled = True
    # kopf keeps its bookkeeping in annotations of our group, not in status (which is ours).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=constants.KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=constants.KOPF_ANNOTATION_PREFIX)
    settings.posting.reporting_component = constants.OPERATOR_NAME
    for group, plural in WATCHED_CHILDREN:
        settings.watching.label_selectors[group, plural] = MANAGED_SELECTOR
    settings.networking.connect_timeout = CONNECT_TIMEOUT_SECONDS
    if _reconciler is None:
        configure(KubernetesApi.from_environment())
    resyncer.start(config.resync_seconds(), logger)


@kopf.on.cleanup()
def cleanup(**_: Any) -> None:
    resyncer.stop()


@kopf.on.create(constants.GROUP, constants.VERSION, constants.PLURAL, id="reconcile-create")
def on_create(body: kopf.Body, logger: logging.Logger, **kwargs: Any) -> None:
    _indexes(kwargs)
    _run(body, logger)


@kopf.on.update(constants.GROUP, constants.VERSION, constants.PLURAL, id="reconcile-update")
def on_update(body: kopf.Body, logger: logging.Logger, **kwargs: Any) -> None:
    _indexes(kwargs)
    _run(body, logger)


@kopf.on.resume(constants.GROUP, constants.VERSION, constants.PLURAL, id="reconcile-resume")
def on_resume(body: kopf.Body, logger: logging.Logger, **kwargs: Any) -> None:
    _indexes(kwargs)
    _run(body, logger)


@kopf.on.event(constants.GROUP, constants.VERSION, constants.PLURAL, id="track")
def track(event: Mapping[str, Any], **kwargs: Any) -> None:
    _indexes(kwargs)
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    if "name" not in meta:
        return
    if event.get("type") == "DELETED":
        resyncer.forget(meta.get("namespace", ""), meta["name"])
    else:
        resyncer.remember(meta.get("namespace", ""), meta["name"])


@kopf.on.delete(constants.GROUP, constants.VERSION, constants.PLURAL, id="deleted", optional=True)
def on_delete(name: str, namespace: str, logger: logging.Logger, uid: str | None = None, **_: Any) -> None:
    logger.info("InferenceService %s/%s deleted; its children go with it (ownerReferences)", namespace, name)
    with _locks_guard:
        _locks.pop(uid or "", None)


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == constants.KIND and ref.get("apiVersion", "").startswith(f"{constants.GROUP}/"):
            return ref
    return None


def _reconcile_owner(namespace: str, name: str, uid: str | None, logger: logging.Logger) -> None:
    body = _get_reconciler().api.get(constants.KIND, namespace, name)
    if body is None or (uid is not None and body["metadata"].get("uid") != uid):
        return  # the owner is gone (or was recreated): the garbage collector handles the rest
    _run(body, logger)


@kopf.on.event("apps", "v1", "deployments", id="deployment-event", labels={constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME})
@kopf.on.event("batch", "v1", "jobs", id="job-event", labels={constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME})
def on_deployment_event(event: Mapping[str, Any], logger: logging.Logger, **kwargs: Any) -> None:
    """A workload's (or the model loader Job's) progress changes its owner's status: reconcile it."""
    _indexes(kwargs)
    obj = event.get("object") or {}
    owner = _controller(obj)
    if owner is None:
        return
    _reconcile_owner(obj["metadata"]["namespace"], owner["name"], owner.get("uid"), logger)


@kopf.on.event("", "v1", "pods", id="pod-event", labels={constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME})
def on_pod_event(event: Mapping[str, Any], logger: logging.Logger, **kwargs: Any) -> None:
    """A pod's scheduling, image pull or crash changes the owner's status (its owner is a
    ReplicaSet, so the InferenceService is found by the instance label)."""
    _indexes(kwargs)
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(constants.LABEL_INSTANCE)
    if not name or event.get("type") == "DELETED":
        return
    _reconcile_owner(meta["namespace"], name, None, logger)


on_job_event = on_deployment_event
