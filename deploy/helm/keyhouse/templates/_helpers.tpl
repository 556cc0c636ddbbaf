{{/* Names and labels. */}}
{{- define "keyhouse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "keyhouse.fullname" -}}
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

{{/* "<fullname>-<component>", e.g. keyhouse-licensing. Takes (list $ "licensing"). */}}
{{- define "keyhouse.componentName" -}}
{{- printf "%s-%s" (include "keyhouse.fullname" (index . 0)) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "keyhouse.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "keyhouse.labels" -}}
helm.sh/chart: {{ include "keyhouse.chart" . }}
{{ include "keyhouse.selectorLabels" . }}
app.kubernetes.io/version: {{ include "keyhouse.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: keyhouse
{{- end -}}

{{- define "keyhouse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "keyhouse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component. Takes (list $ "licensing"). */}}
{{- define "keyhouse.componentLabels" -}}
{{ include "keyhouse.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "keyhouse.componentSelectorLabels" -}}
{{ include "keyhouse.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "keyhouse.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{- define "keyhouse.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "keyhouse.imageTag" .) -}}
{{- end -}}

{{- define "keyhouse.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "keyhouse.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret every pod reads its secret variables from. */}}
{{- define "keyhouse.secretName" -}}
{{- default (include "keyhouse.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The Secret holding the signing keyring, "" when none is configured. */}}
{{- define "keyhouse.signingSecretName" -}}
{{- if .Values.signingKeys.existingSecret -}}
{{- .Values.signingKeys.existingSecret -}}
{{- else if .Values.signingKeys.keyring -}}
{{- printf "%s-signing" (include "keyhouse.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The pod annotations that roll a component's pods when what it reads from a Secret
changes: the chart's own values, and for a Secret the chart does not render
(secrets.existingSecret, signingKeys.existingSecret) that Secret's data as the cluster
holds it when the release is installed or upgraded (lookup). Under helm template (and
tools that render with it) lookup finds nothing, so a changed existing Secret rolls nothing:
restart the Deployments (docs/operations.md, Rotating the admin key). Only a hash of the
data is written.
*/}}
{{- define "keyhouse.secretChecksum" -}}
{{- $in := dict "s" .Values.secrets "p" .Values.postgres "r" .Values.redis "n" .Values.nats.url -}}
{{- with .Values.secrets.existingSecret -}}
{{- $_ := set $in "existing" ((lookup "v1" "Secret" $.Release.Namespace .).data | default dict) -}}
{{- end -}}
{{- toYaml $in | sha256sum -}}
{{- end -}}

{{- define "keyhouse.signingChecksum" -}}
{{- $in := .Values.signingKeys -}}
{{- with .Values.signingKeys.existingSecret -}}
{{- $in = dict "v" $.Values.signingKeys "existing" ((lookup "v1" "Secret" $.Release.Namespace .).data | default dict) -}}
{{- end -}}
{{- toYaml $in | sha256sum -}}
{{- end -}}

{{/*
A component's settings: .Values.defaults overridden by the component's own block. Keys
present in the component block win (false, 0 and null included, unlike mergeOverwrite);
where both sides hold a map, their keys are merged one level deep. Takes
(list $.Values.defaults $own) and returns YAML (use fromYaml).
*/}}
{{- define "keyhouse.merge" -}}
{{- $defaults := index . 0 -}}
{{- $own := index . 1 | default dict -}}
{{- $out := dict -}}
{{- range $k, $v := $defaults -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- range $k, $v := $own -}}
{{- $base := get $out $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $base) -}}
{{- $m := dict -}}
{{- range $k2, $v2 := $base -}}
{{- $_ := set $m $k2 $v2 -}}
{{- end -}}
{{- range $k2, $v2 := $v -}}
{{- $_ := set $m $k2 $v2 -}}
{{- end -}}
{{- $_ := set $out $k $m -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
Every component as a list of {name, kind (grpc|http), port, c (merged settings)}: the
services in name order, then the gateway. Returns YAML: (fromYaml ...).items.
*/}}
{{- define "keyhouse.components" -}}
{{- $items := list -}}
{{- range $name, $own := .Values.services -}}
{{- $c := fromYaml (include "keyhouse.merge" (list $.Values.defaults $own)) -}}
{{- $items = append $items (dict "name" $name "kind" "grpc" "port" (int $own.port) "c" $c) -}}
{{- end -}}
{{- $gw := fromYaml (include "keyhouse.merge" (list .Values.defaults .Values.gateway)) -}}
{{- $items = append $items (dict "name" "gateway" "kind" "http" "port" (int .Values.gateway.port) "c" $gw) -}}
{{- toYaml (dict "items" $items) -}}
{{- end -}}

{{/* A component's METRICS_PORT: its metricsPort, or its port + 1000 (the processes' default). Takes a components item. */}}
{{- define "keyhouse.metricsPort" -}}
{{- if .c.metricsPort -}}
{{- .c.metricsPort | int -}}
{{- else -}}
{{- add (int .port) 1000 -}}
{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of a component: set, it must cover SHUTDOWN_DELAY +
SHUTDOWN_TIMEOUT (Kubernetes sends SIGKILL when it ends); empty, that sum + 5 s. Takes
(list $ $c).
*/}}
{{- define "keyhouse.terminationGracePeriod" -}}
{{- $sd := (index . 0).Values.shutdown -}}
{{- $need := add (int $sd.delaySeconds) (int $sd.timeoutSeconds) -}}
{{- $set := (index . 1).terminationGracePeriodSeconds -}}
{{- if or (kindIs "invalid" $set) (eq (toString $set) "") -}}
{{- add $need 5 -}}
{{- else if lt (int $set) (int $need) -}}
{{- fail (printf "terminationGracePeriodSeconds %v is shorter than shutdown.delaySeconds + shutdown.timeoutSeconds (%d): Kubernetes would kill pods mid-drain" $set $need) -}}
{{- else -}}
{{- int $set -}}
{{- end -}}
{{- end -}}
