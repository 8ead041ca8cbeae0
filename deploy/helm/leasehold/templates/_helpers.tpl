{{/* The image of every leasehold container. */}}
{{- define "leasehold.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "leasehold.labels" -}}
app.kubernetes.io/name: leasehold
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "leasehold.manager" -}}{{ .Release.Name }}-manager{{- end }}
{{- define "leasehold.peers" -}}{{ .Release.Name }}-manager-peers{{- end }}

{{/* The DNS domain of the release's namespace: NS.svc.DOMAIN. */}}
{{- define "leasehold.domain" -}}{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}{{- end }}

{{/* A replica's stable DNS name under the headless Service: takes (list $ ordinal). */}}
{{- define "leasehold.replicaHost" -}}
{{- $ := index . 0 -}}
{{ include "leasehold.manager" $ }}-{{ index . 1 }}.{{ include "leasehold.peers" $ }}.{{ include "leasehold.domain" $ }}
{{- end }}

{{/* --peers: the founding replicas, ID=HOST:PORT, ID = ordinal + 1. */}}
{{- define "leasehold.peerList" -}}
{{- $out := list -}}
{{- range $i := until (int .Values.manager.foundingReplicas) -}}
{{- $out = append $out (printf "%d=%s:%d" (add1 $i) (include "leasehold.replicaHost" (list $ $i)) (int $.Values.manager.port)) -}}
{{- end -}}
{{ join "," $out }}
{{- end }}

{{/* The client Service's address, which every client is given. */}}
{{- define "leasehold.managerAddr" -}}
{{ include "leasehold.manager" . }}.{{ include "leasehold.domain" . }}:{{ .Values.manager.port }}
{{- end }}

{{- define "leasehold.tls" -}}{{ ne .Values.certificates.source "none" }}{{- end }}

{{/* The issuer of every Certificate. */}}
{{- define "leasehold.issuerRef" -}}
{{- if .Values.certificates.certManager.issuerRef.name -}}
name: {{ .Values.certificates.certManager.issuerRef.name }}
kind: {{ .Values.certificates.certManager.issuerRef.kind | default "Issuer" }}
group: cert-manager.io
{{- else -}}
name: {{ .Release.Name }}-ca
kind: Issuer
group: cert-manager.io
{{- end }}
{{- end }}

{{/* A Certificate's common part: takes (dict "root" $ "name" NAME "uris" LIST "dns" LIST). */}}
{{- define "leasehold.certificate" -}}
{{- $ := .root -}}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ .name }}
  labels:
    {{- include "leasehold.labels" $ | nindent 4 }}
spec:
  secretName: {{ .name }}
  commonName: {{ .cn | quote }}
  duration: {{ $.Values.certificates.certManager.duration }}
  renewBefore: {{ $.Values.certificates.certManager.renewBefore }}
  privateKey:
    algorithm: ECDSA
    size: 256
    rotationPolicy: Always
  usages: [digital signature, server auth, client auth]
  uris:
    {{- range .uris }}
    - {{ . | quote }}
    {{- end }}
  {{- with .dns }}
  dnsNames:
    {{- range . }}
    - {{ . | quote }}
    {{- end }}
  {{- end }}
  issuerRef:
    {{- include "leasehold.issuerRef" $ | nindent 4 }}
{{- end }}

{{/* The container's security context: non-root, nothing writable but the volumes. */}}
{{- define "leasehold.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}
