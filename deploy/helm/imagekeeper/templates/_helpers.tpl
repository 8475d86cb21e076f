{{/* The chart's name, and the object names: the release name, unless it already says imagekeeper. */}}
{{- define "imagekeeper.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{- define "imagekeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Helm's recommended labels. */}}
{{- define "imagekeeper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "imagekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The labels the DaemonSet selects its pods by (immutable once installed). */}}
{{- define "imagekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "imagekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The runtime preset, or a clear failure for an unknown one. */}}
{{- define "imagekeeper.runtime" -}}
{{- $preset := index .Values.runtimes .Values.runtime -}}
{{- if not $preset -}}
{{- fail (printf "runtime %q is not one of the presets: %s" .Values.runtime (keys .Values.runtimes | sortAlpha | join ", ")) -}}
{{- end -}}
{{- toYaml $preset -}}
{{- end -}}

{{- define "imagekeeper.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}
