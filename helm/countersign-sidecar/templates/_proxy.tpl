{{/*
Countersign proxy sidecar: named templates for an application chart.

Every template takes a dict: (dict "root" $ "proxy" .Values.countersignProxy)

  countersign-sidecar.container   the proxy container (list item under spec.containers)
  countersign-sidecar.volumes     its volumes (list items under spec.volumes)
  countersign-sidecar.configmap   the ConfigMap holding proxy.yaml (a whole document)
  countersign-sidecar.configMapName
  countersign-sidecar.port        the proxy port (7080): point the app's Service targetPort here
  countersign-sidecar.extAuthzGrpcPort, countersign-sidecar.extAuthzHttpPort
                                  the Envoy external authorizer's ports (9191, 9192 by default)

With extAuthz.grpc.enabled / extAuthz.http.enabled the same container also serves the gate as an
Envoy external authorizer (docs/mesh.md) on extAuthz.host (127.0.0.1: for the mesh's Envoy in the
same pod) at ports cs-authz-grpc (9191) and cs-authz-http (9192). extAuthz.only: true leaves out the
forwarding listener and its cs-proxy port: the mesh's Envoy forwards to the app itself
(helm/examples/istio-ext-authz).

The ConfigMap is mounted as a directory (no subPath) and the pod template carries no checksum of
it: a change of a route's mode is an in-place ConfigMap update that the kubelet projects into the
running pods (about a minute) and the proxy reloads on its file watch, without a restart.
*/}}

{{- define "countersign-sidecar.defaults" -}}
image:
  repository: ghcr.io/countersign/countersign
  tag: "0.2.0"
  pullPolicy: IfNotPresent
upstreamPort: 8080
authorityUrl: http://countersign.countersign.svc:7070
organization: ""
apiKeySecret: { name: countersign-proxy, key: api-key }
redisUrlSecret: { name: countersign-proxy, key: redis-url }
# REDIS_PASSWORD / REDIS_SENTINEL_PASSWORD for store.topology sentinel or cluster (a single server's
# credentials are in its URL). An empty name leaves the variable unset.
redisPasswordSecret: { name: "", key: redis-password }
redisSentinelPasswordSecret: { name: "", key: redis-sentinel-password }
# proxy.yaml `store:` as is (docs/replay-store.md). aof needs appendonly yes on every primary and
# Redis 7.2+ or appendfsync always; a proxy with an enforce route does not start when Redis cannot
# keep it, unless store.accept_weaker_durability is true.
store:
  topology: single
  durability: aof
mode: enforce
unmatched: deny
passThrough: []
permitHeader: X-Service-Permit
issuer: countersign
audience: "countersign:gate"
maxBodyBytes: 65536
# proxy.yaml `records`: records the proxy cannot append while Redis is down are held, at most `max`,
# and with onDisk also in an emptyDir, so a restarted proxy container (a crash, an OOM kill) still
# writes them. The emptyDir goes with the pod.
recordBacklog:
  max: 10000
  onDisk: true
logLevel: info
routes: []
# The Envoy external authorizer (proxy.yaml ext_authz). host 127.0.0.1 keeps it to the pod.
extAuthz:
  host: 127.0.0.1
  only: false
  grpc: { enabled: false, port: 9191 }
  # checkTimeoutMs: Envoy's http_service timeout (Istio: the provider's timeout); a check that takes
  # longer spends no permit. maxRequestHeadersKb: Envoy's max_request_headers_kb.
  http: { enabled: false, port: 9192, pathPrefix: "", checkTimeoutMs: 200, maxRequestHeadersKb: 60 }
resources:
  requests: { cpu: 50m, memory: 64Mi }
  limits: { memory: 256Mi }
nodeOptions: "--max-semi-space-size=8 --max-old-space-size=96"
# Extra environment variables of the proxy container (list of EnvVar), such as OTEL_* for tracing.
extraEnv: []
{{- end -}}

{{/* The merged proxy values: the caller's over the defaults. */}}
{{- define "countersign-sidecar.values" -}}
{{- $defaults := include "countersign-sidecar.defaults" . | fromYaml -}}
{{- toYaml (mergeOverwrite $defaults (deepCopy (default dict .proxy))) -}}
{{- end -}}

{{- define "countersign-sidecar.port" -}}7080{{- end -}}
{{/* The ext_authz ports, as configured (defaults 9191, 9192). */}}
{{- define "countersign-sidecar.extAuthzGrpcPort" -}}{{ (include "countersign-sidecar.values" . | fromYaml).extAuthz.grpc.port }}{{- end -}}
{{- define "countersign-sidecar.extAuthzHttpPort" -}}{{ (include "countersign-sidecar.values" . | fromYaml).extAuthz.http.port }}{{- end -}}
{{- define "countersign-sidecar.adminPort" -}}7081{{- end -}}

{{- define "countersign-sidecar.configMapName" -}}
{{- printf "%s-countersign-proxy" (.root.Values.fullnameOverride | default (printf "%s-%s" .root.Release.Name .root.Chart.Name)) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* proxy.yaml as the proxy reads it. listen/admin_listen come from the environment. */}}
{{- define "countersign-sidecar.proxyConfig" -}}
{{- $v := include "countersign-sidecar.values" . | fromYaml -}}
{{- if not $v.organization }}{{ fail "countersignProxy.organization is required (the organization id this gate serves)" }}{{ end -}}
{{- if not $v.routes }}{{ fail "countersignProxy.routes needs at least one route" }}{{ end -}}
{{- $authz := $v.extAuthz -}}
{{- $authzOn := or $authz.grpc.enabled $authz.http.enabled -}}
{{- if and $authz.only (not $authzOn) }}{{ fail "countersignProxy.extAuthz.only needs extAuthz.grpc.enabled or extAuthz.http.enabled: something must serve" }}{{ end -}}
{{- $cfg := dict
  "authority" (dict "url" $v.authorityUrl "api_key_file" "/etc/countersign-proxy-key/api-key")
  "organization" $v.organization
  "issuer" $v.issuer
  "audience" $v.audience
  "mode" $v.mode
  "permit_header" $v.permitHeader
  "unmatched" $v.unmatched
  "pass_through" $v.passThrough
  "max_body_bytes" $v.maxBodyBytes
  "log_level" $v.logLevel
  "store" $v.store
  "routes" $v.routes -}}
{{- $records := dict "backlog_max" $v.recordBacklog.max -}}
{{- if $v.recordBacklog.onDisk }}{{ $_ := set $records "backlog_file" "/var/lib/countersign-proxy/records.jsonl" }}{{ end -}}
{{- $_ := set $cfg "records" $records -}}
{{- if not $authz.only }}{{ $_ := set $cfg "upstream" (printf "http://127.0.0.1:%v" $v.upstreamPort) }}{{ end -}}
{{- if $authzOn -}}
{{- $section := dict "only" $authz.only -}}
{{- $host := ternary (printf "[%s]" $authz.host) $authz.host (contains ":" $authz.host) -}}
{{- if $authz.grpc.enabled }}{{ $_ := set $section "grpc" (dict "listen" (printf "%s:%v" $host $authz.grpc.port)) }}{{ end -}}
{{- if $authz.http.enabled }}{{ $_ := set $section "http" (dict "listen" (printf "%s:%v" $host $authz.http.port) "path_prefix" $authz.http.pathPrefix "check_timeout_ms" (int $authz.http.checkTimeoutMs) "max_request_headers_kb" (int $authz.http.maxRequestHeadersKb)) }}{{ end -}}
{{- $_ := set $cfg "ext_authz" $section -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "countersign-sidecar.configmap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "countersign-sidecar.configMapName" . }}
  labels:
    app.kubernetes.io/instance: {{ .root.Release.Name }}
    app.kubernetes.io/component: countersign-proxy
    app.kubernetes.io/managed-by: {{ .root.Release.Service }}
data:
  proxy.yaml: |
    {{- include "countersign-sidecar.proxyConfig" . | nindent 4 }}
{{- end -}}

{{- define "countersign-sidecar.container" -}}
{{- $v := include "countersign-sidecar.values" . | fromYaml -}}
- name: countersign-proxy
  image: {{ printf "%s:%s" $v.image.repository $v.image.tag }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args: ["proxy", "--config", "/etc/countersign-proxy/proxy.yaml"]
  env:
    # The heap's sizes (nodeOptions): about 110 MB of RSS under load, against about 140 MB with
    # Node's defaults (docs/performance.md, "Memory"; the benchmark runs the proxy with the same flags).
    - name: NODE_OPTIONS
      value: {{ $v.nodeOptions | quote }}
    {{- if not $v.extAuthz.only }}
    - name: COUNTERSIGN_PROXY_LISTEN
      value: "0.0.0.0:7080"
    {{- end }}
    - name: COUNTERSIGN_PROXY_ADMIN_LISTEN
      value: "0.0.0.0:7081"
    - name: REDIS_URL
      valueFrom:
        secretKeyRef:
          name: {{ $v.redisUrlSecret.name }}
          key: {{ $v.redisUrlSecret.key }}
    {{- range list (list "REDIS_PASSWORD" $v.redisPasswordSecret) (list "REDIS_SENTINEL_PASSWORD" $v.redisSentinelPasswordSecret) }}
    {{- $ref := index . 1 }}
    {{- if $ref.name }}
    - name: {{ index . 0 }}
      valueFrom:
        secretKeyRef:
          name: {{ $ref.name }}
          key: {{ $ref.key }}
    {{- end }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    {{- if not $v.extAuthz.only }}
    - name: cs-proxy
      containerPort: 7080
      protocol: TCP
    {{- end }}
    {{- if $v.extAuthz.grpc.enabled }}
    - name: cs-authz-grpc
      containerPort: {{ $v.extAuthz.grpc.port }}
      protocol: TCP
    {{- end }}
    {{- if $v.extAuthz.http.enabled }}
    - name: cs-authz-http
      containerPort: {{ $v.extAuthz.http.port }}
      protocol: TCP
    {{- end }}
    - name: cs-proxy-admin
      containerPort: 7081
      protocol: TCP
  startupProbe:
    httpGet: { path: /healthz, port: cs-proxy-admin }
    periodSeconds: 2
    failureThreshold: 30
  livenessProbe:
    httpGet: { path: /healthz, port: cs-proxy-admin }
    periodSeconds: 10
    failureThreshold: 3
  readinessProbe:
    httpGet: { path: /readyz, port: cs-proxy-admin }
    periodSeconds: 5
    failureThreshold: 3
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities: { drop: [ALL] }
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  volumeMounts:
    # A directory mount (no subPath): the kubelet swaps the ..data symlink on a ConfigMap update
    # and the proxy's file watch reloads proxy.yaml.
    - name: countersign-proxy-config
      mountPath: /etc/countersign-proxy
      readOnly: true
    - name: countersign-proxy-key
      mountPath: /etc/countersign-proxy-key
      readOnly: true
    {{- if $v.recordBacklog.onDisk }}
    # The record backlog file (proxy.yaml records.backlog_file): the root filesystem is read-only.
    - name: countersign-proxy-records
      mountPath: /var/lib/countersign-proxy
    {{- end }}
{{- end -}}

{{- define "countersign-sidecar.volumes" -}}
{{- $v := include "countersign-sidecar.values" . | fromYaml -}}
- name: countersign-proxy-config
  configMap:
    name: {{ include "countersign-sidecar.configMapName" . }}
- name: countersign-proxy-key
  secret:
    secretName: {{ $v.apiKeySecret.name }}
    defaultMode: 0400
    items:
      - key: {{ $v.apiKeySecret.key }}
        path: api-key
{{- if $v.recordBacklog.onDisk }}
- name: countersign-proxy-records
  emptyDir:
    sizeLimit: 64Mi
{{- end }}
{{- end -}}
