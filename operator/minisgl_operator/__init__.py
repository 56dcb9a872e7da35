"""minisgl-operator: a kopf operator that turns InferenceService objects into served models.

Module map, every module of the package (each one does one thing), lowest first: a module imports
only those above it.

- ``constants``: API group/kind names, labels, the HPA metric and every other fixed name.
- ``config``: the operator's settings from its environment (server and picker images, resync period).
- ``server``: what the operator needs to know about the minisgl server (flags, probe paths,
  drain timeout), read from ``minisgl.server.args`` instead of being repeated here.
- ``quantity``: resource quantities ('4000m', '1Ti') as numbers.
- ``k8s_schema``: the core/v1 types the CRD embeds (Affinity, EnvVarSource), from the ``kubernetes`` client.
- ``crd``: the CustomResourceDefinition and its OpenAPI schema, defined once.
- ``schema``: turns the CRD's structural schema into JSON Schema and validates specs with it.
- ``spec``: parses and validates an InferenceService spec into a typed value.
- ``merge``: the API's list merge keys: the podTemplate strategic merge and the drift check.
- ``meta``: names and metadata every child shares (selectors, labels, ownerReference, config hash).
- ``sizing``: what a pod asks of its node (CPU, memory, disk), from the model where the spec says nothing.
- ``router``: pure functions spec.router -> InferencePool, endpoint picker, HTTPRoute.
- ``render``: pure functions spec -> every child (Deployment or LeaderWorkerSet, Service, PVC and
  loader Job, HPA or KEDA ScaledObject, PDB, and ``router``'s objects).
- ``status``: pure functions Deployment and pods -> InferenceService status and conditions.
- ``kube``: the small adapter over the official ``kubernetes`` client that handlers write through.
- ``cache``: reads from kopf's watch-fed indexes instead of a GET per child.
- ``reconcile``: the idempotent reconcile loop (apply what changed, repair drift, write status).
- ``handlers``: the kopf handlers, thin wrappers around ``reconcile``, and the resync thread.
- ``cli`` (and ``__main__``): ``minisgl-operator render FILE`` (dry run) and ``minisgl-operator crd [--apply]``.
"""

__version__ = "0.1.0"
