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
