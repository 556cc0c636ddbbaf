package console

import (
	"context"

	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
)

// billingStatus is the billing status record of the export: exactly what
// GET /v1/billing/status answers the tenant.
func (h *Handler) billingStatus(ctx context.Context) (*exportBilling, error) {
	st, err := h.billing.GetBillingStatus(ctx, &billingv1.GetBillingStatusRequest{})
	if err != nil {
		return nil, err
	}
	b := &exportBilling{Status: st.GetStatus(), CancelAtPeriodEnd: st.GetCancelAtPeriodEnd(), CurrentPeriodEnd: isoOrNil(st.GetCurrentPeriodEnd())}
	if st.GetPlan() != nil {
		p := st.GetPlan().GetValue()
		b.Plan = &p
	}
	if st.GetLicensesUsed() != nil {
		n := st.GetLicensesUsed().GetValue()
		b.LicensesUsed = &n
	}
	if st.GetLicenseLimit() != nil {
		n := st.GetLicenseLimit().GetValue()
		b.LicenseLimit = &n
	}
	return b, nil
}
