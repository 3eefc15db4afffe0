{{/* Labels of every object. */}}
{{- define "substrate.labels" -}}
app.kubernetes.io/name: ate
app.kubernetes.io/part-of: substrate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Selector labels of a component: (dict "ctx" $ "component" "router"). */}}
{{- define "substrate.selector" -}}
app.kubernetes.io/name: ate
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "substrate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The API server as every component dials it (EndpointSlice resolver). */}}
{{- define "substrate.apiTarget" -}}
k8s:///ate-apiserver.{{ .Release.Namespace }}:grpc
{{- end }}

{{/* Pod securityContext of the control-plane components ("restricted"). */}}
{{- define "substrate.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "substrate.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* nodeSelector, tolerations, affinity of a component's values. */}}
{{- define "substrate.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The router's grace: it must outlast drain-delay + drain-timeout. */}}
{{- define "substrate.routerGrace" -}}
{{ add .Values.router.drainDelaySeconds .Values.router.drainTimeoutSeconds .Values.router.terminationMarginSeconds }}
{{- end }}

{{/*
TLS (docs/kubernetes.md, Security). Every component reads ca.crt, tls.crt
and tls.key from Secret ate-<component>-tls, mounted whole (no subPath:
the kubelet then updates the files when the Secret is renewed, and the
component re-reads them) at substrate.tlsDir; tls.mode none is plaintext.
*/}}
{{- define "substrate.tlsDir" -}}/etc/ate/tls{{- end }}

{{- define "substrate.tlsMode" -}}
{{- $m := .Values.tls.mode -}}
{{- if not (has $m (list "certManager" "secret" "none")) -}}
{{- fail (printf "tls.mode %q: want certManager, secret or none" $m) -}}
{{- end -}}
{{- /* With user authentication on, the API server admits components only
by their certificates, which tls.mode none gives them none of: every
node, router and controller call would be Unauthenticated. */ -}}
{{- if and (eq $m "none") (or .Values.auth.tokenSecret .Values.auth.oidc.issuerURL) -}}
{{- fail "tls.mode none with auth.tokenSecret or auth.oidc.issuerURL: components prove who they are only by certificate, so the API server would refuse them all; use tls.mode certManager or secret, or drop auth.* (--set auth.tokenSecret= : plaintext then means no authentication at all)" -}}
{{- end -}}
{{- $m -}}
{{- end }}

{{/* A component's Secret: (dict "ctx" $ "component" "router"). */}}
{{- define "substrate.tlsSecret" -}}ate-{{ .component }}-tls{{- end }}

{{/* TLS flags of every component (ate apiserver|router|controller). */}}
{{- define "substrate.tlsArgs" -}}
{{- if eq (include "substrate.tlsMode" .) "none" }}
- --insecure
{{- else }}
- --tls-dir={{ include "substrate.tlsDir" . }}
- --trust-domain={{ .Values.tls.trustDomain }}
{{- end }}
{{- end }}

{{- define "substrate.tlsVolumeMount" -}}
{{- if ne (include "substrate.tlsMode" .ctx) "none" }}
- name: tls
  mountPath: {{ include "substrate.tlsDir" .ctx }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Readable by the Pods' fsGroup (65532) only. */}}
{{- define "substrate.tlsVolume" -}}
{{- if ne (include "substrate.tlsMode" .ctx) "none" }}
- name: tls
  secret:
    secretName: {{ include "substrate.tlsSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* The SPIFFE ID of a component's certificate: (dict "ctx" $ "component" "router" "name" "ate-router"). */}}
{{- define "substrate.spiffeID" -}}
spiffe://{{ .ctx.Values.tls.trustDomain }}/ate/{{ .component }}/{{ .name }}
{{- end }}

{{/*
How worker Pods get their node certificates (tls.workerCertificates), or
"none" in tls.mode none.
*/}}
{{- define "substrate.workerCertificates" -}}
{{- if eq (include "substrate.tlsMode" .) "none" -}}
none
{{- else -}}
{{- $w := .Values.tls.workerCertificates -}}
{{- if not (has $w (list "apiserver" "certManager")) -}}
{{- fail (printf "tls.workerCertificates %q: want apiserver or certManager" $w) -}}
{{- end -}}
{{- $w -}}
{{- end -}}
{{- end }}

{{/*
The controller's worker TLS flags: --worker-tls-bootstrap (each worker Pod
asks the API server for its node certificate with its ServiceAccount
token); --worker-cert-issuer=<kind>/<name>, the issuer cert-manager's
csi-driver asks for each worker Pod's own node certificate
(spiffe://<trust domain>/ate/node/<Pod name>); --worker-insecure in
tls.mode none. The worker Pods' trust domain is the controller's
--trust-domain.
*/}}
{{- define "substrate.workerTLSArgs" -}}
{{- $w := include "substrate.workerCertificates" . }}
{{- if eq $w "none" }}
- --worker-insecure
{{- else if eq $w "apiserver" }}
- --worker-tls-bootstrap
- --worker-token-audience={{ .Values.tls.nodeTokenAudience }}
{{- else }}
{{- $iss := .Values.tls.certManager.issuer }}
{{- if not (has $iss.kind (list "Issuer" "ClusterIssuer")) }}
{{- fail (printf "tls.certManager.issuer.kind %q: want Issuer or ClusterIssuer" $iss.kind) }}
{{- end }}
- --worker-cert-issuer={{ $iss.kind }}/{{ required "tls.certManager.issuer.name is required" $iss.name }}
{{- end }}
{{- end }}
