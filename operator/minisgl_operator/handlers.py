"""The kopf handlers: thin wrappers that hand each InferenceService to the reconciler.

Run with ``kopf run --standalone -m minisgl_operator.handlers (--all-namespaces | -n NS ...)``.

- create / update / resume: reconcile the object kopf hands over;
- a timer: reconcile every ``MINISGL_OPERATOR_RESYNC_SECONDS`` (drift in Services, HPAs, PDBs and
  PVCs, which no watch reports);
- Deployment events (of Deployments this operator manages): reconcile the owner, so status follows
  the Deployment and a deleted or edited Deployment comes back at once;
- delete: nothing to do, the garbage collector deletes the children through their ownerReferences
  (the handler is optional, so kopf adds no finalizer).

A bad spec never raises (Degraded + Event instead); transient API errors raise
``kopf.TemporaryError`` and kopf retries with a delay, so nothing crash-loops.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Callable, Mapping

import kopf

from . import config
from . import constants as c
from .kube import KubeApi, KubernetesApi
from .reconcile import Outcome, Reconciler, RetryableError, utc_now

RETRY_DELAY_SECONDS = 15

_reconciler: Reconciler | None = None
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def configure(api: KubeApi, default_image: str | None = None, clock: Callable[[], str] = utc_now) -> Reconciler:
    """Set the API the handlers write through (the real client at startup, a fake in tests)."""
    global _reconciler
    _reconciler = Reconciler(api, default_image or config.default_server_image(), clock)
    return _reconciler


def _get_reconciler() -> Reconciler:
    if _reconciler is None:
        raise RuntimeError("minisgl_operator.handlers.configure() was not called")
    return _reconciler


def _lock(uid: str) -> threading.Lock:
    # Several handlers (an update, a Deployment event, the timer) may fire for one object at once.
    with _locks_guard:
        return _locks.setdefault(uid, threading.Lock())


def _run(body: Mapping[str, Any], logger: logging.Logger | logging.LoggerAdapter) -> Outcome:
    plain = copy.deepcopy(dict(body))
    with _lock(plain["metadata"].get("uid", "")):
        try:
            outcome = _get_reconciler().reconcile(plain)
        except RetryableError as exc:
            raise kopf.TemporaryError(str(exc), delay=RETRY_DELAY_SECONDS) from exc
    if outcome.applied or outcome.deleted:
        logger.info("applied %s, deleted %s", outcome.applied, outcome.deleted)
    if outcome.problem is not None:
        logger.warning("degraded: %s: %s", outcome.problem.reason, outcome.problem.message)
    return outcome


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    # One operator replica (the chart's Deployment uses the Recreate strategy): no peering.
    settings.peering.standalone = True
    # The CRD is installed with the chart; no need to watch CRDs or namespaces (and no RBAC for it).
    settings.scanning.disabled = True
    # kopf keeps its bookkeeping in annotations of our group, not in status (which is ours).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.KOPF_ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=c.KOPF_ANNOTATION_PREFIX)
    settings.posting.reporting_component = c.OPERATOR_NAME
    if _reconciler is None:
        configure(KubernetesApi.from_environment())


@kopf.on.create(c.GROUP, c.VERSION, c.PLURAL, id="reconcile-create")
def on_create(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
    _run(body, logger)


@kopf.on.update(c.GROUP, c.VERSION, c.PLURAL, id="reconcile-update")
def on_update(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
    _run(body, logger)


@kopf.on.resume(c.GROUP, c.VERSION, c.PLURAL, id="reconcile-resume")
def on_resume(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
    _run(body, logger)


@kopf.timer(c.GROUP, c.VERSION, c.PLURAL, id="resync", interval=config.resync_seconds(), initial_delay=config.resync_seconds())
def resync(body: kopf.Body, logger: logging.Logger, **_: Any) -> None:
    _run(body, logger)


@kopf.on.delete(c.GROUP, c.VERSION, c.PLURAL, id="deleted", optional=True)
def on_delete(name: str, namespace: str, logger: logging.Logger, uid: str | None = None, **_: Any) -> None:
    logger.info("InferenceService %s/%s deleted; its children go with it (ownerReferences)", namespace, name)
    with _locks_guard:
        _locks.pop(uid or "", None)


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == c.KIND and ref.get("apiVersion", "").startswith(f"{c.GROUP}/"):
            return ref
    return None


@kopf.on.event("apps", "v1", "deployments", id="deployment-event", labels={c.LABEL_MANAGED_BY: c.OPERATOR_NAME})
def on_deployment_event(event: Mapping[str, Any], logger: logging.Logger, **_: Any) -> None:
    obj = event.get("object") or {}
    owner = _controller(obj)
    if owner is None:
        return
    namespace = obj["metadata"]["namespace"]
    body = _get_reconciler().api.get(c.KIND, namespace, owner["name"])
    if body is None or body["metadata"].get("uid") != owner.get("uid"):
        return  # the owner is gone (or was recreated): the garbage collector handles the rest
    _run(body, logger)
