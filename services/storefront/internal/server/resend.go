package server

import (
	"context"
	"math"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/fulfill"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Resender sends a purchase's buyer email again: the fulfillment worker
// (fulfill.Worker.Resend), which owns the email and the purchase's lock.
type Resender interface {
	Resend(ctx context.Context, tenant string, deliveryID int32, idemKey string, requestHash []byte,
		answer func(*fulfill.Resent) ([]byte, error)) ([]byte, error)
}

// ResendEmail sends the buyer email of a delivery's purchase again to the address on
// record. Under an Idempotency-Key (addendum §8) a retry answers the first resend and
// sends nothing: a support desk's double click mails the buyer once.
func (s *Server) ResendEmail(ctx context.Context, req *storefrontv1.ResendEmailRequest) (*storefrontv1.ResendEmailResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := input.Decimal(req.GetId())
	if !ok || id < 1 || id > math.MaxInt32 {
		return nil, fulfill.ErrDeliveryNotFound
	}
	raw, err := s.resender.Resend(ctx, tenant, int32(id), idemKey, idempotency.RequestHash("ResendEmail", req),
		func(r *fulfill.Resent) ([]byte, error) {
			return proto.Marshal(&storefrontv1.ResendEmailResponse{
				DeliveryId: r.DeliveryID, CheckoutSessionId: r.CheckoutSessionID, EmailStatus: r.EmailStatus,
				SentTo: r.SentTo, SentAt: timestamppb.New(r.SentAt), ResendCount: int32(r.ResendsInWindow),
			})
		})
	if err != nil {
		return nil, err
	}
	out := &storefrontv1.ResendEmailResponse{}
	if err := proto.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}
