{{/* The adapter's serving certificate (adapter.certificate):
  helm          the chart makes a CA and a certificate for foresight-adapter.<namespace>.svc on
                first install, keeps them across upgrades (read back with lookup) and puts the CA
                in the APIService's caBundle. `helm template` (no cluster to look up) renders a
                fresh pair each time.
  cert-manager  a cert-manager Certificate you create writes adapter.tlsSecret; its CA injector
                fills the caBundle (annotation below, in adapter.yaml).
  existing      you create adapter.tlsSecret (tls.crt, tls.key, ca.crt) and set adapter.caBundle.
The caBundle of the APIService, base64, as the aggregator reads it. */}}
{{- define "foresight.adapterTLS" -}}
{{- include "foresight.servingTLS" (dict "root" . "secret" .Values.adapter.tlsSecret "service" "foresight-adapter") -}}
{{- end -}}

{{/* The scheduler's client certificate for the adapter's extender port (scheduler.enabled):
made with its own CA on first install and kept across upgrades, like the serving pair. */}}
{{- define "foresight.schedulerClientTLS" -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace "foresight-scheduler-client-tls" -}}
{{- if and $old $old.data (index $old.data "ca.crt") -}}
{{- dict "ca" (index $old.data "ca.crt") "crt" (index $old.data "tls.crt") "key" (index $old.data "tls.key") | toJson -}}
{{- else -}}
{{- $ca := genCA "foresight-scheduler-client-ca" 3650 -}}
{{- $cert := genSignedCert "foresight-scheduler" nil nil 3650 $ca -}}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) | toJson -}}
{{- end -}}
{{- end -}}

{{/* The warm-pool API's serving certificate (warmpool.enabled), kept across upgrades. */}}
{{- define "foresight.warmpoolTLS" -}}
{{- include "foresight.servingTLS" (dict "root" . "secret" "foresight-warmpool-tls" "service" "foresight-warmpool") -}}
{{- end -}}

{{/* The bundled Redis' serving certificate (redis.enabled and redis.tls), kept across upgrades. */}}
{{- define "foresight.redisTLS" -}}
{{- include "foresight.servingTLS" (dict "root" . "secret" "foresight-redis-tls" "service" "foresight-redis") -}}
{{- end -}}

{{/* A serving pair for Service .service (CA "<service>-ca", names <service>, <service>.<ns>,
<service>.<ns>.svc) as JSON {ca, crt, key} in base64: read back from Secret .secret when it
exists (kept across upgrades), made fresh otherwise. */}}
{{- define "foresight.servingTLS" -}}
{{- $ns := .root.Release.Namespace -}}
{{- $old := lookup "v1" "Secret" $ns .secret -}}
{{- if and $old $old.data (index $old.data "ca.crt") -}}
{{- dict "ca" (index $old.data "ca.crt") "crt" (index $old.data "tls.crt") "key" (index $old.data "tls.key") | toJson -}}
{{- else -}}
{{- $svc := printf "%s.%s.svc" .service $ns -}}
{{- $ca := genCA (printf "%s-ca" .service) 3650 -}}
{{- $cert := genSignedCert $svc nil (list $svc (printf "%s.%s" .service $ns) .service) 3650 $ca -}}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) | toJson -}}
{{- end -}}
{{- end -}}

{{/* The Secrets holding TLS material and keys: yours when an *ExistingSecret value names one
(the chart then renders none, so `helm template` and GitOps renders are stable), else the
chart's own (made on first install, kept across upgrades with lookup). */}}
{{- define "foresight.redisTLSSecret" -}}
{{ .Values.redis.tlsExistingSecret | default "foresight-redis-tls" }}
{{- end -}}

{{- define "foresight.warmpoolTLSSecret" -}}
{{ .Values.warmpool.tlsExistingSecret | default "foresight-warmpool-tls" }}
{{- end -}}

{{- define "foresight.schedulerClientTLSSecret" -}}
{{ .Values.scheduler.clientTLSExistingSecret | default "foresight-scheduler-client-tls" }}
{{- end -}}

{{- define "foresight.checkpointKeySecret" -}}
{{ .Values.trainer.checkpoints.keyExistingSecret | default "foresight-checkpoint-key" }}
{{- end -}}
