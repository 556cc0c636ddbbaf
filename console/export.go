package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// exportMax is the data export's license cap (api.md Limits).
const exportMax = 1000

// exportEvery is the data export's per-tenant limit: one per minute.
const exportEvery = time.Minute

// The export file of api.md ("Account data export"), fields in its order. Excluded on
// purpose: license notes, password, API key, payment details.
type exportFile struct {
	ExportedAt string          `json:"exported_at"`
	Account    exportAccount   `json:"account"`
	Billing    *exportBilling  `json:"billing"`
	Licenses   []exportLicense `json:"licenses"`
}

type exportAccount struct {
	Email      string `json:"email"`
	TenantName string `json:"tenant_name"`
	TenantID   string `json:"tenant_id"`
}

// exportBilling is the billing status record, as GET /v1/billing/status writes it.
type exportBilling struct {
	Status            string  `json:"status"`
	Plan              *string `json:"plan"`
	CancelAtPeriodEnd bool    `json:"cancelAtPeriodEnd"`
	CurrentPeriodEnd  *string `json:"currentPeriodEnd"`
	LicensesUsed      *int32  `json:"licensesUsed"`
	LicenseLimit      *int32  `json:"licenseLimit"`
}

type exportLicense struct {
	Key            string             `json:"key"`
	ProductID      string             `json:"product_id"`
	Tier           string             `json:"tier"`
	Status         string             `json:"status"`
	IssuedTo       string             `json:"issued_to"`
	IssuedAt       *string            `json:"issued_at"`
	ExpiresAt      *string            `json:"expires_at"`
	Limits         map[string]any     `json:"limits"`
	Usage          map[string]int64   `json:"usage"`
	MaxActivations *int32             `json:"max_activations"`
	RevokedAt      *string            `json:"revoked_at"`
	Activations    []exportActivation `json:"activations"`
}

type exportActivation struct {
	InstanceID  string  `json:"instance_id"`
	ActivatedAt *string `json:"activated_at"`
}

func isoOrNil(ts *timestamppb.Timestamp) *string {
	if ts == nil {
		return nil
	}
	s := ts.AsTime().UTC().Format(time.RFC3339Nano)
	return &s
}

// export answers GET /console/export (addendum §9): hosted only, one per tenant per minute,
// the newest 1,000 licenses. The gateway counts the request against Admin-Info.
func (h *Handler) export(w http.ResponseWriter, r *http.Request, s *session) {
	if !h.opts.MultiTenant {
		h.notFound(w, r)
		return
	}
	if h.opts.ExportGate != nil {
		if ok, retry := h.opts.ExportGate.Allow(r.Context(), s.account.GetTenantId()); !ok {
			h.opts.TooManyRequests(w, retry)
			return
		}
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	body, err := h.buildExport(ctx, s)
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="service-data-export-`+h.opts.Now().UTC().Format("2006-01-02")+`.json"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func (h *Handler) buildExport(ctx context.Context, s *session) ([]byte, error) {
	billing, err := h.billingStatus(ctx)
	if err != nil {
		return nil, err
	}
	list, err := h.licensing.ListLicenses(ctx, &licensingv1.ListLicensesRequest{Limit: strconv.Itoa(exportMax), Offset: "0"})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(list.GetLicenses()))
	for _, l := range list.GetLicenses() {
		keys = append(keys, l.GetKey())
	}
	seats, err := h.seats.ListActivationsForKeys(ctx, &activationsv1.ListActivationsForKeysRequest{Keys: keys})
	if err != nil {
		return nil, err
	}
	f := exportFile{
		// To the microsecond, as every time of the API and the export's others (Postgres's).
		ExportedAt: h.opts.Now().UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano),
		Account:    exportAccount{Email: s.account.GetEmail(), TenantName: s.account.GetTenantName(), TenantID: s.account.GetTenantId()},
		Billing:    billing,
		Licenses:   make([]exportLicense, 0, len(keys)),
	}
	for _, l := range list.GetLicenses() {
		e := exportLicense{
			Key: l.GetKey(), ProductID: l.GetProductId(), Tier: l.GetTier(), Status: l.GetStatus(),
			IssuedTo: l.GetIssuedTo(), IssuedAt: isoOrNil(l.GetIssuedAt()), ExpiresAt: isoOrNil(l.GetExpiresAt()),
			Limits: l.GetLimits().AsMap(), Usage: map[string]int64{}, RevokedAt: isoOrNil(l.GetRevokedAt()),
			Activations: []exportActivation{},
		}
		if e.Limits == nil {
			e.Limits = map[string]any{}
		}
		for k, n := range l.GetUsage() {
			e.Usage[k] = int64(n)
		}
		if c := l.GetMaxActivations(); c != nil {
			v := c.GetValue()
			e.MaxActivations = &v
		}
		for _, a := range seats.GetActivations()[l.GetKey()].GetActivations() {
			e.Activations = append(e.Activations, exportActivation{InstanceID: a.GetInstanceId(), ActivatedAt: isoOrNil(a.GetActivatedAt())})
		}
		f.Licenses = append(f.Licenses, e)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RedisExportGate keeps the one-export-per-minute slot in Redis (SET NX with a 60 s
// expiry), so every gateway replica agrees; when Redis fails it falls back to this
// replica's own memory rather than refusing exports.
type RedisExportGate struct {
	Client *redis.Client

	mu    sync.Mutex
	local map[string]time.Time
}

// Allow implements ExportGate.
func (g *RedisExportGate) Allow(ctx context.Context, tenant string) (bool, time.Duration) {
	key := "console:export:" + tenant
	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	ok, err := g.Client.SetNX(c, key, "1", exportEvery).Result()
	if err == nil {
		if ok {
			return true, 0
		}
		ttl, err := g.Client.PTTL(c, key).Result()
		if err != nil || ttl <= 0 {
			ttl = exportEvery
		}
		return false, ttl
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return false, exportEvery
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.local == nil {
		g.local = map[string]time.Time{}
	}
	now := time.Now()
	if until, held := g.local[key]; held && now.Before(until) {
		return false, until.Sub(now)
	}
	g.local[key] = now.Add(exportEvery)
	return true, 0
}
