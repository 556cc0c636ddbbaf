package licensecache

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// headerWrites is the server side of a call as grpc.SetHeader sees it, counting writes.
type headerWrites struct {
	header metadata.MD
	writes int
}

func (s *headerWrites) Method() string { return "/keyhouse.test/Call" }
func (s *headerWrites) SetHeader(md metadata.MD) error {
	s.writes++
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *headerWrites) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *headerWrites) SetTrailer(metadata.MD) error    { return nil }

func TestAnAnswerNamesTheTenantOfEveryKeyInOneHeaderWrite(t *testing.T) {
	stream := &headerWrites{}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), stream)
	AnnounceTenant(ctx, "AAAA-BBBB", "t_1", "CCCC-DDDD", "t_2")
	AnnounceTenant(ctx) // nothing found: nothing written
	if stream.writes != 1 {
		t.Fatalf("%d header writes for one batch, want 1", stream.writes)
	}
	learned := map[string]string{}
	Tenants(stream.header, func(key, tenant string) { learned[key] = tenant })
	if len(learned) != 2 || learned["AAAA-BBBB"] != "t_1" || learned["CCCC-DDDD"] != "t_2" {
		t.Fatalf("learned %v", learned)
	}
	AnnounceTenant(context.Background(), "EEEE-FFFF", "t_3") // outside a call: no panic, nothing
}

func TestABatchsItemsAnnouncedOneByOneAreWrittenOnce(t *testing.T) {
	stream := &headerWrites{}
	call := grpc.NewContextWithServerTransportStream(context.Background(), stream)
	ctx, announce := GatherTenants(call)
	var wg sync.WaitGroup
	for i := range 64 { // the items of a batch, each looked up on its own goroutine
		wg.Go(func() { AnnounceTenant(ctx, fmt.Sprintf("KEY-%02d", i), fmt.Sprintf("t_%d", i%3)) })
	}
	wg.Wait()
	if stream.writes != 0 {
		t.Fatalf("%d header writes before the batch ended", stream.writes)
	}
	announce()
	announce() // nothing new: nothing written
	if stream.writes != 1 {
		t.Fatalf("%d header writes for a batch of 64, want 1", stream.writes)
	}
	AnnounceTenant(ctx, "KEY-LATE", "t_9") // after the batch's write: written at once
	if stream.writes != 2 {
		t.Fatalf("an announcement after the batch's write: %d writes in all, want 2", stream.writes)
	}
	learned := map[string]string{}
	Tenants(stream.header, func(key, tenant string) { learned[key] = tenant })
	if len(learned) != 65 || learned["KEY-07"] != "t_1" || learned["KEY-LATE"] != "t_9" {
		t.Fatalf("learned %d keys, KEY-07 → %q, KEY-LATE → %q", len(learned), learned["KEY-07"], learned["KEY-LATE"])
	}
}
