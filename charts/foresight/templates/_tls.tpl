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
{{- $name := .Values.adapter.tlsSecret -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace $name -}}
{{- if and $old $old.data (index $old.data "ca.crt") -}}
{{- dict "ca" (index $old.data "ca.crt") "crt" (index $old.data "tls.crt") "key" (index $old.data "tls.key") | toJson -}}
{{- else -}}
{{- $svc := printf "foresight-adapter.%s.svc" .Release.Namespace -}}
{{- $ca := genCA "foresight-adapter-ca" 3650 -}}
{{- $cert := genSignedCert $svc nil (list $svc (printf "foresight-adapter.%s" .Release.Namespace) "foresight-adapter") 3650 $ca -}}
{{- dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) | toJson -}}
{{- end -}}
{{- end -}}
