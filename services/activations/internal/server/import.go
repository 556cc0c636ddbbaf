package server

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
)

// ImportUsage sets the starting usage of licenses licensing has just imported. Licensing
// validated the metrics against each license's limits; a negative total is still refused
// here, since the usage table cannot hold one.
func (s *Server) ImportUsage(ctx context.Context, req *activationsv1.ImportUsageRequest) (*activationsv1.ImportUsageResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.GetLicenses()) > maxSummaryKeys {
		return nil, apierr.Invalid("licenses: at most %d per call", maxSummaryKeys)
	}
	usage := map[string]map[string]int64{}
	for _, l := range req.GetLicenses() {
		for metric, used := range l.GetUsage() {
			if used < 0 {
				return nil, apierr.Invalid("usage.%s must not be negative", metric)
			}
		}
		if len(l.GetUsage()) > 0 {
			usage[l.GetKey()] = l.GetUsage()
		}
	}
	if len(usage) == 0 {
		return &activationsv1.ImportUsageResponse{}, nil
	}
	n, err := s.store.ImportUsage(ctx, tenant, usage)
	if err != nil {
		return nil, err
	}
	return &activationsv1.ImportUsageResponse{Written: int32(n)}, nil
}
