package server

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PortalTokens resolves an end-user portal token to its license, asking licensing on every
// call (licensingclient.Client): a revoked license or a switched-off portal must refuse
// the next request.
type PortalTokens interface {
	ResolvePortalToken(ctx context.Context, token string) (tenant, key string, err error)
	// License is the token's license (its product names the seat's event).
	License(ctx context.Context, tenant, key string) (*licensingv1.License, error)
}

// maxExportKeys bounds ListActivationsForKeys (the data export's 1,000 licenses).
const maxExportKeys = 1000

// Console implements ActivationsConsoleService.
type Console struct {
	activationsv1.UnimplementedActivationsConsoleServiceServer
	store  *store.Store
	portal PortalTokens
}

// NewConsole returns the console service.
func NewConsole(s *store.Store, p PortalTokens) *Console { return &Console{store: s, portal: p} }

// RegisterConsole adds the console service to g.
func RegisterConsole(g *grpc.Server, c *Console) {
	activationsv1.RegisterActivationsConsoleServiceServer(g, c)
}

// ListActivationsForKeys returns the caller's seats of many licenses in one query; the
// tenant scope alone keeps other tenants' seats out.
func (c *Console) ListActivationsForKeys(ctx context.Context, req *activationsv1.ListActivationsForKeysRequest) (*activationsv1.ListActivationsForKeysResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.GetKeys()) > maxExportKeys {
		return nil, apierr.Invalid("keys must hold at most %d license keys", maxExportKeys)
	}
	seats, err := c.store.SeatsForKeys(ctx, tenant, req.GetKeys())
	if err != nil {
		return nil, err
	}
	out := &activationsv1.ListActivationsForKeysResponse{Activations: map[string]*activationsv1.LicenseSeats{}}
	for _, st := range seats {
		l := out.Activations[st.Key]
		if l == nil {
			l = &activationsv1.LicenseSeats{}
			out.Activations[st.Key] = l
		}
		l.Activations = append(l.Activations, &activationsv1.Activation{InstanceId: st.InstanceID, ActivatedAt: timestamppb.New(st.ActivatedAt)})
	}
	return out, nil
}

// ListPortalSeats lists the seats of the portal token's license.
func (c *Console) ListPortalSeats(ctx context.Context, req *activationsv1.ListPortalSeatsRequest) (*activationsv1.ListPortalSeatsResponse, error) {
	tenant, key, err := c.portal.ResolvePortalToken(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	seats, err := c.store.Seats(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	out := &activationsv1.ListPortalSeatsResponse{Key: key, Activations: []*activationsv1.Activation{}}
	for _, st := range seats {
		out.Activations = append(out.Activations, &activationsv1.Activation{InstanceId: st.InstanceID, ActivatedAt: timestamppb.New(st.ActivatedAt)})
	}
	leases, err := c.store.SeatLeases(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	out.Leases = SeatLeaseMessages(leases)
	return out, nil
}

// DeactivatePortalSeat frees one seat of the portal token's license.
func (c *Console) DeactivatePortalSeat(ctx context.Context, req *activationsv1.DeactivatePortalSeatRequest) (*activationsv1.DeactivatePortalSeatResponse, error) {
	if err := checkField("instance_id", req.GetInstanceId()); err != nil {
		return nil, err
	}
	tenant, key, err := c.portal.ResolvePortalToken(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	l, err := c.portal.License(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	// The holder frees the seat from the portal: the client's reason, the portal's act.
	ctx = events.WithActor(ctx, events.ActorPortal)
	ok, err := c.store.DeactivateInstance(ctx, tenant, key, l.GetProductId(), req.GetInstanceId(), events.ReasonClient)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNoSeat
	}
	return &activationsv1.DeactivatePortalSeatResponse{Deactivated: true}, nil
}
