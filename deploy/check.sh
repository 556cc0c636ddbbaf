#!/usr/bin/env bash
# Offline checks of the deployment artifacts (make deploy-check): helm lint and helm
# template of deploy/helm/keyhouse with the default (self-hosted) values and the hosted
# example, a count of what each renders, the optional PrometheusRule against the alerts of
# docs/observability.md, docker-compose config -q on docker-compose.yml,
# and systemd-analyze verify on deploy/systemd's units. Needs HELM (the pinned binary the
# Makefile builds); installs Debian's docker-compose when it is missing and we are root,
# and skips that step otherwise (and the units' check without systemd-analyze).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM=${HELM:?set HELM to the helm binary}
CHART=deploy/helm/keyhouse
HOSTED=deploy/helm/examples/values-hosted.yaml
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

fail() { echo "deploy-check: $*" >&2; exit 1; }

# count KIND FILE: how many documents of that kind a rendering holds.
count() { grep -c "^kind: $1\$" "$2" || true; }

# doc KIND FILE: the documents of that kind in a rendering.
doc() { awk -v k="$1" '/^---/{d=0} $0=="kind: "k{d=1} d' "$2"; }

# expect FILE KIND N: fail unless the rendering has exactly N of KIND.
expect() {
	local n
	n=$(count "$2" "$1")
	[ "$n" = "$3" ] || fail "$(basename "$1"): want $3 $2, rendered $n"
}

# Offline (helm lint, helm template) the chart cannot read a generated admin key back
# from the cluster, so the default values render with one given.
KEY=(--set secrets.adminApiKey=deploy-check-admin-key-0123456789abcdef)

echo "== helm $("$HELM" version --template '{{.Version}}')"
"$HELM" lint --strict "$CHART" "${KEY[@]}"
"$HELM" lint --strict "$CHART" -f "$HOSTED"

"$HELM" template keyhouse "$CHART" --namespace keyhouse "${KEY[@]}" >"$out/default.yaml"
"$HELM" template keyhouse "$CHART" --namespace keyhouse -f "$HOSTED" >"$out/hosted.yaml"
# The oldest Kubernetes the chart supports (native gRPC probes).
"$HELM" template keyhouse "$CHART" --kube-version 1.27.0 "${KEY[@]}" >/dev/null

# The admin key: without the cluster (helm template, as Argo CD and Flux render) and with
# neither secrets.adminApiKey nor secrets.existingSecret, a generated key would differ at
# every render (pods started later would hold another key than those running): the render
# fails and names both settings. A given key is the one rendered, at every render.
if msg=$("$HELM" template keyhouse "$CHART" --namespace keyhouse 2>&1 >/dev/null); then
	fail "default values rendered without the cluster: a generated admin key would change at every render"
fi
for want in secrets.adminApiKey secrets.existingSecret; do
	grep -q "$want" <<<"$msg" || fail "the refused render does not name $want: $msg"
done
key=$(awk '/^kind: Secret$/{s=1} s && /^  ADMIN_API_KEY:/{gsub(/"/,"",$2); print $2; exit}' "$out/default.yaml" | base64 -d)
[ "$key" = deploy-check-admin-key-0123456789abcdef ] || fail "default.yaml: ADMIN_API_KEY is not secrets.adminApiKey"

# Seven components (six services and the gateway), each a Deployment, Service and PDB;
# one migration Job; HPAs, the Ingress, the ServiceMonitor (and its metrics Service) and
# the signing-key mount only where enabled.
for f in "$out/default.yaml" "$out/hosted.yaml"; do
	expect "$f" Deployment 7
	expect "$f" PodDisruptionBudget 7
	expect "$f" Job 1
	expect "$f" ConfigMap 1
	[ "$(grep -c '^ *grpc:$' "$f")" = 6 ] || fail "$(basename "$f"): want a grpc.health.v1 readiness probe on each of 6 services"
	[ "$(grep -c '^ *tcpSocket:$' "$f")" = 12 ] || fail "$(basename "$f"): want TCP startup and liveness probes on each of 6 services"
	# Readiness on /healthz: /readyz would take every gateway pod out of the Service at once
	# when one service, Redis or NATS is down (they share them), and every route would fail.
	[ "$(grep -c 'path: /healthz$' "$f")" = 3 ] || fail "$(basename "$f"): want the gateway's startup, liveness and readiness on /healthz"
	grep -q 'path: /readyz$' "$f" && fail "$(basename "$f"): the gateway's readiness is on /readyz by default"
	[ "$(grep -c 'name: METRICS_PORT$' "$f")" = 7 ] || fail "$(basename "$f"): want METRICS_PORT on every component"
	[ "$(grep -c 'clusterIP: None$' "$f")" -ge 6 ] || fail "$(basename "$f"): the services' Services must be headless (gRPC balancing)"
	grep -q 'readOnlyRootFilesystem: true' "$f" || fail "$(basename "$f"): root file system not read-only"
	grep -q 'runAsNonRoot: true' "$f" || fail "$(basename "$f"): pods may run as root"
	# SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT (5 s + 25 s by default) fit in the grace period.
	grep -q 'SHUTDOWN_DELAY: "5s"' "$f" && grep -q 'SHUTDOWN_TIMEOUT: "25s"' "$f" || fail "$(basename "$f"): SHUTDOWN_* not in the ConfigMap"
	[ "$(grep -c 'terminationGracePeriodSeconds: 35$' "$f")" = 7 ] || fail "$(basename "$f"): want terminationGracePeriodSeconds 35 (5 + 25 + 5) on every component"
done
expect "$out/default.yaml" Service 7
expect "$out/default.yaml" ServiceMonitor 0
[ "$(grep -c 'prometheus.io/scrape: "true"' "$out/default.yaml")" = 7 ] || fail "default.yaml: want scrape annotations on every component"
expect "$out/default.yaml" HorizontalPodAutoscaler 0
expect "$out/default.yaml" Ingress 0
expect "$out/hosted.yaml" Service 8
expect "$out/hosted.yaml" ServiceMonitor 1
grep -q 'prometheus.io/scrape' "$out/hosted.yaml" && fail "hosted.yaml: scrape annotations although the ServiceMonitor is used"
# One metrics Service for every component: without a relabeling every target's job would
# be the same, and the outbox alerts "by (job)" could not say which service is stuck.
grep -q 'targetLabel: job$' <<<"$(doc ServiceMonitor "$out/hosted.yaml")" || fail "hosted.yaml: the ServiceMonitor does not set job per component"
expect "$out/default.yaml" PrometheusRule 0
expect "$out/hosted.yaml" PrometheusRule 0
# prometheusRule.enabled renders the alerts of docs/observability.md, each expression word
# for word as the doc's table has it (for release "keyhouse"), and the process-down alert
# matches the ServiceMonitor's job names for any release name.
"$HELM" template keyhouse "$CHART" "${KEY[@]}" --set prometheusRule.enabled=true >"$out/rules.yaml"
expect "$out/rules.yaml" PrometheusRule 1
rules=$(doc PrometheusRule "$out/rules.yaml" | sed -n "s/^ *expr: '\(.*\)'\$/\1/p")
documented=$(awk '/^### Alerts to set/{a=1} a && /^\| [A-Z]/ && !/^\| alert /' docs/observability.md | wc -l)
[ "$(wc -l <<<"$rules")" = "$documented" ] || fail "rules.yaml: $(wc -l <<<"$rules") alerts rendered, docs/observability.md lists $documented"
while IFS= read -r expr; do
	grep -qF "\`$expr\`" docs/observability.md || fail "rules.yaml: alert expression not in docs/observability.md's table: $expr"
done <<<"$rules"
"$HELM" template prod "$CHART" "${KEY[@]}" --set prometheusRule.enabled=true --set metrics.serviceMonitor.enabled=true >"$out/prod.yaml"
grep -q 'replacement: "prod-keyhouse-$1"$' <<<"$(doc ServiceMonitor "$out/prod.yaml")" || fail "prod.yaml: the ServiceMonitor's jobs are not prod-keyhouse-<component>"
grep -qF "expr: 'up{job=~\"prod-keyhouse-.+\"} == 0'" <<<"$(doc PrometheusRule "$out/prod.yaml")" || fail "prod.yaml: the process-down alert does not match the ServiceMonitor's jobs"
expect "$out/hosted.yaml" HorizontalPodAutoscaler 7
expect "$out/hosted.yaml" Ingress 1
# A grace period shorter than the drain is refused.
if "$HELM" template keyhouse "$CHART" "${KEY[@]}" --set defaults.terminationGracePeriodSeconds=20 >/dev/null 2>&1; then
	fail "terminationGracePeriodSeconds 20 (< 5 + 25) was accepted"
fi
# migrate reads only DATABASE_URL and the log settings: the Job is handed no admin key.
for f in "$out/default.yaml" "$out/hosted.yaml"; do
	awk '/^---/{job=0} /^kind: Job$/{job=1} job && /ADMIN_API_KEY/{bad=1} END{exit bad}' "$f" ||
		fail "$(basename "$f"): the migrate Job is given ADMIN_API_KEY"
done
# NATS_URL, which can hold a NATS user's password, is in the chart's Secret, not the
# ConfigMap; with existingSecret a nats.url with credentials is refused rather than put
# into the ConfigMap.
grep -q NATS_URL <<<"$(doc ConfigMap "$out/default.yaml")" && fail "default.yaml: NATS_URL in the ConfigMap"
grep -q '^  NATS_URL: ' <<<"$(doc Secret "$out/default.yaml")" || fail "default.yaml: NATS_URL not in the Secret"
grep -q NATS_URL <<<"$(doc ConfigMap "$out/hosted.yaml")" && fail "hosted.yaml: NATS_URL in the ConfigMap although the example keeps it in its Secret"
if "$HELM" template keyhouse "$CHART" --set secrets.existingSecret=keyhouse-env \
	--set nats.url=nats://keyhouse:s3cret@nats:4222 >/dev/null 2>&1; then
	fail "a nats.url with credentials went into the ConfigMap (secrets.existingSecret)"
fi
# gateway.readinessPath chooses /readyz; anything else is refused.
"$HELM" template keyhouse "$CHART" "${KEY[@]}" --set gateway.readinessPath=/readyz >"$out/readyz.yaml"
[ "$(grep -c 'path: /readyz$' "$out/readyz.yaml")" = 1 ] || fail "gateway.readinessPath=/readyz does not put the readiness probe on /readyz"
if "$HELM" template keyhouse "$CHART" "${KEY[@]}" --set gateway.readinessPath=/ >/dev/null 2>&1; then
	fail "gateway.readinessPath=/ was accepted"
fi
# NATS_STREAM_REPLICAS is left unset (streams keep their count) unless nats.streamReplicas says.
grep -q 'NATS_STREAM_REPLICAS' "$out/default.yaml" && fail "default.yaml: NATS_STREAM_REPLICAS set although nats.streamReplicas is empty"
"$HELM" template keyhouse "$CHART" "${KEY[@]}" --set nats.streamReplicas=3 | grep -q 'NATS_STREAM_REPLICAS: "3"$' ||
	fail "nats.streamReplicas=3 does not reach NATS_STREAM_REPLICAS"
# With Secrets the chart does not render (existingSecret), the pods still carry the
# checksums that roll them when those Secrets change (read with lookup at install/upgrade;
# empty under helm template, which must still render).
"$HELM" template keyhouse "$CHART" --namespace keyhouse --set secrets.existingSecret=keyhouse-env \
	--set signingKeys.existingSecret=keyhouse-signing >"$out/existing.yaml"
[ "$(grep -c 'checksum/secret: [0-9a-f]\{64\}$' "$out/existing.yaml")" = 7 ] || fail "existing.yaml: want checksum/secret on every component"
[ "$(grep -c 'checksum/signing: [0-9a-f]\{64\}$' "$out/existing.yaml")" = 1 ] || fail "existing.yaml: want checksum/signing on licensing"
grep -q 'SIGNING_KEYS_FILE' "$out/default.yaml" && fail "default.yaml: SIGNING_KEYS_FILE set without a keyring"
grep -q 'SIGNING_KEYS_FILE' "$out/hosted.yaml" || fail "hosted.yaml: SIGNING_KEYS_FILE missing"
for f in "$out/default.yaml" "$out/hosted.yaml"; do
	printf '%-12s' "$(basename "$f" .yaml):"
	for k in Deployment Service HorizontalPodAutoscaler PodDisruptionBudget Job Ingress ConfigMap Secret ServiceAccount ServiceMonitor PrometheusRule; do
		printf ' %s=%s' "$k" "$(count "$k" "$f")"
	done
	echo
done

if ! command -v docker-compose >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing docker-compose (Debian) to validate docker-compose.yml"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null 2>&1 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; }
fi
if command -v docker-compose >/dev/null 2>&1; then
	# ADMIN_API_KEY is mandatory in the compose file; any value validates.
	ADMIN_API_KEY=deploy-check docker-compose -f docker-compose.yml config -q
	echo "docker-compose.yml: valid ($(docker-compose version --short))"
	if env -u ADMIN_API_KEY docker-compose -f docker-compose.yml config -q >/dev/null 2>&1; then
		fail "docker-compose.yml accepts a missing ADMIN_API_KEY"
	fi
else
	echo "docker-compose not installed (and not root): docker-compose.yml not validated"
fi
# The systemd units (deploy/systemd): systemd-analyze verify, on a scratch root holding the
# host's own units, stub binaries and the example environment file; any complaint fails.
if command -v systemd-analyze >/dev/null 2>&1 && [ -d /lib/systemd/system ]; then
	root="$out/systemd-root"
	mkdir -p "$root/lib/systemd" "$root/etc/systemd/system" "$root/etc/keyhouse" "$root/usr/local/bin"
	cp -a /lib/systemd/system "$root/lib/systemd/"
	cp deploy/systemd/*.service deploy/systemd/*.target "$root/etc/systemd/system/"
	cp deploy/systemd/keyhouse.env.example "$root/etc/keyhouse/keyhouse.env"
	for b in gateway billing licensing activations releases storefront events; do
		printf '#!/bin/sh\n' >"$root/usr/local/bin/$b" && chmod +x "$root/usr/local/bin/$b"
	done
	units=(keyhouse.target keyhouse-migrate.service keyhouse-gateway.service)
	for s in licensing activations releases billing storefront events; do units+=("keyhouse@$s.service"); done
	complaints=$(cd "$root/etc/systemd/system" && systemd-analyze verify --root="$root" "${units[@]}" 2>&1) ||
		fail "deploy/systemd: systemd-analyze verify failed: $complaints"
	[ -z "$complaints" ] || fail "deploy/systemd: systemd-analyze verify: $complaints"
	echo "deploy/systemd: verified ($(systemd-analyze --version | head -1))"
else
	echo "systemd-analyze not installed: deploy/systemd not verified"
fi
echo "deploy-check: ok"
