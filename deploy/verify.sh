#!/usr/bin/env bash
# make deploy-verify: the chart accepted by a real Kubernetes API server. Starts Debian's
# etcd and a kube-apiserver built from k8s.io/kubernetes (deploy/apiserver pins the
# release) on loopback in a temporary folder, then runs `kubectl apply --dry-run=server
# --validate=strict` on the chart rendered with the default (self-hosted) values and with
# deploy/helm/examples/values-hosted.yaml. The server runs every object through its
# schema, defaulting and admission (unknown fields, wrong types, invalid names, ports,
# probes and label selectors are refused), without storing any. Needs HELM, KUBE_APISERVER
# and KUBECTL (the Makefile builds them); installs etcd-server and openssl from Debian when
# missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM=${HELM:?set HELM} KUBE_APISERVER=${KUBE_APISERVER:?set KUBE_APISERVER} KUBECTL=${KUBECTL:?set KUBECTL}
CHART=deploy/helm/keyhouse
HOSTED=deploy/helm/examples/values-hosted.yaml
NS=keyhouse

fail() { echo "deploy-verify: $*" >&2; exit 1; }

missing=""
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
if [ -n "$missing" ]; then
	[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || fail "install$missing (Debian packages)"
	echo "installing:$missing"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

# freeport: a TCP port nothing listens on right now.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

etcd_port=$(freeport) peer_port=$(freeport) api_port=$(freeport)
echo "== $(etcd --version | head -1), kube-apiserver $("$KUBE_APISERVER" --version | awk '{print $2}'), kubectl $("$KUBECTL" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])'), helm $("$HELM" version --template '{{.Version}}')"

etcd --name verify --data-dir "$dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-cluster "verify=http://127.0.0.1:$peer_port" >"$dir/etcd.log" 2>&1 &
pids+=($!)

# Service-account signing key and a static admin token (system:masters).
openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
token=$(openssl rand -hex 24)
echo "$token,deploy-verify,deploy-verify,system:masters" >"$dir/tokens.csv"

"$KUBE_APISERVER" \
	--etcd-servers "http://127.0.0.1:$etcd_port" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --cert-dir "$dir/certs" \
	--token-auth-file "$dir/tokens.csv" --authorization-mode RBAC \
	--service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
	--service-account-issuer https://kubernetes.default.svc \
	--service-cluster-ip-range 10.96.0.0/16 \
	>"$dir/apiserver.log" 2>&1 &
pids+=($!)

cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: verify, cluster: {server: "https://127.0.0.1:$api_port", insecure-skip-tls-verify: true}}]
users: [{name: verify, user: {token: "$token"}}]
contexts: [{name: verify, context: {cluster: verify, user: verify}}]
current-context: verify
KC
export KUBECONFIG="$dir/kubeconfig"

# The first start creates the built-in objects; on this shared machine allow it two minutes.
for i in $(seq 1 240); do
	if [ "$("$KUBECTL" get --raw /readyz 2>/dev/null)" = ok ]; then break; fi
	kill -0 "${pids[1]}" 2>/dev/null || { tail -20 "$dir/apiserver.log"; fail "kube-apiserver exited"; }
	[ "$i" = 240 ] && { tail -20 "$dir/apiserver.log"; fail "kube-apiserver not ready after 120 s"; }
	sleep 0.5
done
echo "kube-apiserver ready on 127.0.0.1:$api_port ($("$KUBECTL" version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'))"

# What the rendered chart needs to exist beforehand: its namespace, and the
# ServiceMonitor CRD of the Prometheus Operator (hosted values enable one; the upstream
# CRD cannot be downloaded here, deploy/crds/ holds the part of its schema the chart uses).
"$KUBECTL" create namespace "$NS" >/dev/null
"$KUBECTL" apply -f deploy/crds/servicemonitor.yaml >/dev/null
"$KUBECTL" wait --for condition=Established crd/servicemonitors.monitoring.coreos.com --timeout 60s >/dev/null

rc=0
for values in default hosted; do
	# Offline the chart cannot read a generated admin key back from the cluster: give one.
	args=(--set secrets.adminApiKey=deploy-verify-admin-key-0123456789abcdef)
	[ "$values" = hosted ] && args=(-f "$HOSTED")
	"$HELM" template keyhouse "$CHART" --namespace "$NS" --kube-version "$("$KUBECTL" version -o json | python3 -c 'import json,sys; v=json.load(sys.stdin)["serverVersion"]; print(v["major"]+"."+v["minor"].rstrip("+"))')" \
		--api-versions monitoring.coreos.com/v1/ServiceMonitor "${args[@]}" >"$dir/$values.yaml"
	echo "== kubectl apply --dry-run=server --validate=strict: $values values ($(grep -c '^kind:' "$dir/$values.yaml") objects)"
	if ! "$KUBECTL" apply --dry-run=server --validate=strict -n "$NS" -f "$dir/$values.yaml" 2>&1; then
		rc=1
	fi
done
[ "$rc" = 0 ] || fail "the API server refused part of the chart (above)"

# The check itself can fail: the same rendering with an unknown field, and with an
# out-of-range port, must each be refused.
echo "== broken renderings are refused:"
for broken in 's/^  revisionHistoryLimit: 5$/  revisionHistoryLimit: 5\n  replicaz: 2/' 's/containerPort: 9080$/containerPort: 90800/'; do
	sed -e "$broken" "$dir/default.yaml" >"$dir/broken.yaml"
	cmp -s "$dir/default.yaml" "$dir/broken.yaml" && fail "sed '$broken' changed nothing"
	if out=$("$KUBECTL" apply --dry-run=server --validate=strict -n "$NS" -f "$dir/broken.yaml" 2>&1); then
		fail "a broken rendering ($broken) was accepted"
	fi
	echo "$out" | grep -E 'Invalid value|unknown field' | head -1
done
echo "deploy-verify: ok"
