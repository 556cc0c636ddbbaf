package licensecache

import (
	"context"
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
