package console

import (
	"context"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
)

// freeLicenseLimit is the Free plan's quota (api.md Limits).
const freeLicenseLimit = 5

// billingStatus is the billing status record of the export. Until the billing service
// answers GET /v1/billing/status itself, a hosted tenant is on Free: no billing history.
func (h *Handler) billingStatus(ctx context.Context) (*exportBilling, error) {
	stats, err := h.licensing.GetStats(ctx, &licensingv1.GetStatsRequest{})
	if err != nil {
		return nil, err
	}
	used, limit := stats.GetActiveLicenses(), int32(freeLicenseLimit)
	return &exportBilling{Status: "active", LicensesUsed: &used, LicenseLimit: &limit}, nil
}
