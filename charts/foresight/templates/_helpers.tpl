{{- define "foresight.labels" -}}
app.kubernetes.io/name: foresight
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "foresight.selector" -}}
app.kubernetes.io/name: foresight
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "foresight.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The trainer's image (torch, Prophet, Ray: the Dockerfile's default target); the app image
when trainer.image.repository is empty (enough for models without lstm and prophet). */}}
{{- define "foresight.trainerImage" -}}
{{- $t := .Values.trainer.image | default dict -}}
{{ $t.repository | default .Values.image.repository }}:{{ $t.tag | default .Values.image.tag }}
{{- end -}}

{{/* The store URL of one Redis ACL user (trainer, adapter or warmpool). */}}
{{- define "foresight.storeURL" -}}
{{- if and .root.Values.redis.enabled .root.Values.redis.tls -}}
rediss://{{ .user }}@foresight-redis.{{ .root.Release.Namespace }}.svc:6379/0?password_file=/var/run/secrets/redis/password&ca_file=/var/run/secrets/redis/ca.crt
{{- else if .root.Values.redis.enabled -}}
redis://{{ .user }}@foresight-redis.{{ .root.Release.Namespace }}:6379/0?password_file=/var/run/secrets/redis/password
{{- else -}}
{{ .root.Values.redis.externalURL }}
{{- end -}}
{{- end -}}

{{- define "foresight.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "foresight.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* The user's Redis password and, with redis.tls, the CA that signed Redis' certificate. */}}
{{- define "foresight.redisPasswordVolume" -}}
- name: redis-password
  projected:
    defaultMode: 0440
    sources:
      - secret:
          name: {{ .root.Values.redis.usersSecret }}
          items:
            - {key: {{ .user }}, path: password}
      {{- if and .root.Values.redis.enabled .root.Values.redis.tls }}
      - secret:
          name: {{ include "foresight.redisTLSSecret" .root }}
          items:
            - {key: ca.crt, path: ca.crt}
      {{- end }}
{{- end -}}
