package licensecache

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/grpcx/grpcxtest"
	"google.golang.org/grpc/metadata"
)

// tenantsNamed is every key a header names with its tenant.
func tenantsNamed(header metadata.MD) map[string]string {
	named := map[string]string{}
	Tenants(header, func(key, tenant string) { named[key] = tenant })
	return named
}

func TestAnAnswerNamesTheTenantOfEveryKeyInOneHeaderWrite(t *testing.T) {
	ctx, stream := grpcxtest.Call(context.Background(), "/keyhouse.test/Call")
	AnnounceTenant(ctx, "AAAA-BBBB", "t_1", "CCCC-DDDD", "t_2")
	AnnounceTenant(ctx) // nothing found: nothing written
	header, writes := stream.Header()
	if writes != 1 {
		t.Fatalf("%d header writes for one batch, want 1", writes)
	}
	learned := tenantsNamed(header)
	if len(learned) != 2 || learned["AAAA-BBBB"] != "t_1" || learned["CCCC-DDDD"] != "t_2" {
		t.Fatalf("learned %v", learned)
	}
	AnnounceTenant(context.Background(), "EEEE-FFFF", "t_3") // outside a call: no panic, nothing
}

func TestABatchsItemsAnnouncedOneByOneAreWrittenOnce(t *testing.T) {
	call, stream := grpcxtest.Call(context.Background(), "/keyhouse.test/Call")
	ctx, announce := GatherTenants(call)
	var wg sync.WaitGroup
	for i := range 64 { // the items of a batch, each looked up on its own goroutine
		wg.Go(func() { AnnounceTenant(ctx, fmt.Sprintf("KEY-%02d", i), fmt.Sprintf("t_%d", i%3)) })
	}
	wg.Wait()
	if _, writes := stream.Header(); writes != 0 {
		t.Fatalf("%d header writes before the batch ended", writes)
	}
	announce()
	announce() // nothing new: nothing written
	if _, writes := stream.Header(); writes != 1 {
		t.Fatalf("%d header writes for a batch of 64, want 1", writes)
	}
	AnnounceTenant(ctx, "KEY-LATE", "t_9") // after the batch's write: written at once
	header, writes := stream.Header()
	if writes != 2 {
		t.Fatalf("an announcement after the batch's write: %d writes in all, want 2", writes)
	}
	learned := tenantsNamed(header)
	if len(learned) != 65 || learned["KEY-07"] != "t_1" || learned["KEY-LATE"] != "t_9" {
		t.Fatalf("learned %d keys, KEY-07 → %q, KEY-LATE → %q", len(learned), learned["KEY-07"], learned["KEY-LATE"])
	}
}
