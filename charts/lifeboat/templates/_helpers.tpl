{{/*
Object names are fixed (lifeboat-webhook, lifeboat-scheduler, ...): the binaries' defaults name
them (TLS Secret, webhook configurations, leases), and Lifeboat is installed once per cluster.
*/}}

{{- define "lifeboat.labels" -}}
app.kubernetes.io/part-of: lifeboat
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
metadata: labels and annotations of every object. Argument: a dict with root (the chart's
context), component, and optional labels and annotations to add.
*/}}
{{- define "lifeboat.metadata" -}}
{{- $root := .root -}}
labels:
  {{- include "lifeboat.labels" $root | nindent 2 }}
  {{- with .component }}
  app.kubernetes.io/component: {{ . }}
  {{- end }}
  {{- with .labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $ann := merge (deepCopy (.annotations | default dict)) ($root.Values.commonAnnotations | default dict) }}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* image reference: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "lifeboat.image" -}}
{{- $img := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $img.digest -}}
{{ $img.repository }}@{{ $img.digest }}
{{- else -}}
{{ $img.repository }}:{{ $img.tag | default $root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Namespaces the webhooks never see. */}}
{{- define "lifeboat.excludedNamespaces" -}}
{{- $ns := concat .Values.policy.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{ toJson $ns }}
{{- end }}

{{/* --tier-priority-classes=critical=...,stateless=... in a stable order. */}}
{{- define "lifeboat.tierPriorityClasses" -}}
{{- $pairs := list -}}
{{- range $tier, $class := .Values.policy.tierPriorityClasses -}}
{{- $pairs = append $pairs (printf "%s=%s" $tier $class) -}}
{{- end -}}
{{ join "," $pairs }}
{{- end }}

{{- define "lifeboat.webhookSecretName" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{ required "webhook.tls.secretName is required with webhook.tls.mode=secret" .Values.webhook.tls.secretName }}
{{- else -}}
lifeboat-webhook-tls
{{- end -}}
{{- end }}

{{/* caBundle of the webhook configurations: set only in secret mode; the other modes inject it. */}}
{{- define "lifeboat.caBundle" -}}
{{- if eq .Values.webhook.tls.mode "secret" }}
caBundle: {{ required "webhook.tls.caBundle is required with webhook.tls.mode=secret" .Values.webhook.tls.caBundle | b64enc }}
{{- end }}
{{- end }}

{{- define "lifeboat.validate" -}}
{{- if not (has .Values.webhook.tls.mode (list "self-managed" "cert-manager" "secret")) -}}
{{- fail (printf "webhook.tls.mode must be self-managed, cert-manager or secret, not %q" .Values.webhook.tls.mode) -}}
{{- end -}}
{{- if ne .Values.policy.schedulerName .Values.scheduler.name -}}
{{- fail (printf "policy.schedulerName (%s) must equal scheduler.name (%s): protected Pods would name a scheduler that does not exist" .Values.policy.schedulerName .Values.scheduler.name) -}}
{{- end -}}
{{- end }}

{{/* Data of the lifeboat-controller ConfigMap. */}}
{{- define "lifeboat.controllerSettings" -}}
interruption-queue-url: {{ .Values.aws.interruptionQueueURL | quote }}
aws-region: {{ .Values.aws.region | quote }}
ec2-endpoint: {{ .Values.aws.ec2Endpoint | quote }}
sqs-endpoint: {{ .Values.aws.sqsEndpoint | quote }}
{{- end }}
