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

{{/* Bytes of a Kubernetes memory quantity (e.g. 512Mi, 1G, 1.5Gi, 268435456; call with the quantity), as an int64;
0 when empty. Suffixes: Ki Mi Gi Ti Pi Ei (powers of 1024), k K M G T P E (powers of 1000), m (thousandths). */}}
{{- define "edgepath.quantityBytes" -}}
{{- $q := ternary (toString (int64 (. | default 0))) (toString . | trim) (or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .)) }}
{{- if not $q }}0{{- else }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $suffix := trimPrefix $num $q }}
{{- $factors := dict "" 1.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 "k" 1000.0 "K" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "m" 0.001 }}
{{- if or (not $num) (not (hasKey $factors $suffix)) }}
{{- fail (printf "cannot read the memory quantity %q (e.g. 512Mi, 2Gi, 1G)" $q) }}
{{- end }}
{{- mulf (float64 $num) (get $factors $suffix) | floor | int64 }}
{{- end }}
{{- end }}

{{/* --maxmemory of the chart's Redis, bytes: redis.maxmemory when given, else redis.maxmemoryPercent of
redis.resources.limits.memory; 0 (no --maxmemory: Redis grows until the kernel kills it) with neither. */}}
{{- define "edgepath.redisMaxmemory" -}}
{{- $r := .Values.redis }}
{{- if $r.maxmemory }}
{{- include "edgepath.quantityBytes" $r.maxmemory }}
{{- else }}
{{- $limit := include "edgepath.quantityBytes" (dig "limits" "memory" "" ($r.resources | default dict)) | int64 }}
{{- div (mul $limit (int64 $r.maxmemoryPercent)) 100 }}
{{- end }}
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
one message naming every problem, each in its own words (not one per render). templates/validate.yaml calls it
before every other template (helm then reports a refusal there, not in the template that first read the values);
the templates that could otherwise fail first on a refused value call it too (configmap.yaml, secret.yaml,
tls-secret.yaml; the deployments through configmap.yaml's checksum), so that under any render order the refusal
is this message, not another template's error. */}}
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
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (ge (int .Values.tls.renewBeforeDays) (int .Values.tls.generatedValidityDays)) }}
{{- $problems = append $problems (printf "tls.renewBeforeDays (%d) must be below tls.generatedValidityDays (%d): every upgrade would renew the certificate and restart the deciders" (int .Values.tls.renewBeforeDays) (int .Values.tls.generatedValidityDays)) }}
{{- end }}
{{- $btp := .Values.grpcRoute.backendTLSPolicy }}
{{- if and .Values.grpcRoute.enabled $btp.enabled }}
{{- if not .Values.tls.enabled }}
{{- $problems = append $problems "grpcRoute.backendTLSPolicy needs tls.enabled=true (without TLS the gRPC port is cleartext: no BackendTLSPolicy)" }}
{{- else if and .Values.tls.existingSecret (not $btp.caConfigMap) }}
{{- $problems = append $problems "grpcRoute.backendTLSPolicy with tls.existingSecret needs grpcRoute.backendTLSPolicy.caConfigMap: a ConfigMap (key ca.crt) with the CA of that certificate" }}
{{- end }}
{{- end }}
{{- /* Each listener its own port: the container's (the service binds each; equal ports render two containerPorts of one
number and the process dies at start) and the Service's (the API server refuses a Service with a port twice). */}}
{{- $s := .Values.settings }}
{{- $listeners := list (list "settings.grpcPort" (int $s.grpcPort)) (list "settings.httpPort" (int $s.httpPort)) }}
{{- if $s.metricsPort }}
{{- $listeners = append $listeners (list "settings.metricsPort" (int $s.metricsPort)) }}
{{- end }}
{{- $svcPorts := list (list "service.grpcPort" (int .Values.service.grpcPort)) (list "service.httpPort" (int .Values.service.httpPort)) }}
{{- if $s.metricsPort }}
{{- $svcPorts = append $svcPorts (list "settings.metricsPort (the Service's metrics port)" (int $s.metricsPort)) }}
{{- end }}
{{- $why := dict "pod" "each listener of the service needs a port of its own (the process would fail to bind the second and exit at start)" "svc" "the Service needs a port of its own for each (the API server refuses a Service with one port twice)" }}
{{- range $group := list (list $why.pod $listeners) (list $why.svc $svcPorts) }}
{{- $seen := dict }}
{{- range $p := index $group 1 }}
{{- $key := toString (index $p 1) }}
{{- if hasKey $seen $key }}
{{- $problems = append $problems (printf "%s and %s are both %s: %s" (get $seen $key) (index $p 0) $key (index $group 0)) }}
{{- else }}
{{- $_ := set $seen $key (index $p 0) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.redis.enabled }}
{{- $max := include "edgepath.redisMaxmemory" . | int64 }}
{{- $limit := include "edgepath.quantityBytes" (dig "limits" "memory" "" (.Values.redis.resources | default dict)) | int64 }}
{{- if and $limit $max (ge $max $limit) }}
{{- $problems = append $problems (printf "redis.maxmemory (%d bytes) must be below redis.resources.limits.memory (%d bytes), with room for the allocator's fragmentation and the append-only file rewrite's fork: the kernel kills a Redis that reaches its limit (values.yaml redis.maxmemory; ~70 %% of the limit)" $max $limit) }}
{{- end }}
{{- end }}
{{- if and .Values.secrets.existingSecret (not .Values.secrets.tokensJson) }}
{{- /* Where a cluster is reachable (helm install/upgrade), the existing Secret's keys are checked against the switch;
helm template and Argo CD see no Secret (lookup returns nothing) and check nothing. */}}
{{- $found := include "edgepath.lookupSecret" (list . .Values.secrets.existingSecret) | fromJson }}
{{- if $found }}
{{- $hasTokens := hasKey (get $found "data" | default dict) "tokens.json" }}
{{- if and $hasTokens (not .Values.secrets.tokensFromExistingSecret) }}
{{- $problems = append $problems (printf "Secret %s (secrets.existingSecret) holds tokens.json but secrets.tokensFromExistingSecret is false: the pods would not read it (its devices could not authenticate). Set secrets.tokensFromExistingSecret=true, or remove the key from the Secret" .Values.secrets.existingSecret) }}
{{- else if and (not $hasTokens) .Values.secrets.tokensFromExistingSecret }}
{{- $problems = append $problems (printf "secrets.tokensFromExistingSecret is true but Secret %s (secrets.existingSecret) holds no tokens.json: the pods could not start. Add the key (edgepath tokens add DEVICE --file tokens.json) or set secrets.tokensFromExistingSecret=false" .Values.secrets.existingSecret) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* extraSettings may set any other setting, not one the chart also reads for its own objects: a port there left the
containerPort, the Service and the probes on the chart's (the pods went Ready, every gRPC call through the Service
failed), a file path left the mounts elsewhere, a key would sit in the ConfigMap in clear. */}}
{{- $owned := dict "EDGEPATH_GRPC_PORT" "settings.grpcPort" "EDGEPATH_HTTP_PORT" "settings.httpPort" "EDGEPATH_METRICS_PORT" "settings.metricsPort" "EDGEPATH_PROFILE" "settings.profile" "EDGEPATH_TLS_CERT_FILE" "tls.enabled / tls.existingSecret" "EDGEPATH_TLS_KEY_FILE" "tls.enabled / tls.existingSecret" "EDGEPATH_TLS_CLIENT_CA_FILE" "tls.clientAuth" "EDGEPATH_AUTH_TOKENS_FILE" "secrets.tokensJson or secrets.tokensFromExistingSecret" "EDGEPATH_STORE_URL" "redis.enabled or redis.url (kept in the Secret)" "EDGEPATH_HMAC_KEY" "secrets.hmacKey (kept in the Secret)" "EDGEPATH_AUTH_JWT_KEY" "secrets.jwtKey (kept in the Secret)" "EDGEPATH_DRAIN_READINESS_DELAY_S" "drain.readinessDelaySeconds" "EDGEPATH_DRAIN_GRACE_S" "drain.graceSeconds" "EDGEPATH_DRAIN_FLUSH_TIMEOUT_S" "drain.flushSeconds" }}
{{- range $k := keys .Values.extraSettings | sortAlpha }}
{{- with get $owned (upper $k) }}
{{- $problems = append $problems (printf "extraSettings.%s: set %s instead (the chart renders that setting itself and uses it for the pods' ports, probes, mounts or Secret: given here it would leave them behind)" $k .) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- $problems = append $problems (printf "autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- end }}
{{- $replicas := int (ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled) }}
{{- $minAvailable := .Values.podDisruptionBudget.minAvailable }}
{{- if and .Values.podDisruptionBudget.enabled (gt $replicas 1) (not (kindIs "string" $minAvailable)) (ge (int $minAvailable) $replicas) }}
{{- $problems = append $problems (printf "podDisruptionBudget.minAvailable (%d) must be below the replicas (%d: %s): no pod could ever be evicted, so every node drain would block" (int $minAvailable) $replicas (ternary "autoscaling.minReplicas" "replicaCount" .Values.autoscaling.enabled)) }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- $problems = append $problems "ingress.enabled needs ingress.hosts (e.g. [{host: edgepath.example.org, paths: [{path: /, pathType: Prefix}]}]): an Ingress without rules is refused by the API server" }}
{{- end }}
{{- if and .Values.grpcRoute.enabled (not .Values.grpcRoute.parentRefs) }}
{{- $problems = append $problems "grpcRoute.enabled needs grpcRoute.parentRefs (the Gateway and its listener, e.g. [{name: edge-gateway, sectionName: grpc}]): a route without one is attached to nothing" }}
{{- end }}
{{- if and .Values.secrets.tokensFromExistingSecret (not .Values.secrets.existingSecret) }}
{{- $problems = append $problems "secrets.tokensFromExistingSecret reads tokens.json from secrets.existingSecret, which is not set: name that Secret, or give the file as secrets.tokensJson" }}
{{- end }}
{{- with .Values.secrets.tokensJson }}
{{- $tokens := fromJson . }}
{{- if or (hasKey $tokens "Error") (not (kindIs "map" $tokens)) }}
{{- $problems = append $problems (printf "secrets.tokensJson is not JSON (%s): give the content of the file `edgepath tokens add DEVICE --file tokens.json` writes (the pods would refuse it at start)" (get $tokens "Error" | default "not an object")) }}
{{- else if not (kindIs "slice" (get $tokens "tokens" | default list)) }}
{{- if not (and (kindIs "map" (get $tokens "tokens")) (empty (get $tokens "tokens"))) }}
{{- $problems = append $problems "secrets.tokensJson: expected {\"version\": 1, \"tokens\": [...]}, as `edgepath tokens add DEVICE --file tokens.json` writes (the pods would refuse it at start)" }}
{{- end }}
{{- end }}
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
{{- fail (printf "problem with the values: %s" (first $problems)) }}
{{- else if $problems }}
{{- fail (printf "%d problems with the values:\n- %s" (len $problems) (join "\n- " $problems)) }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the pods read a hashed API-token file (EDGEPATH_AUTH_TOKENS_FILE): key tokens.json of the
chart's Secret (secrets.tokensJson) or of secrets.existingSecret (secrets.tokensFromExistingSecret; a non-empty
secrets.tokensJson beside an existing Secret also reads that Secret's tokens.json, as before the switch existed). */}}
{{- define "edgepath.tokensFile" -}}
{{- if or .Values.secrets.tokensJson (and .Values.secrets.existingSecret .Values.secrets.tokensFromExistingSecret) }}true{{- end }}
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
  {{- $named := list }}
  {{- range .Values.extraEnv }}{{ $named = append $named .name }}{{ end }}
  {{- if not (has "GRPC_VERBOSITY" $named) }}
  # gRPC core's own plain-text stderr lines (outside the service's JSON log format; e.g. an INFO line per failed TLS
  # handshake, which any plaintext client or TCP health check of the gRPC port causes): errors only. The image sets
  # the same; extraEnv may give another level (INFO, DEBUG) for a diagnosis.
  - name: GRPC_VERBOSITY
    value: ERROR
  {{- end }}
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
{{- if include "edgepath.tokensFile" . }}
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
{{- if include "edgepath.tokensFile" . }}
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

{{/* The Secret `name` of the release namespace as JSON ({} when absent, and under helm template / lint /
Argo CD, which have no cluster). Call with (list . name). The one place the chart reads Secrets back. */}}
{{- define "edgepath.lookupSecret" -}}
{{- $ctx := index . 0 }}
{{- (lookup "v1" "Secret" $ctx.Release.Namespace (index . 1)) | default dict | toJson }}
{{- end }}

{{/* Checksum of the values the chart's Secret is made from (secret.yaml), for the pod templates: it changes when
a given key, token file, password or store URL changes, and not with what the chart generates (hmac-key, jwt-key,
the Redis password), which `lookup` keeps across upgrades. Hashing the rendered Secret instead restarted every pod
on the first `helm upgrade` after `helm install`: at install each include generated other keys than the Secret
created. Keys in secrets.existingSecret / redis.auth.existingSecret are not seen: restart the pods after changing
them. */}}
{{- define "edgepath.secretInputsChecksum" -}}
{{- $in := dict "secrets" (omit .Values.secrets "renderWithoutCluster") "storeUrl" (include "edgepath.storeUrl" .) "redisAuth" (include "edgepath.redisPasswordInputs" .) "clientAuth" .Values.tls.clientAuth }}
{{- toJson $in | sha256sum }}
{{- end }}

{{/* What the Redis password comes from, as JSON (given values only: a generated password is kept by lookup). */}}
{{- define "edgepath.redisPasswordInputs" -}}
{{- $a := .Values.redis.auth }}
{{- toJson (dict "auth" (include "edgepath.redisAuth" .) "password" $a.password "existingSecret" (include "edgepath.redisPasswordSecret" .) "key" $a.existingSecretPasswordKey) }}
{{- end }}

{{/* The chart's generated TLS material (tls.enabled, no tls.existingSecret), as JSON: crt, key, ca (base64 PEM),
caKey (base64 PEM; empty when a Secret of an earlier chart version is kept: it did not keep the CA key),
certNotAfter and caNotAfter (unix seconds). Computed once per render and shared by every template (tls-secret.yaml,
the pod templates' checksum, the BackendTLSPolicy's CA), so the Secret created and the checksum of the pods agree
even where the material is generated (helm install).

Kept across upgrades (lookup of the TLS Secret and of <fullname>-tls-ca, which holds the CA key), except that:
- a CA within tls.renewBeforeDays of its expiry is replaced (with a new server certificate): clients that trust the
  old ca.crt must fetch the new one;
- a server certificate within that window of its expiry (or of its CA's) is re-issued by the same CA, so clients
  trusting ca.crt keep working; where the CA key is not at hand (a Secret from before the chart kept it), the CA is
  replaced too.
The expiry times are recorded as annotations of the TLS Secret (templates cannot parse certificates); a Secret
without them (an earlier chart version) is taken to expire tls.generatedValidityDays after its creation. */}}
{{- define "edgepath.generatedTls" -}}
{{- $memo := .Values._edgepathRenderMemo | default dict }}
{{- if not (hasKey $memo "tls") }}
{{- $fullname := include "edgepath.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $old := include "edgepath.lookupSecret" (list . (include "edgepath.tlsSecretName" .)) | fromJson }}
{{- $oldData := get $old "data" | default dict }}
{{- $oldMeta := get $old "metadata" | default dict }}
{{- $ann := get $oldMeta "annotations" | default dict }}
{{- $caSecret := include "edgepath.lookupSecret" (list . (printf "%s-tls-ca" $fullname)) | fromJson }}
{{- $caData := get $caSecret "data" | default dict }}
{{- $now := now | unixEpoch | int64 }}
{{- $days := int .Values.tls.generatedValidityDays }}
{{- $validity := mul $days 86400 }}
{{- $window := mul (int .Values.tls.renewBeforeDays) 86400 }}
{{- $tls := dict "crt" (get $oldData "tls.crt") "key" (get $oldData "tls.key") "ca" (get $oldData "ca.crt") "caKey" "" "certNotAfter" 0 "caNotAfter" 0 }}
{{- if and $tls.ca (eq (get $caData "ca.crt") $tls.ca) }}
{{- $_ := set $tls "caKey" (get $caData "ca.key") }}
{{- end }}
{{- $created := 0 }}
{{- with get $oldMeta "creationTimestamp" }}
{{- $created = toDate "2006-01-02T15:04:05Z07:00" . | unixEpoch | int64 }}
{{- end }}
{{- $_ := set $tls "caNotAfter" (get $ann "edgepath.io/ca-not-after" | default (add $created $validity) | int64) }}
{{- $_ := set $tls "certNotAfter" (get $ann "edgepath.io/cert-not-after" | default (add $created $validity) | int64) }}
{{- $caValid := and $tls.ca (gt (sub $tls.caNotAfter $now) $window) }}
{{- $certValid := and $caValid $tls.crt $tls.key (gt (sub $tls.certNotAfter $now) $window) }}
{{- if not $certValid }}
{{- include "edgepath.requireStableGeneration" (list . "the TLS CA and server certificate (tls.existingSecret)") }}
{{- if not (and $caValid $tls.caKey) }}
{{- $caPair := genCA (printf "%s-ca" $fullname) $days }}
{{- $_ := set $tls "ca" ($caPair.Cert | b64enc) }}
{{- $_ := set $tls "caKey" ($caPair.Key | b64enc) }}
{{- $_ := set $tls "caNotAfter" (add $now $validity) }}
{{- end }}
{{- $caPair := buildCustomCert $tls.ca $tls.caKey }}
{{- $dns := list $fullname (printf "%s.%s" $fullname $ns) (printf "%s.%s.svc" $fullname $ns) (printf "%s.%s.svc.cluster.local" $fullname $ns) "localhost" }}
{{- $cert := genSignedCert $fullname (list "127.0.0.1") $dns $days $caPair }}
{{- $_ := set $tls "crt" ($cert.Cert | b64enc) }}
{{- $_ := set $tls "key" ($cert.Key | b64enc) }}
{{- $_ := set $tls "certNotAfter" (add $now $validity) }}
{{- end }}
{{- $_ := set $memo "tls" $tls }}
{{- $_ := set .Values "_edgepathRenderMemo" $memo }}
{{- end }}
{{- toJson (get $memo "tls") }}
{{- end }}

{{/* Pod-template annotation that restarts the deciders when the chart's generated TLS material changes (renewal);
nothing with tls.existingSecret, whose content the chart does not see. */}}
{{- define "edgepath.tlsChecksumAnnotation" -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- $tls := include "edgepath.generatedTls" . | fromJson }}
checksum/tls: {{ print $tls.crt $tls.ca | sha256sum }}
{{- end }}
{{- end }}
