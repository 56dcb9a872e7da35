"""minisgl-operator: a kopf operator that turns InferenceService objects into served models.

Module map (each one does one thing):

- ``constants``: API group/kind names, labels, the HPA metric and every other fixed name.
- ``server``: what the operator needs to know about the minisgl server (flags, probe paths,
  drain timeout), read from ``minisgl.server.args`` instead of being repeated here.
- ``crd``: the CustomResourceDefinition and its OpenAPI schema, defined once.
- ``schema``: turns the CRD's structural schema into JSON Schema and validates specs with it.
- ``spec``: parses and validates an InferenceService spec into a typed value.
- ``quantity``: resource quantities ('4000m', '1Ti') as numbers.
- ``merge``: the API's list merge keys: the podTemplate strategic merge and the drift check.
- ``render``: pure functions spec -> Kubernetes objects (Deployment, Service, PVC, HPA, PDB).
- ``status``: pure functions Deployment and pods -> InferenceService status and conditions.
- ``kube``: the small adapter over the official ``kubernetes`` client that handlers write through.
- ``reconcile``: the idempotent reconcile loop (apply what changed, repair drift, write status).
- ``handlers``: the kopf handlers, thin wrappers around ``reconcile``.
- ``cli``: ``minisgl-operator render FILE`` (dry run) and ``minisgl-operator crd [--apply]``.
"""

__version__ = "0.1.0"
