{{/* "true" when the chart registers v1beta1.external.metrics.k8s.io (adapter.apiService.enabled,
or the older plain boolean adapter.apiService), "" otherwise. */}}
{{- define "foresight.apiServiceEnabled" -}}
{{- $v := .Values.adapter.apiService -}}
{{- if kindIs "bool" $v -}}{{- if $v -}}true{{- end -}}
{{- else if kindIs "map" $v -}}{{- if (hasKey $v "enabled" | ternary $v.enabled true) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Refuse to take over an external metrics APIService another provider (KEDA's metrics server,
prometheus-adapter, Datadog) serves: there is one per cluster, and replacing it would cut off
every HPA and ScaledObject that reads it. `helm template` looks nothing up and renders. */}}
{{- define "foresight.apiServiceClash" -}}
{{- $old := lookup "apiregistration.k8s.io/v1" "APIService" "" "v1beta1.external.metrics.k8s.io" -}}
{{- if and $old $old.spec -}}
{{- $svc := $old.spec.service | default dict -}}
{{- if or (ne ($svc.name | default "") "foresight-adapter") (ne ($svc.namespace | default "") .Release.Namespace) -}}
{{- fail (printf "adapter.apiService.enabled: the APIService v1beta1.external.metrics.k8s.io is already served by Service %s/%s (KEDA's metrics server or prometheus-adapter?), and a cluster has one external metrics provider. Set adapter.apiService.enabled=false and keda.scaler.enabled=true: KEDA then reads foresight's forecasts through its external-push scaler (docs/tasks/beside-keda.md)" ($svc.namespace | default "?") ($svc.name | default "?")) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The scaler's serving pair (Service foresight-keda), kept across upgrades. */}}
{{- define "foresight.kedaTLS" -}}
{{- include "foresight.servingTLS" (dict "root" . "secret" "foresight-keda-tls" "service" "foresight-keda") -}}
{{- end -}}

{{/* KEDA's client certificate (CN keda-operator) and its own CA, as JSON {ca, crt, key} in base64:
read back from Secret foresight-keda-client in keda.namespace (key client-ca.crt) when it
exists, made fresh otherwise. */}}
{{- define "foresight.kedaClientTLS" -}}
{{- $old := lookup "v1" "Secret" (include "foresight.kedaAuthNamespace" .) "foresight-keda-client" -}}
{{- if and $old $old.data (index $old.data "client-ca.crt") -}}
{{- dict "ca" (index $old.data "client-ca.crt") "crt" (index $old.data "tls.crt") "key" (index $old.data "tls.key") | toJson -}}
{{- else -}}
{{- $ca := genCA "foresight-keda-client-ca" 3650 -}}
{{- $cert := genSignedCert "keda-operator" nil nil 3650 $ca -}}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) | toJson -}}
{{- end -}}
{{- end -}}

{{/* Where KEDA's Secret and (namespaced) TriggerAuthentication go. */}}
{{- define "foresight.kedaAuthNamespace" -}}
{{- .Values.keda.namespace | default "keda" -}}
{{- end -}}

{{/* host:port KEDA dials: the scaler's Service. */}}
{{- define "foresight.kedaAddress" -}}
{{- printf "foresight-keda.%s.svc:%v" .Release.Namespace .Values.keda.scaler.port -}}
{{- end -}}
