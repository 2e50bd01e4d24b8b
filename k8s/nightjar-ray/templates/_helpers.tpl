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

{{- define "nightjar-ray.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "nightjar-ray.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Claim of a volume: modelCache or policyPool.persistence ("" when the chart mounts none). */}}
{{- define "nightjar-ray.claimName" -}}
{{- $cfg := index . 1 -}}
{{- if $cfg.enabled -}}
{{- $cfg.existingClaim | default (printf "%s-%s" (include "nightjar-ray.fullname" (index . 0)) (index . 2)) -}}
{{- end -}}
{{- end -}}

{{/* Environment of a Ray container; argument: (list $ isWorker). */}}
{{- define "nightjar-ray.env" -}}
{{- $root := index . 0 -}}
{{- $v := $root.Values -}}
{{- if $v.hfToken.secretName }}
- name: HUGGING_FACE_HUB_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $v.hfToken.secretName }}
      key: {{ $v.hfToken.secretKey }}
{{- end }}
{{- if $v.auth.apiKeySecret.name }}
- name: NIGHTJAR_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.auth.apiKeySecret.name }}
      key: {{ $v.auth.apiKeySecret.key }}
{{- end }}
{{- if and (index . 1) $v.modelCache.enabled }}
- name: HF_HOME
  value: {{ $v.modelCache.mountPath | quote }}
{{- end }}
{{- with $v.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volume mounts of a Ray container; argument: (list $ isWorker). */}}
{{- define "nightjar-ray.volumeMounts" -}}
{{- $v := (index . 0).Values -}}
- name: dshm
  mountPath: /dev/shm
{{- if index . 1 }}
{{- if $v.modelCache.enabled }}
- name: model-cache
  mountPath: {{ $v.modelCache.mountPath }}
{{- end }}
{{- else }}
- name: policy-pool
  mountPath: {{ $v.policyPool.mountPath }}
{{- end }}
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes of a Ray pod; argument: (list $ isWorker). */}}
{{- define "nightjar-ray.volumes" -}}
{{- $root := index . 0 -}}
{{- $v := $root.Values -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ $v.sharedMemorySize }}
{{- if index . 1 }}
{{- with include "nightjar-ray.claimName" (list $root $v.modelCache "model-cache") }}
- name: model-cache
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- else }}
- name: policy-pool
{{- with include "nightjar-ray.claimName" (list $root $v.policyPool.persistence "policy-pool") }}
  persistentVolumeClaim:
    claimName: {{ . }}
{{- else }}
{{ toYaml $v.policyPool.volume | indent 2 }}
{{- end }}
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod metadata of a group; argument: (list $ group). */}}
{{- define "nightjar-ray.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $group := index . 1 -}}
labels:
  {{- include "nightjar-ray.labels" $root | nindent 2 }}
{{- with merge (deepCopy ($group.podAnnotations | default dict)) ($root.Values.podAnnotations | default dict) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Scheduling and security of a group's pods: the group's own value, else the top-level
one; argument: (list $ group). */}}
{{- define "nightjar-ray.podScheduling" -}}
{{- $root := index . 0 -}}
{{- $v := $root.Values -}}
{{- $group := index . 1 -}}
{{- with include "nightjar-ray.serviceAccountName" $root }}
serviceAccountName: {{ . }}
{{- end }}
{{- with $group.priorityClassName | default $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $group.podSecurityContext | default $v.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.nodeSelector | default $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.affinity | default $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $group.tolerations | default $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A local nightjar.pooling.snapshot_dir of an application (or of each model of its
llm_configs) must lie under policyPool.mountPath (the head's snapshot volume); unset, it is
NightjarConfig's default. */}}
{{- define "nightjar-ray.checkSnapshotDirs" -}}
{{- $mount := trimSuffix "/" .Values.policyPool.mountPath -}}
{{- range $i, $app := .Values.serveConfig.applications }}
{{- $args := $app.args | default dict -}}
{{- $models := list (dict "where" "" "args" $args) -}}
{{- if hasKey $args "llm_configs" }}
{{- $models = list -}}
{{- range $j, $m := $args.llm_configs }}
{{- $models = append $models (dict "where" (printf ".llm_configs[%d]" $j) "args" ($m | default dict)) -}}
{{- end }}
{{- end }}
{{- range $models }}
{{- $dir := dig "nightjar" "pooling" "snapshot_dir" "/tmp/nightjar-ray/policy-pool" .args -}}
{{- $local := trimPrefix "file://" $dir -}}
{{- if and (hasPrefix "/" $local) (ne $local $mount) (not (hasPrefix (printf "%s/" $mount) $local)) }}
{{- fail (printf "serveConfig.applications[%d].args%s.nightjar.pooling.snapshot_dir %q is not under policyPool.mountPath %q: the policy actor's snapshot would not reach the mounted volume (set one to the other, or use an s3:// or gs:// URI)" $i .where $dir $mount) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
