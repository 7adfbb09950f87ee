{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "edgepath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart unless the release already names the chart. */}}
{{- define "edgepath.fullname" -}}
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

{{- define "edgepath.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "edgepath.labels" -}}
helm.sh/chart: {{ include "edgepath.chart" . }}
{{ include "edgepath.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: edgepath
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "edgepath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edgepath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component: service | trainer | redis. Call with (list . "service"). */}}
{{- define "edgepath.componentSelector" -}}
{{ include "edgepath.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "edgepath.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "edgepath.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* [registry/]repository[:tag][@digest]: the digest wins (the tag is then left out). */}}
{{- define "edgepath.image" -}}
{{- $registry := .Values.image.registry | default (.Values.global | default dict).imageRegistry }}
{{- $repo := ternary (printf "%s/%s" $registry .Values.image.repository) .Values.image.repository (not (empty $registry)) }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Redis image, same rules as edgepath.image. */}}
{{- define "edgepath.redisImage" -}}
{{- $img := .Values.redis.image }}
{{- $registry := $img.registry | default (.Values.global | default dict).imageRegistry }}
{{- $repo := ternary (printf "%s/%s" $registry $img.repository) $img.repository (not (empty $registry)) }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo $img.tag }}
{{- end }}
{{- end }}

{{/* imagePullSecrets: the chart's plus global.imagePullSecrets (names or {name: ...}). */}}
{{- define "edgepath.imagePullSecrets" -}}
{{- $all := list }}
{{- range concat .Values.imagePullSecrets ((.Values.global | default dict).imagePullSecrets | default list) }}
{{- if kindIs "string" . }}{{ $all = append $all (dict "name" .) }}{{ else }}{{ $all = append $all . }}{{ end }}
{{- end }}
{{- with $all }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Non-empty when templates run against a cluster (helm install/upgrade): listing Secrets in the release
namespace (which helm's own release storage needs) returns a SecretList object; under helm template,
helm lint and Argo CD `lookup` returns an empty map. */}}
{{- define "edgepath.clusterReachable" -}}
{{- if (lookup "v1" "Secret" .Release.Namespace "") }}true{{- end }}
{{- end }}

{{/* The refusal to generate keys (call with (list . "what" ...)) where they could not be kept across renders;
empty when generating is fine (a cluster to read them back from, or renderWithoutCluster=generate). */}}
{{- define "edgepath.generationRefusal" -}}
{{- $ctx := index . 0 }}
{{- $what := rest . }}
{{- if and $what (ne $ctx.Values.secrets.renderWithoutCluster "generate") (not (include "edgepath.clusterReachable" $ctx)) }}
{{- $n := len $what }}
{{- $names := ternary (first $what) (printf "%s and %s" (initial $what | join ", ") (last $what)) (eq $n 1) }}
{{- if eq $n 1 }}
{{- printf "refusing to generate %s without a cluster: helm template, helm lint and Argo CD cannot read the previous value back (lookup returns nothing), so it would change on every render. Give it in values or an existing Secret (secrets.existingSecret, tls.existingSecret, redis.auth.existingSecret — the GitOps path), or set secrets.renderWithoutCluster=generate for a throwaway render" $names }}
{{- else }}
{{- printf "refusing to generate %s without a cluster: helm template, helm lint and Argo CD cannot read the previous values back (lookup returns nothing), so they would change on every render. Give them in values or existing Secrets (secrets.existingSecret, tls.existingSecret, redis.auth.existingSecret — the GitOps path), or set secrets.renderWithoutCluster=generate for a throwaway render" $names }}
{{- end }}
{{- end }}
{{- end }}

{{/* Refuse to generate a key (call with (list . "what")) where it could not be kept across renders. The
templates that generate call edgepath.validate first, which names every such key at once; this is a backstop. */}}
{{- define "edgepath.requireStableGeneration" -}}
{{- with (include "edgepath.generationRefusal" .) }}
{{- fail . }}
{{- end }}
{{- end }}

{{/* What the chart would generate (call with .): the keys secret.yaml and tls-secret.yaml make up when neither
values nor an existing Secret give them, as edgepath.generationRefusal names them. */}}
{{- define "edgepath.keysToGenerate" -}}
{{- $what := list }}
{{- if not .Values.secrets.existingSecret }}
{{- if not .Values.secrets.hmacKey }}
{{- $what = append $what "the model-snapshot HMAC key (secrets.hmacKey)" }}
{{- end }}
{{- if not (or .Values.secrets.jwtKey .Values.secrets.tokensJson .Values.tls.clientAuth) }}
{{- $what = append $what "the device JWT key (secrets.jwtKey)" }}
{{- end }}
{{- if and (include "edgepath.redisAuth" .) (not .Values.redis.auth.existingSecret) (not .Values.redis.auth.password) }}
{{- $what = append $what "the Redis password (redis.auth.password)" }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- $what = append $what "the TLS CA and server certificate (tls.existingSecret)" }}
{{- end }}
{{- toJson $what }}
{{- end }}

{{/* True (non-empty) when the chart's Redis runs with requirepass. */}}
{{- define "edgepath.redisAuth" -}}
{{- if and .Values.redis.enabled .Values.redis.auth.enabled }}true{{- end }}
{{- end }}

{{/* Secret holding the Redis password. */}}
{{- define "edgepath.redisPasswordSecret" -}}
{{- default (include "edgepath.secretName" .) .Values.redis.auth.existingSecret }}
{{- end }}

{{/* Env var of the Redis password (first in env: later values refer to it as $(REDIS_PASSWORD)). */}}
{{- define "edgepath.redisPasswordEnv" -}}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "edgepath.redisPasswordSecret" . }}
      key: {{ .Values.redis.auth.existingSecretPasswordKey }}
{{- end }}

{{- define "edgepath.secretName" -}}
{{- default (printf "%s-secrets" (include "edgepath.fullname" .)) .Values.secrets.existingSecret }}
{{- end }}

{{- define "edgepath.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "edgepath.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{- define "edgepath.redisName" -}}
{{- printf "%s-redis" (include "edgepath.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* True (non-empty) when a shared store is configured: the chart's Redis or an existing one. */}}
{{- define "edgepath.sharedStore" -}}
{{- if or .Values.redis.enabled .Values.redis.url }}true{{- end }}
{{- end }}

{{/* EDGEPATH_STORE_URL: the chart's Redis, the existing Redis, or the in-process store. */}}
{{- define "edgepath.storeUrl" -}}
{{- if .Values.redis.enabled }}
{{- printf "redis://%s%s:%d/%d" (ternary ":$(REDIS_PASSWORD)@" "" (not (empty (include "edgepath.redisAuth" .))))  (include "edgepath.redisName" .) (int .Values.redis.port) (int .Values.redis.db) }}
{{- else if .Values.redis.url }}
{{- .Values.redis.url }}
{{- else }}
{{- "memory://" }}
{{- end }}
{{- end }}

{{/* "https" or "http" for probes and the test pod. */}}
{{- define "edgepath.httpScheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* Pod-level security context shared by every pod of the chart (non-root, RuntimeDefault seccomp). */}}
{{- define "edgepath.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ .uid }}
fsGroup: {{ .uid }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Container security context: read-only root filesystem, no privilege escalation, no capabilities. */}}
{{- define "edgepath.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Refuse value combinations that cannot work, and keys that would be generated where they cannot be kept:
one message naming every problem, each in its own words (not one per render). Called by every template that
could otherwise fail first (configmap.yaml, secret.yaml, tls-secret.yaml). */}}
{{- define "edgepath.validate" -}}
{{- $problems := list }}
{{- if not (include "edgepath.sharedStore" .) }}
{{- if .Values.trainer.enabled }}
{{- $problems = append $problems "trainer.enabled needs a shared store: set redis.enabled=true or redis.url (the in-process store trains inside the one replica)" }}
{{- end }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- $problems = append $problems "more than one replica needs a shared store: set redis.enabled=true or redis.url, or replicaCount=1 and autoscaling.enabled=false" }}
{{- end }}
{{- end }}
{{- if and .Values.redis.enabled .Values.redis.url }}
{{- $problems = append $problems "set either redis.enabled (the chart's Redis) or redis.url (an existing Redis), not both" }}
{{- end }}
{{- if and (eq .Values.settings.profile "prod") (not .Values.tls.enabled) }}
{{- $problems = append $problems "settings.profile=prod requires tls.enabled=true (the service refuses to start without TLS in prod)" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) }}
{{- $problems = append $problems "tls.clientAuth (mTLS) needs tls.enabled=true" }}
{{- end }}
{{- $d := .Values.drain }}
{{- $drain := add $d.preStopSleepSeconds $d.readinessDelaySeconds $d.graceSeconds $d.flushSeconds }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- $problems = append $problems (printf "terminationGracePeriodSeconds (%d) is shorter than the drain (preStop + readiness delay + grace + flush = %d s): the kubelet would SIGKILL in-flight calls" (int .Values.terminationGracePeriodSeconds) (int $drain)) }}
{{- end }}
{{- with (include "edgepath.generationRefusal" (prepend (include "edgepath.keysToGenerate" . | fromJsonArray) .)) }}
{{- $problems = append $problems . }}
{{- end }}
{{- if eq (len $problems) 1 }}
{{- fail (first $problems) }}
{{- else if $problems }}
{{- fail (printf "%d problems with the values:\n- %s" (len $problems) (join "\n- " $problems)) }}
{{- end }}
{{- end }}

{{/* Environment shared by the service and the trainer: settings from the ConfigMap, secrets from the Secret. */}}
{{- define "edgepath.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "edgepath.fullname" . }}-settings
env:
  {{- if include "edgepath.redisAuth" . }}
  {{- include "edgepath.redisPasswordEnv" . | nindent 2 }}
  # The chart's Redis: the URL carries the password, expanded by the kubelet from REDIS_PASSWORD.
  - name: EDGEPATH_STORE_URL
    value: {{ include "edgepath.storeUrl" . | quote }}
  {{- else }}
  - name: EDGEPATH_STORE_URL
    valueFrom:
      secretKeyRef:
        name: {{ include "edgepath.secretName" . }}
        key: store-url
  {{- end }}
  - name: EDGEPATH_HMAC_KEY
    valueFrom:
      secretKeyRef:
        name: {{ include "edgepath.secretName" . }}
        key: hmac-key
  - name: EDGEPATH_AUTH_JWT_KEY
    valueFrom:
      secretKeyRef:
        name: {{ include "edgepath.secretName" . }}
        key: jwt-key
        optional: true
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* Read-only mounts of the TLS files and the token file (service and trainer see the same settings). */}}
{{- define "edgepath.secretMounts" -}}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/edgepath/tls
  readOnly: true
{{- end }}
{{- if .Values.secrets.tokensJson }}
- name: auth
  mountPath: /etc/edgepath/auth
  readOnly: true
{{- end }}
{{- end }}

{{- define "edgepath.secretVolumes" -}}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "edgepath.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- if .Values.secrets.tokensJson }}
- name: auth
  secret:
    secretName: {{ include "edgepath.secretName" . }}
    defaultMode: 0440
    items:
      - key: tokens.json
        path: tokens.json
{{- end }}
{{- end }}

{{/* Name the server certificate carries, checked by the TLS health checks (default: the Service name). */}}
{{- define "edgepath.tlsServerName" -}}
{{- default (include "edgepath.fullname" .) .Values.tls.serverName }}
{{- end }}
