package store

import (
	"context"
	"testing"
)

// LatestOf answers each channel as Latest does, in the order asked: the newest published
// release, none for a channel without one, never another tenant's.
func TestLatestOfAnswersEachChannelAsLatest(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, r := range []struct {
		tenant, version, channel string
	}{{"t1", "1.0.0", "stable"}, {"t1", "1.2.0", "stable"}, {"t1", "2.0.0-beta", "beta"}, {"t2", "9.0.0", "stable"}} {
		if _, err := s.Register(ctx, r.tenant, "", nil, release(r.version, r.channel), 500, nil); err != nil {
			t.Fatal(err)
		}
	}
	beta, err := s.Latest(ctx, "t1", "app", "beta", "linux")
	if err != nil || beta == nil {
		t.Fatalf("beta %v %v", beta, err)
	}
	if err := s.Unpublish(ctx, "t1", beta.ID); err != nil {
		t.Fatal(err)
	}
	asked := []Channel{
		{"t1", "app", "stable", "linux"},
		{"t1", "app", "beta", "linux"}, // only an unpublished release
		{"t1", "app", "stable", "windows"},
		{"t2", "app", "stable", "linux"},
		{"t3", "app", "stable", "linux"},
		{"t1", "other", "stable", "linux"},
		{"t1", "app", "stable", "linux"},
	}
	got, err := s.LatestOf(ctx, asked)
	if err != nil || len(got) != len(asked) {
		t.Fatalf("%d answers for %d channels: %v", len(got), len(asked), err)
	}
	found := 0
	for i, c := range asked {
		want, err := s.Latest(ctx, c.Tenant, c.ProductKey, c.Channel, c.Platform)
		if err != nil {
			t.Fatal(err)
		}
		if (want == nil) != (got[i] == nil) || (want != nil && (*want != *got[i])) {
			t.Fatalf("%v: LatestOf %+v, Latest %+v", c, got[i], want)
		}
		if want != nil {
			found++
		}
	}
	if found != 3 || got[0].Version != "1.2.0" || got[3].Version != "9.0.0" {
		t.Fatalf("%d found; stable %v, t2 %v", found, got[0], got[3])
	}
}
