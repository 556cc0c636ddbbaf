package server

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
)

// remoteTimeout bounds a call to another service: a slow dependency answers 503, never a hang.
const remoteTimeout = 3 * time.Second

// RemoteEntitlements asks the billing service.
type RemoteEntitlements struct {
	Client   accountsv1.AccountsServiceClient
	AdminKey string
}

// Get implements Entitlements.
func (r RemoteEntitlements) Get(ctx context.Context, tenant string) (*accountsv1.GetEntitlementsResponse, error) {
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
	defer cancel()
	resp, err := r.Client.GetEntitlements(ctx, &accountsv1.GetEntitlementsRequest{})
	if err != nil {
		return nil, apierr.Unavailable("Billing service unavailable, retry")
	}
	return resp, nil
}

// RemoteSeats asks the activations service.
type RemoteSeats struct {
	Client   activationsv1.ActivationsInternalServiceClient
	AdminKey string
}

// Summaries implements Seats.
func (r RemoteSeats) Summaries(ctx context.Context, tenant string, keys []string) (map[string]*activationsv1.SeatSummary, error) {
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
	defer cancel()
	resp, err := r.Client.GetSeatSummaries(ctx, &activationsv1.GetSeatSummariesRequest{Keys: keys})
	if err != nil {
		return nil, apierr.Unavailable("Activations service unavailable, retry")
	}
	return resp.GetSummaries(), nil
}

// Stats implements Seats.
func (r RemoteSeats) Stats(ctx context.Context, tenant string, recent int) (*activationsv1.GetActivationStatsResponse, error) {
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
	defer cancel()
	resp, err := r.Client.GetActivationStats(ctx, &activationsv1.GetActivationStatsRequest{RecentLimit: int32(recent)})
	if err != nil {
		return nil, apierr.Unavailable("Activations service unavailable, retry")
	}
	return resp, nil
}
