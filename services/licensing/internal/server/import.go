package server

import (
	"context"
	"errors"
	"math"
	"sort"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/protobuf/types/known/structpb"
)

// Import bounds (docs/import.md).
const (
	maxImportBatch  = 1000
	minImportKeyLen = 8
	maxImportKeyLen = 200
)

// The results of ImportResult.result.
const (
	resultImported  = "imported"
	resultUnchanged = "unchanged"
	resultSkipped   = "skipped"
	resultInvalid   = "invalid"
)

// importItem is one valid item of an import.
type importItem struct {
	index int
	l     *store.License
	// issued: the item gave issued_at (any instant, 0001-01-01T00:00:00Z included, which
	// is Go's zero time); otherwise the license is issued at the time of the import.
	issued bool
	usage  map[string]int64
}

// ImportLicenses imports licenses from another system with their keys. Each item is
// checked as issue-license checks its fields; a bad item is reported and the others
// proceed. The licenses that are new go in one transaction, under the same quota lock as
// issuance; the usage of the batch goes to activations in one call after the commit.
func (s *Server) ImportLicenses(ctx context.Context, req *licensingv1.ImportLicensesRequest) (*licensingv1.ImportLicensesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	switch n := len(req.GetLicenses()); {
	case n == 0:
		return nil, apierr.Invalid("licenses is required (1 to %d licenses)", maxImportBatch)
	case n > maxImportBatch:
		return nil, apierr.Invalid("licenses: at most %d per call", maxImportBatch)
	}
	skip := false
	switch req.GetOnConflict() {
	case "skip":
		skip = true
	case "", "fail":
	default:
		return nil, input.NotOneOf("on_conflict", "fail", "skip")
	}
	quota, err := s.checkEntitlements(ctx, tenant)
	if err != nil {
		return nil, err
	}
	results := make([]*licensingv1.ImportResult, len(req.GetLicenses()))
	invalid := func(i int, err error) error {
		var ae *apierr.Error
		if !errors.As(err, &ae) {
			return err
		}
		msg := ae.Message
		results[i].Result, results[i].Error = resultInvalid, &msg
		return nil
	}
	var items []importItem
	firstOf := map[string]int{}
	for i, in := range req.GetLicenses() {
		results[i] = &licensingv1.ImportResult{Index: int32(i), Key: in.GetKey()}
		item, err := s.importedLicense(tenant, in)
		if err == nil {
			if j, dup := firstOf[item.l.Key]; dup {
				err = apierr.Invalid("key is the same key as item %d of this request", j)
			}
		}
		if err != nil {
			if err := invalid(i, err); err != nil {
				return nil, err
			}
			continue
		}
		firstOf[item.l.Key] = i
		item.index = i
		items = append(items, item)
	}
	// Product ownership as issue-license has it: the first tenant to use a product owns it.
	// Another tenant's product makes its items invalid here; a product no tenant owns yet
	// is claimed by insertImported, in the transaction that writes its licenses, so an
	// import refused or partly refused claims nothing for the licenses it did not write.
	claims := map[string]bool{}
	owned := map[string]error{}
	valid := items[:0]
	for _, it := range items {
		if _, seen := owned[it.l.ProductID]; !seen {
			claims[it.l.ProductID], owned[it.l.ProductID] = s.mustClaim(ctx, tenant, it.l.ProductID)
		}
		if err := owned[it.l.ProductID]; err != nil {
			if err := invalid(it.index, err); err != nil {
				return nil, err
			}
			continue
		}
		valid = append(valid, it)
	}
	if err := s.insertImported(ctx, tenant, quota, skip, valid, claims, results); err != nil {
		return nil, err
	}
	if err := s.importUsage(ctx, tenant, valid, results); err != nil {
		return nil, err
	}
	resp := &licensingv1.ImportLicensesResponse{Results: results}
	for _, r := range results {
		switch r.Result {
		case resultImported:
			resp.Imported++
		case resultUnchanged:
			resp.Unchanged++
		case resultSkipped:
			resp.Skipped++
		case resultInvalid:
			resp.Invalid++
		}
	}
	return resp, nil
}

// insertImported writes the new licenses of items and fills in every item's result. The
// products of claims (true: no tenant owned it when the call began) are claimed for the
// licenses written, in their transaction: an item whose product another tenant claimed
// meanwhile is invalid, as it would have been a moment earlier. A concurrent import of one
// of the same keys makes it run again, once, seeing that key.
func (s *Server) insertImported(ctx context.Context, tenant string, quota int, skip bool, items []importItem, claims map[string]bool, results []*licensingv1.ImportResult) error {
	if len(items) == 0 {
		return nil
	}
	run := func() error {
		return s.store.InTx(ctx, func(tx store.Tx) error {
			if quota > 0 {
				if err := tx.LockQuota(ctx, tenant); err != nil {
					return err
				}
			}
			keys := make([]string, len(items))
			for i, it := range items {
				keys[i] = it.l.Key
			}
			existing, err := tx.Existing(ctx, keys)
			if err != nil {
				return err
			}
			deleted, err := tx.DeletedAmong(ctx, tenant, keys)
			if err != nil {
				return err
			}
			now := s.now().UTC().Truncate(1e9)
			var fresh []importItem
			for _, it := range items {
				r := results[it.index]
				have, exists := existing[it.l.Key]
				switch {
				case exists && store.SameTerms(have, it.l, it.issued):
					r.Result, r.Error = resultUnchanged, nil
				case exists && !skip:
					return apierr.Conflict(`licenses[%d].key %s; on_conflict is "fail", so nothing was imported`, it.index, conflictReason(have, tenant))
				case exists:
					msg := "key " + conflictReason(have, tenant)
					r.Result, r.Error = resultSkipped, &msg
				case deleted[it.l.Key]:
					// Activations remembers the deletion for good, so that no seat can
					// outlive it: a license written again under the key would verify but
					// never take a seat. Refused here, where the vendor sees why.
					msg := errDeletedKey
					r.Result, r.Error = resultInvalid, &msg
				default:
					l := *it.l
					if !it.issued {
						l.IssuedAt = now
					}
					if l.Status == license.StatusRevoked {
						l.RevokedAt = &now
					}
					r.Result, r.Error = resultImported, nil
					fresh = append(fresh, importItem{index: it.index, l: &l})
				}
			}
			fresh, err = claimImported(ctx, tx, tenant, fresh, claims, results)
			if err != nil {
				return err
			}
			adding := 0
			for _, it := range fresh {
				if store.HoldsQuota(it.l, now) {
					adding++
				}
			}
			if quota > 0 && adding > 0 {
				n, err := tx.CountActive(ctx, tenant)
				if err != nil {
					return err
				}
				if n+adding > quota {
					return errQuota
				}
			}
			ls := make([]*store.License, len(fresh))
			for i, it := range fresh {
				ls[i] = it.l
			}
			return tx.InsertImported(ctx, ls)
		})
	}
	err := run()
	if errors.Is(err, store.ErrImportRaced) {
		err = run()
	}
	if errors.Is(err, store.ErrImportRaced) {
		return apierr.Unavailable("Licensing is busy with a concurrent import of the same keys, retry")
	}
	return err
}

// errDeletedKey is the result of an item whose key the tenant deleted (docs/import.md).
const errDeletedKey = "key was deleted in Keyhouse and cannot be imported again; import the license under a new key"

// conflictReason says why an existing row of an imported key is not the item's license:
// the tenant's own license with other terms, or another tenant's license. Keys are one
// namespace across a hosted service, and verify-license already tells anyone whether a
// key exists, so naming the second case reveals nothing; the vendor needs to know that
// their customers' apps will be answered by a license that is not theirs.
func conflictReason(have *store.License, tenant string) string {
	if have.TenantID != tenant {
		return "is held by another tenant"
	}
	return "already exists with other terms"
}

// claimImported claims, in tx, the products of claims that the licenses about to be
// written (fresh) name, and returns the licenses still to write: an item whose product
// another tenant claimed first is invalid instead. Products are claimed in one order (by
// product key, the products table's), so two imports claiming the same new products wait
// for each other rather than deadlock.
func claimImported(ctx context.Context, tx store.Tx, tenant string, fresh []importItem, claims map[string]bool, results []*licensingv1.ImportResult) ([]importItem, error) {
	taken := map[string]bool{} // a product to claim → another tenant claimed it first
	var products []string
	for _, it := range fresh {
		if _, listed := taken[it.l.ProductID]; claims[it.l.ProductID] && !listed {
			taken[it.l.ProductID] = false
			products = append(products, it.l.ProductID)
		}
	}
	sort.Slice(products, func(i, j int) bool { return license.ProductKey(products[i]) < license.ProductKey(products[j]) })
	for _, p := range products {
		err := claimIn(ctx, tx, tenant, p)
		if err != nil && !errors.Is(err, license.ErrProductOwned) {
			return nil, err
		}
		taken[p] = err != nil
	}
	written := fresh[:0]
	for _, it := range fresh {
		if taken[it.l.ProductID] {
			msg := license.ErrProductOwned.Message
			results[it.index].Result, results[it.index].Error = resultInvalid, &msg
			continue
		}
		written = append(written, it)
	}
	return written, nil
}

// importUsage hands the usage of the batch's imported and unchanged licenses to
// activations, which owns usage counters, in one call. Unchanged ones are included so
// that retrying a batch whose usage call failed completes it; activations keeps totals it
// already has, so nothing is counted twice.
func (s *Server) importUsage(ctx context.Context, tenant string, items []importItem, results []*licensingv1.ImportResult) error {
	var usage []*activationsv1.ImportedUsage
	for _, it := range items {
		if r := results[it.index].Result; len(it.usage) > 0 && (r == resultImported || r == resultUnchanged) {
			usage = append(usage, &activationsv1.ImportedUsage{Key: it.l.Key, Usage: it.usage})
		}
	}
	if len(usage) == 0 {
		return nil
	}
	return s.seats.ImportUsage(ctx, tenant, usage)
}

// importedLicense checks one item: the fields issue-license has, with issue-license's
// rules, plus the key, issued_at, status and usage.
func (s *Server) importedLicense(tenant string, in *licensingv1.ImportedLicense) (importItem, error) {
	key, err := importKey(in.GetKey())
	if err != nil {
		return importItem{}, err
	}
	l, err := s.newLicense(tenant, &licensingv1.IssueLicenseRequest{
		Tier: in.GetTier(), ProductId: in.GetProductId(), IssuedTo: in.GetIssuedTo(), ExpiresAt: in.GetExpiresAt(),
		Limits: in.GetLimits(), MaxActivations: in.GetMaxActivations(), Notes: in.GetNotes(),
	})
	if err != nil {
		return importItem{}, err
	}
	l.Key = key
	issued, err := input.OptionalTime("issued_at", in.GetIssuedAt())
	if err != nil {
		return importItem{}, err
	}
	if issued != nil {
		// A date the license was not yet issued on is a mistake of the export; verify
		// would report it as the license's issue date.
		if issued.After(s.now()) {
			return importItem{}, apierr.Invalid("issued_at must not be later than the time of the import")
		}
		l.IssuedAt = *issued
	}
	switch in.GetStatus() {
	case "", license.StatusActive:
		l.Status = license.StatusActive
	case license.StatusRevoked:
		l.Status = license.StatusRevoked
	default:
		return importItem{}, input.NotOneOf("status", license.StatusActive, license.StatusRevoked)
	}
	usage, err := importUsageValues(in.GetUsage(), l.Limits)
	if err != nil {
		return importItem{}, err
	}
	return importItem{l: l, issued: issued != nil, usage: usage}, nil
}

// importKey checks an imported key and returns the form it is stored and looked up in.
// Keys of other systems are kept exactly as given, and lookups do not change them
// (pkg/license.CanonicalKey leaves any string that is not shaped like a Keyhouse key
// alone). A key that is shaped like one is stored in its issued form, so the exact string
// the app sends still finds it, as every other spelling of a Keyhouse key does.
func importKey(key string) (string, error) {
	if n := len(key); n < minImportKeyLen || n > maxImportKeyLen {
		return "", apierr.Invalid("key must be %d to %d characters", minImportKeyLen, maxImportKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", apierr.Invalid("key must be printable ASCII (character %d is not)", i+1)
		}
	}
	return canonicalKey(key), nil
}

// importUsageValues reads usage: metric to a non-negative whole running total, each
// metric one of the license's limits (as track-usage requires).
func importUsageValues(s *structpb.Struct, limits map[string]float64) (map[string]int64, error) {
	out := map[string]int64{}
	for metric, v := range s.GetFields() {
		if _, ok := limits[metric]; !ok {
			return nil, apierr.Invalid("usage.%s: the metric must be a key of limits", metric)
		}
		n, isNumber := v.GetKind().(*structpb.Value_NumberValue)
		// Up to 2^53-1, as limits: a JSON number beyond reads as a nearby double (2^53+1 as
		// 2^53), and the total stored would not be the one sent.
		if !isNumber || n.NumberValue < 0 || n.NumberValue != math.Trunc(n.NumberValue) || n.NumberValue > signing.MaxSafeInteger {
			return nil, apierr.Invalid("usage.%s must be a whole number of at least 0 and at most %d", metric, signing.MaxSafeInteger)
		}
		out[metric] = int64(n.NumberValue)
	}
	return out, nil
}
