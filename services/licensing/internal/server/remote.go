package server

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
)

// RemoteSeats asks the activations service, under the call policy every client shares
// (grpcx.Call).
type RemoteSeats struct {
	rpc  activationsv1.ActivationsInternalServiceClient
	peer grpcx.Peer
}

// NewRemoteSeats returns a Seats on conn presenting adminKey.
func NewRemoteSeats(conn grpc.ClientConnInterface, adminKey string) RemoteSeats {
	return RemoteSeats{
		rpc:  activationsv1.NewActivationsInternalServiceClient(conn),
		peer: grpcx.Peer{Name: "Activations", AdminKey: adminKey},
	}
}

// Summaries implements Seats.
func (r RemoteSeats) Summaries(ctx context.Context, tenant string, keys []string) (map[string]*activationsv1.SeatSummary, error) {
	resp, err := grpcx.Call(ctx, r.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*activationsv1.GetSeatSummariesResponse, error) {
		return r.rpc.GetSeatSummaries(ctx, &activationsv1.GetSeatSummariesRequest{Keys: keys}, o...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSummaries(), nil
}

// Stats implements Seats.
func (r RemoteSeats) Stats(ctx context.Context, tenant string, recent int, exclude []string) (*activationsv1.GetActivationStatsResponse, error) {
	return grpcx.Call(ctx, r.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*activationsv1.GetActivationStatsResponse, error) {
		return r.rpc.GetActivationStats(ctx, &activationsv1.GetActivationStatsRequest{RecentLimit: int32(recent), ExcludeKeys: exclude}, o...)
	})
}

// ImportUsage implements Seats.
func (r RemoteSeats) ImportUsage(ctx context.Context, tenant string, usage []*activationsv1.ImportedUsage) error {
	_, err := grpcx.Call(ctx, r.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*activationsv1.ImportUsageResponse, error) {
		return r.rpc.ImportUsage(ctx, &activationsv1.ImportUsageRequest{Licenses: usage}, o...)
	})
	return err
}
