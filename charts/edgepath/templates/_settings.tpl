{{/* The chart's own settings of the ConfigMap (configmap.yaml), as YAML: EDGEPATH_* name -> value. extraSettings is
merged over them there, so a key given in both is rendered once, with the extraSettings value. */}}
{{- define "edgepath.chartSettings" -}}
{{- $s := .Values.settings }}
EDGEPATH_HOST: "0.0.0.0"
EDGEPATH_GRPC_PORT: {{ $s.grpcPort | quote }}
EDGEPATH_HTTP_PORT: {{ $s.httpPort | quote }}
EDGEPATH_PROFILE: {{ $s.profile | quote }}
EDGEPATH_LOG_LEVEL: {{ $s.logLevel | quote }}
EDGEPATH_LOG_FORMAT: {{ $s.logFormat | quote }}
{{- if $s.metricsPort }}
EDGEPATH_METRICS_PORT: {{ $s.metricsPort | quote }}
{{- end }}
{{- if $s.grpcMaxConnectionAgeS }}
EDGEPATH_GRPC_MAX_CONNECTION_AGE_S: {{ $s.grpcMaxConnectionAgeS | quote }}
EDGEPATH_GRPC_MAX_CONNECTION_AGE_GRACE_S: {{ $s.grpcMaxConnectionAgeGraceS | quote }}
{{- end }}
EDGEPATH_POLICY: {{ $s.policy | quote }}
EDGEPATH_SEED: {{ $s.seed | quote }}
EDGEPATH_BATCH_SIZE: {{ $s.batchSize | quote }}
EDGEPATH_TRAINER_PUBLISH_INTERVAL_S: {{ $s.trainerPublishIntervalS | quote }}
EDGEPATH_PROPENSITY_FLOOR: {{ $s.propensityFloor | quote }}
EDGEPATH_REWARD_THROUGHPUT_BPS: {{ $s.rewardThroughputBps | int64 | quote }}
EDGEPATH_REWARD_LATENCY_MS: {{ $s.rewardLatencyMs | quote }}
EDGEPATH_DECISION_TTL_S: {{ $s.decisionTtlS | quote }}
EDGEPATH_MAX_DECISIONS: {{ $s.maxDecisions | int64 | quote }}
EDGEPATH_REDIS_NAMESPACE: {{ $s.redisNamespace | quote }}
EDGEPATH_RATE_LIMIT_PER_S: {{ $s.rateLimitPerS | quote }}
EDGEPATH_RATE_LIMIT_BURST: {{ $s.rateLimitBurst | quote }}
EDGEPATH_MAX_MESSAGE_BYTES: {{ $s.maxMessageBytes | int64 | quote }}
EDGEPATH_DRAIN_READINESS_DELAY_S: {{ .Values.drain.readinessDelaySeconds | quote }}
EDGEPATH_DRAIN_GRACE_S: {{ .Values.drain.graceSeconds | quote }}
EDGEPATH_DRAIN_FLUSH_TIMEOUT_S: {{ .Values.drain.flushSeconds | quote }}
{{- if .Values.drain.outboxDir }}
EDGEPATH_OUTBOX_DIR: {{ .Values.drain.outboxDir | quote }}
{{- end }}
{{- if $s.modelPath }}
EDGEPATH_MODEL_PATH: {{ $s.modelPath | quote }}
{{- end }}
{{- if .Values.secrets.adminIds }}
EDGEPATH_AUTH_ADMIN_IDS: {{ .Values.secrets.adminIds | toJson | quote }}
{{- end }}
{{- if include "edgepath.tokensFile" . }}
EDGEPATH_AUTH_TOKENS_FILE: /etc/edgepath/auth/tokens.json
{{- end }}
{{- if .Values.tls.enabled }}
EDGEPATH_TLS_CERT_FILE: /etc/edgepath/tls/tls.crt
EDGEPATH_TLS_KEY_FILE: /etc/edgepath/tls/tls.key
{{- if .Values.tls.clientAuth }}
EDGEPATH_TLS_CLIENT_CA_FILE: /etc/edgepath/tls/ca.crt
{{- end }}
{{- end }}
{{- end }}
