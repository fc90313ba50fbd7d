{{/* The chart name, or nameOverride. */}}
{{- define "unisched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name for namespaced and cluster-scoped objects. */}}
{{- define "unisched.fullname" -}}
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

{{- define "unisched.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the scheduler pods (Deployment, Service, PDB, anti-affinity). */}}
{{- define "unisched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "unisched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "unisched.labels" -}}
helm.sh/chart: {{ include "unisched.chart" . }}
{{ include "unisched.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: unisched
{{- end }}

{{- define "unisched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "unisched.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "unisched.configMapName" -}}
{{- printf "%s-config" (include "unisched.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
