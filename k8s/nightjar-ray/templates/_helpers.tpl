{{/* Name of the release's objects (63 chars max, DNS label). */}}
{{- define "nightjar-ray.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nightjar-ray.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nightjar-ray.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Environment, volume mounts and volumes every Ray container shares. */}}
{{- define "nightjar-ray.env" -}}
{{- if .Values.hfToken.secretName }}
- name: HUGGING_FACE_HUB_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.hfToken.secretName }}
      key: {{ .Values.hfToken.secretKey }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "nightjar-ray.volumeMounts" -}}
- name: dshm
  mountPath: /dev/shm
- name: policy-pool
  mountPath: {{ .Values.policyPool.mountPath }}
{{- end -}}

{{- define "nightjar-ray.volumes" -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.sharedMemorySize }}
- name: policy-pool
{{ toYaml .Values.policyPool.volume | indent 2 }}
{{- end -}}
