package app

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
)

// startSpine starts a service's event spine on natsURL with NATS_STREAM_REPLICAS =
// replicas (0: unset) and extra streams, and stops it again; it returns the start's error.
func startSpine(t *testing.T, natsURL string, replicas int, extra ...jetstream.StreamConfig) error {
	t.Helper()
	d, _ := outboxDeps(t, natsURL)
	d.Config.NATSStreamReplicas = replicas
	runCtx, stop := context.WithCancel(context.Background())
	defer func() {
		stop()
		d.close()
	}()
	_, err := d.StartEventSpine(runCtx, "svc", SpineOptions{Streams: extra})
	return err
}

// streamReplicas reads how many copies JetStream keeps of each stream.
func streamReplicas(t *testing.T, js jetstream.JetStream, names ...string) []int {
	t.Helper()
	var out []int
	for _, name := range names {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s.CachedInfo().Config.Replicas)
	}
	return out
}

// NATS_STREAM_REPLICAS reaches every stream a service creates (the event stream and its
// own, such as the storefront's), and unset it leaves a count an operator set by hand:
// each start used to update the streams back to one replica.
func TestStreamsGetNATSStreamReplicasAndKeepAHandSetCountWhenUnset(t *testing.T) {
	testkit.Integration(t)
	cluster, err := devnats.StartCluster(filepath.Join(testkit.Dir(t), "nats-cluster"), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range cluster {
			s.Stop()
		}
	}()
	url := devnats.ClusterURL(cluster)
	ctx := context.Background()
	nc, js, err := natsx.Connect(ctx, url, "replicas-test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	extra := jetstream.StreamConfig{Name: "REPLICAS_TEST", Subjects: []string{"replicas-test.>"}, Storage: jetstream.FileStorage}

	if err := startSpine(t, url, 3, extra); err != nil {
		t.Fatalf("NATS_STREAM_REPLICAS=3 on a 3-server cluster: %v", err)
	}
	if got := streamReplicas(t, js, events.Stream, extra.Name); got[0] != 3 || got[1] != 3 {
		t.Fatalf("NATS_STREAM_REPLICAS=3: replicas %v, want 3 for %s and %s", got, events.Stream, extra.Name)
	}

	// Unset: what the streams have stays, however it was set.
	if err := startSpine(t, url, 0, extra); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, events.Stream, extra.Name); got[0] != 3 || got[1] != 3 {
		t.Fatalf("NATS_STREAM_REPLICAS unset after 3: replicas %v, want 3 kept", got)
	}

	// Set again, the setting wins.
	if err := startSpine(t, url, 1, extra); err != nil {
		t.Fatal(err)
	}
	if got := streamReplicas(t, js, events.Stream, extra.Name); got[0] != 1 || got[1] != 1 {
		t.Fatalf("NATS_STREAM_REPLICAS=1: replicas %v, want 1", got)
	}
}

// A count the NATS deployment cannot hold stops the service at start with JetStream's
// refusal and the variable that asked for it.
func TestNATSStreamReplicasBeyondTheDeploymentIsRefusedNamingTheVariable(t *testing.T) {
	err := startSpine(t, devnats.SharedURL(t), 3)
	if err == nil || !strings.Contains(err.Error(), "NATS_STREAM_REPLICAS=3") {
		t.Fatalf("NATS_STREAM_REPLICAS=3 on a single server: %v; want a refusal naming NATS_STREAM_REPLICAS=3", err)
	}
}
