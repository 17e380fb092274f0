{{/* The chart's name. */}}
{{- define "retryd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's object name. */}}
{{- define "retryd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "retryd.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "retryd.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "retryd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "retryd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels selecting the pods. */}}
{{- define "retryd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "retryd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount's name. */}}
{{- define "retryd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "retryd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: delay + grace + margin. */}}
{{- define "retryd.terminationGrace" -}}
{{- $d := int .Values.shutdown.delaySeconds }}
{{- $g := int .Values.shutdown.graceSeconds }}
{{- $m := int .Values.shutdown.marginSeconds }}
{{- if lt $m 1 }}
{{- fail "shutdown.marginSeconds must be at least 1: the kubelet's SIGKILL must come after the drain's end" }}
{{- end }}
{{- add $d $g $m }}
{{- end }}
