{{/* The chart's name, truncated to a DNS label. */}}
{{- define "minisgl-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: used for every object this chart creates. */}}
{{- define "minisgl-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "minisgl-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "minisgl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "minisgl-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "minisgl-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: minisgl
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The operator's ServiceAccount. Without create, a name is required: falling back to the namespace's
"default" account would bind the operator's ClusterRole to every pod that runs as it.
*/}}
{{- define "minisgl-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "minisgl-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false (the chart never binds the operator's role to the namespace's default account)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's permissions: exactly what it uses (operator/minisgl_operator/kube.py, PERMISSIONS;
tests/operator checks that the two agree). kopf runs --standalone (no peering) with cluster
scanning off, so it needs no CRD, namespace or KopfPeering permissions.
*/}}
{{- define "minisgl-operator.rules" -}}
# kopf watches InferenceServices and keeps its progress in their annotations; the Deployment
# event handler reads the owner by name.
- apiGroups: ["minisgl.io"]
  resources: ["inferenceservices"]
  verbs: ["get", "list", "watch", "patch"]
# The operator writes the status.
- apiGroups: ["minisgl.io"]
  resources: ["inferenceservices/status"]
  verbs: ["patch"]
# The replicas KEDA left at zero, raised when KEDA goes (an HPA never scales a target at zero).
- apiGroups: ["minisgl.io"]
  resources: ["inferenceservices/scale"]
  verbs: ["patch"]
# ownerReferences with blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
- apiGroups: ["minisgl.io"]
  resources: ["inferenceservices/finalizers"]
  verbs: ["update"]
# Children, written by server-side apply (patch; create when new), and listed and watched by label:
# kopf's indexes serve the operator's reads (operator/minisgl_operator/cache.py).
# Deployments and Services are deleted too: the endpoint picker's when spec.router goes, the
# server's Deployment when a replica starts spanning several nodes (LeaderWorkerSet).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The model cache's loader Job, replaced when the model changes, watched for its completion.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Multi-node replicas, KEDA autoscaling and the router's objects (its endpoint picker runs with a
# ConfigMap, ServiceAccount, Role and RoleBinding of its own).
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# What spec.router.gatewayProvider's gateway needs: Istio's DestinationRule, GKE's policies.
- apiGroups: ["networking.istio.io"]
  resources: ["destinationrules"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.gke.io"]
  resources: ["healthcheckpolicies", "gcpbackendpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A Role grants only what its creator holds: what the endpoint picker's Role grants it.
- apiGroups: ["inference.networking.x-k8s.io", "llm-d.ai"]
  resources: ["inferenceobjectives", "inferencemodelrewrites"]
  verbs: ["get", "list", "watch"]
# HPA and PDB are deleted again when the spec stops asking for them.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events: the operator's and kopf's own.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Pods are read and watched (by label) for why a rollout is stuck: Unschedulable, ImagePullBackOff,
# CrashLoopBackOff, OOMKilled, a missing Secret.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{- define "minisgl-operator.imageTag" -}}
{{- .tag | default .appVersion }}
{{- end }}
