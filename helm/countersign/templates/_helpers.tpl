{{/* Chart name. */}}
{{- define "countersign.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or fullnameOverride. */}}
{{- define "countersign.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "countersign.selectorLabels" -}}
app.kubernetes.io/name: {{ include "countersign.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: authority
{{- end -}}

{{- define "countersign.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "countersign.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "countersign.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "countersign.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "countersign.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* authority.yaml: the user's config plus what the chart owns. */}}
{{- define "countersign.authorityConfig" -}}
{{- $cfg := deepCopy (default dict .Values.config) -}}
{{- $_ := set $cfg "listen" "0.0.0.0:7070" -}}
{{- $_ := set $cfg "admin_listen" "0.0.0.0:7071" -}}
{{- $_ := set $cfg "data_dir" "/var/lib/countersign" -}}
{{- $_ := set $cfg "log_level" .Values.logLevel -}}
{{- if .Values.bootstrapPolicy -}}
{{- $_ := set $cfg "bootstrap_policy" (printf "/etc/countersign/policies/%s" .Values.bootstrapPolicy) -}}
{{- end -}}
{{- $sk := .Values.secrets.signingKeys -}}
{{- if $sk.name -}}
{{- $signing := deepCopy (default dict (get $cfg "signing")) -}}
{{- $permit := list -}}
{{- range $sk.permitKeys }}{{ $permit = append $permit (printf "/etc/countersign/signing/%s" .) }}{{ end -}}
{{- $audit := list -}}
{{- range $sk.auditKeys }}{{ $audit = append $audit (printf "/etc/countersign/signing/%s" .) }}{{ end -}}
{{- $_ := set $signing "permit_key_files" $permit -}}
{{- $_ := set $signing "audit_key_files" $audit -}}
{{- $_ := set $cfg "signing" $signing -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Environment shared by the authority and the migration container. */}}
{{- define "countersign.env" -}}
- name: COUNTERSIGN_CONFIG
  value: /etc/countersign/config/authority.yaml
{{- $refs := list (list "DATABASE_URL" .Values.secrets.databaseUrl) (list "REDIS_URL" .Values.secrets.redisUrl) (list "REDIS_PASSWORD" .Values.secrets.redisPassword) (list "REDIS_SENTINEL_PASSWORD" .Values.secrets.redisSentinelPassword) (list "COUNTERSIGN_SECRET_KEY" .Values.secrets.secretKey) (list "COUNTERSIGN_BOOTSTRAP_KEY" .Values.secrets.bootstrapKey) (list "COUNTERSIGN_CONSOLE_CLIENT_SECRET" .Values.secrets.consoleClientSecret) }}
{{- range $refs }}
{{- $ref := index . 1 }}
{{- if $ref.name }}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "countersign.volumeMounts" -}}
- name: config
  mountPath: /etc/countersign/config
  readOnly: true
{{- if .Values.policies }}
- name: policies
  mountPath: /etc/countersign/policies
  readOnly: true
{{- end }}
{{- if .Values.secrets.signingKeys.name }}
- name: signing-keys
  mountPath: /etc/countersign/signing
  readOnly: true
{{- end }}
- name: data
  mountPath: /var/lib/countersign
- name: tmp
  mountPath: /tmp
{{- end -}}
