package keyhouse

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Store keeps the client's state between runs: the activation token and the newest lease.
type Store interface {
	Load() ([]byte, error) // nil, nil when nothing is stored
	Save([]byte) error
}

// FileStore stores the state in one file, replaced atomically (a temporary file in the
// same folder, synced, then renamed over it), mode 0600.
type FileStore string

func (f FileStore) Load() ([]byte, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

func (f FileStore) Save(b []byte) error { return writeFileAtomic(string(f), b) }

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// state is what the store holds.
type state struct {
	Key        string `json:"key"`
	InstanceID string `json:"instance_id,omitempty"`
	Token      string `json:"token,omitempty"`
	Lease      string `json:"lease,omitempty"`
	// NewestIAT is the newest lease iat seen (clock tamper detection).
	NewestIAT int64 `json:"newest_iat,omitempty"`
	// Verdict is the last refusal of the server (a revoked license stays refused offline).
	Refusal string `json:"refusal,omitempty"`
	// RefusedAt is when the server was last asked for a lease of the refused license
	// (Unix seconds, local clock): Check asks again at most once per MinFailingInterval.
	RefusedAt int64 `json:"refused_at,omitempty"`
	// SuspendedAt is when the server last answered 403 Tenant is suspended (Unix seconds,
	// local clock): a hosted server whose operator suspended the vendor's account. The
	// stored lease is kept; until another answer of the server, a lease past its exp, or
	// none, answers tenant_suspended, and the client sends nothing for a minute after it
	// (a restarted app too).
	SuspendedAt int64 `json:"suspended_at,omitempty"`
	// Keys are lease keys fetched after a rotation.
	Keys *JWKS `json:"lease_keys,omitempty"`
	// TenantID is the hosted tenant of the first lease that verified against keys fetched
	// for it: later key refreshes ask for that tenant's set only.
	TenantID string `json:"tenant_id,omitempty"`
}

func (c *Client) load() error {
	b, err := c.store.Load()
	if err != nil || b == nil {
		c.state = state{Key: c.cfg.Key}
		return err
	}
	var s state
	if json.Unmarshal(b, &s) != nil || s.Key != c.cfg.Key {
		s = state{Key: c.cfg.Key, NewestIAT: s.NewestIAT}
	}
	c.state = s
	if s.Keys != nil {
		c.keys = c.keys.merge(*s.Keys)
	}
	return nil
}

func (c *Client) saveLocked() error {
	b, _ := json.Marshal(c.state)
	return c.store.Save(b)
}

// Verdict is the answer of Check.
type Verdict struct {
	Licensed bool
	// Reason: "licensed", or why not: not_activated, license_not_found,
	// license_not_active (revoked), license_expired, seat_lapsed, machine_mismatch
	// (fingerprint refused by the server or a lease of another machine), expired (the
	// lease ran out and the server could not be reached), unreachable (no lease yet and no
	// server), invalid_lease, lease_keys_unavailable (the lease's key is not pinned and
	// GET /v1/lease-keys could not be fetched), wrong_product, wrong_license,
	// clock_tampered, components_required, tenant_suspended (a hosted server answered 403
	// Tenant is suspended, and the lease ran out or there is none; the lease is kept and
	// answers licensed until its exp).
	Reason string
	// Offline: answered from the stored lease without reaching the server.
	Offline      bool
	Tier         string
	Entitlements []string
	Limits       map[string]float64
	Floating     bool
	// LeaseExpiresAt and RenewAfter are the lease's exp and renew_after on this machine's
	// clock (Config.Now): the server's times less the lease's ClockOffset, so an app that
	// schedules its own checks by them keeps to the server's timing whatever the clock.
	LeaseExpiresAt   time.Time
	RenewAfter       time.Time
	LicenseExpiresAt *time.Time
}

func verdictOf(claims *LeaseClaims, offline bool) Verdict {
	offset := claims.ClockOffset()
	v := Verdict{Licensed: true, Reason: "licensed", Offline: offline, Tier: claims.Tier, Entitlements: claims.Entitlements,
		Limits: claims.Limits, Floating: claims.Floating, LeaseExpiresAt: time.Unix(claims.ExpiresAt, 0).Add(-offset),
		RenewAfter: time.Unix(claims.RenewAfter, 0).Add(-offset)}
	if claims.LicenseExpiresAt != nil {
		t := time.Unix(*claims.LicenseExpiresAt, 0)
		v.LicenseExpiresAt = &t
	}
	return v
}

// Check answers whether the app is licensed, offline first: a valid stored lease answers
// at once (and, once past its renew_after, is renewed in the background); without one,
// or with one that ran out, it asks the server for a lease. While the server cannot be
// reached a stored lease is good until its exp; a refusal of the server (revoked,
// expired, seat lapsed) stands from the first renewal that reaches it, and out of reach;
// a refused license is asked about again at most once per MinFailingInterval (the checks
// in between answer the refusal with no request), so one reinstated or extended is
// licensed at the first check online a minute after the last ask. A hosted server that
// answers 403 Tenant is suspended (its operator suspended the vendor's account) is a
// server that cannot be reached for the license: the lease is kept and good until its
// exp, then tenant_suspended, and the server is asked at most once a minute.
func (c *Client) Check(ctx context.Context) Verdict {
	c.mu.Lock()
	st := c.state
	ask := st.Refusal != "" && refusalDue(c.cfg.Now(), st.RefusedAt)
	if ask {
		// This check is the ask of this minute: checks running beside it answer the refusal.
		c.state.RefusedAt = c.cfg.Now().Unix()
		_ = c.saveLocked()
	}
	c.mu.Unlock()
	if st.Token == "" {
		return Verdict{Reason: "not_activated"}
	}
	if st.Refusal != "" {
		// The server refused the license at a renewal (revoked, deleted, past its expiry):
		// it is asked again once a minute, so a license reinstated or extended is licensed
		// then; in between, and out of reach, the refusal stands.
		if !ask {
			return Verdict{Reason: st.Refusal}
		}
		return c.Renew(ctx)
	}
	if st.Lease != "" {
		claims, err := c.verifyLease(ctx, st.Lease, st.NewestIAT)
		if err == nil {
			v := verdictOf(claims, true)
			if !c.cfg.Now().Before(v.RenewAfter) {
				c.renewInBackground()
			}
			return v
		}
		var e *Error
		movedBack := errors.As(err, &e) && e.Code == "clock_tampered" && claims != nil && !clockBehind(c.cfg.Now(), claims.IssuedAt, st.NewestIAT)
		if e != nil && e.Code != "expired" && !movedBack {
			return Verdict{Reason: e.Code}
		}
		// The lease ran out, or the clock moved back since it was asked for but is not
		// behind the server's: a lease asked for now measures the clock anew (out of
		// reach, the stored lease answers as before).
	}
	return c.Renew(ctx)
}

// Renew asks the server for a new lease now (POST /v1/leases) and returns the verdict.
func (c *Client) Renew(ctx context.Context) Verdict {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st.Token == "" {
		return Verdict{Reason: "not_activated"}
	}
	var out struct {
		Lease string `json:"lease"`
	}
	asked := c.cfg.Now()
	err := c.do(ctx, "POST", "/v1/leases", map[string]any{"key": c.cfg.Key, "token": st.Token, "components": c.cfg.Components,
		"nonce": clockNonce(asked)}, &out)
	if err != nil {
		var e *Error
		errors.As(err, &e)
		if e == nil || e.Status == 0 || e.Status == 429 || e.Status >= 500 || e.Code == "tenant_suspended" {
			// No answer for the license: the server failed, or it refuses the vendor's
			// account (a suspension is not the customer's license). The stored lease and
			// token are kept, as out of reach; the suspension, when the server said so, is
			// in the state now.
			c.mu.Lock()
			st = c.state
			c.mu.Unlock()
			return c.offlineVerdict(ctx, st)
		}
		reason := map[string]string{"seat_lease_expired": "seat_lapsed", "invalid_activation_token": "not_activated",
			"fingerprint_mismatch": "machine_mismatch"}[e.Code]
		if e.Code == "invalid_activation_token" && leaseFloats(st.Lease) {
			// The floating seat this client held is gone: released by another copy of the
			// app sharing its store and instance id, or in the portal. For the app it is a
			// lapse like any other: reported, and activate takes a seat again.
			reason = "seat_lapsed"
		}
		if reason == "" {
			reason = e.Code
		}
		v := Verdict{Reason: reason}
		c.mu.Lock()
		c.state.Lease, c.state.Refusal, c.state.RefusedAt = "", "", 0
		switch e.Code {
		case "license_not_found", "license_not_active", "license_expired":
			c.state.Refusal, c.state.RefusedAt = reason, asked.Unix()
		case "seat_lease_expired", "invalid_activation_token":
			c.state.Token = ""
		}
		_ = c.saveLocked()
		c.mu.Unlock()
		c.log.Info("keyhouse: not licensed", "reason", reason)
		if reason == "seat_lapsed" {
			c.reportLapse(st.Lease, v)
		}
		return v
	}
	claims, verr := c.verifyLease(ctx, out.Lease, st.NewestIAT)
	if verr != nil {
		var e *Error
		errors.As(verr, &e)
		if e.Code == "clock_tampered" && claims != nil {
			// A genuine lease, refused only because this clock is behind the server's: kept,
			// so later checks answer clock_tampered from it without asking again, and
			// licensed once the clock is right.
			c.mu.Lock()
			c.state.Lease = out.Lease
			c.state.NewestIAT = max(c.state.NewestIAT, claims.IssuedAt)
			c.state.Refusal, c.state.RefusedAt = "", 0
			_ = c.saveLocked()
			c.mu.Unlock()
		}
		return Verdict{Reason: e.Code}
	}
	c.mu.Lock()
	c.state.Lease = out.Lease
	c.state.NewestIAT = max(c.state.NewestIAT, claims.IssuedAt)
	c.state.Refusal, c.state.RefusedAt = "", 0
	_ = c.saveLocked()
	c.mu.Unlock()
	return verdictOf(claims, false)
}

// refusalDue: a stored refusal last asked about at refusedAt (Unix seconds) is asked about
// again now, MinFailingInterval later, or at once when the clock moved back below it (a
// refusal stored under a clock that ran ahead would otherwise stand until it is reached).
func refusalDue(now time.Time, refusedAt int64) bool {
	since := now.Unix() - refusedAt
	return since < 0 || since >= int64(MinFailingInterval/time.Second)
}

// offlineVerdict answers from the stored lease while the server cannot be reached, or
// answers that the vendor's account is suspended.
func (c *Client) offlineVerdict(ctx context.Context, st state) Verdict {
	if st.Refusal != "" {
		// The server's last answer was a refusal: it stands until the server says otherwise.
		return Verdict{Reason: st.Refusal}
	}
	// The server's last answer was a suspension of the vendor's account: what ends the app's
	// license is that, not the server being out of reach.
	suspended := st.SuspendedAt != 0
	if st.Lease == "" {
		if suspended {
			return Verdict{Reason: "tenant_suspended"}
		}
		return Verdict{Reason: "unreachable"}
	}
	claims, err := c.verifyLease(ctx, st.Lease, st.NewestIAT)
	if err != nil {
		var e *Error
		errors.As(err, &e)
		if e.Code == "expired" && claims != nil && claims.Floating {
			// A floating seat lives only while leased: the server let it go when this lease
			// ran out, and says seat_lapsed once it is reached again.
			v := Verdict{Reason: "seat_lapsed"}
			c.reportLapse(st.Lease, v)
			return v
		}
		if e.Code == "expired" && suspended {
			return Verdict{Reason: "tenant_suspended"}
		}
		return Verdict{Reason: e.Code}
	}
	return verdictOf(claims, true)
}

// reportLapse calls OnLapsed once per lapse: the lapse of one lease is reported by the
// first check that finds it, offline or from the server, and not by the checks after it.
func (c *Client) reportLapse(lease string, v Verdict) {
	c.mu.Lock()
	if lease != "" && c.lapseReported == lease {
		c.mu.Unlock()
		return
	}
	c.lapseReported = lease
	c.mu.Unlock()
	if c.cfg.OnLapsed != nil {
		c.cfg.OnLapsed(v)
	}
}

// verifyLease checks a lease against the pinned keys, fetching the key set once more
// when the lease names a kid the client does not know (a rotation, or no keys pinned).
func (c *Client) verifyLease(ctx context.Context, lease string, newestIAT int64) (*LeaseClaims, error) {
	check := LeaseCheck{ProductID: c.cfg.ProductID, LicenseKey: c.cfg.Key, Now: c.cfg.Now(), NewestIssuedAt: newestIAT, Components: c.cfg.Components}
	c.mu.Lock()
	keys, learned := c.keys, c.state.TenantID
	c.mu.Unlock()
	claims, err := VerifyLease(lease, keys, check)
	if !errors.Is(err, errUnknownKid) || c.cfg.NoKeyRefresh {
		return claims, err
	}
	// Hosted, the key set is the tenant's: pinned (Config.TenantID), else the one a lease
	// verified for before, else the one this lease names. The named tenant is not yet
	// trusted: it only chooses which of this server's key sets is fetched, the lease must
	// still verify against one of that tenant's keys (so this server signed it for that
	// tenant), and its product and license are checked after that; another tenant cannot
	// have a lease signed for this app's product, which belongs to one tenant.
	tenant := c.cfg.TenantID
	if tenant == "" {
		tenant = learned
	}
	if tenant == "" {
		tenant = unverifiedTenant(lease)
	}
	path := "/v1/lease-keys"
	if tenant != "" {
		path += "?tenant_id=" + url.QueryEscape(tenant)
	}
	var fetched JWKS
	if ferr := c.do(ctx, "GET", path, nil, &fetched); ferr != nil {
		return nil, &Error{Code: "lease_keys_unavailable", Message: "the lease's signing key is not pinned and the key set could not be fetched: " + ferr.Error(), err: ferr}
	}
	c.mu.Lock()
	c.keys = c.keys.merge(fetched)
	c.state.Keys = &fetched
	keys = c.keys
	_ = c.saveLocked()
	c.mu.Unlock()
	claims, err = VerifyLease(lease, keys, check)
	if err == nil && c.cfg.TenantID == "" && learned == "" && tenant != "" {
		c.mu.Lock()
		c.state.TenantID = tenant
		_ = c.saveLocked()
		c.mu.Unlock()
	}
	return claims, err
}

// unverifiedTenant reads the tenant_id claim of a lease whose signature is not checked
// yet ("" if there is none).
func unverifiedTenant(lease string) string { return unverifiedClaims(lease).TenantID }

// leaseFloats: the stored lease (verified when it was stored) is of a floating seat.
func leaseFloats(lease string) bool { return unverifiedClaims(lease).Floating }

// unverifiedClaims reads the claims of a lease without checking its signature (zero
// claims if they cannot be read).
func unverifiedClaims(lease string) LeaseClaims {
	var claims LeaseClaims
	parts := strings.Split(lease, ".")
	if len(parts) != 3 {
		return claims
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims
	}
	_ = json.Unmarshal(payload, &claims)
	return claims
}

func (c *Client) renewInBackground() {
	c.mu.Lock()
	if c.renewing {
		c.mu.Unlock()
		return
	}
	c.renewing = true
	done := make(chan struct{})
	c.renewDone = done
	c.mu.Unlock()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		defer cancel()
		c.Renew(ctx)
		c.mu.Lock()
		c.renewing = false
		c.mu.Unlock()
	}()
}

// WaitRenewal waits for a background renewal started by Check, if one runs.
func (c *Client) WaitRenewal() {
	c.mu.Lock()
	done := c.renewDone
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Heartbeat keeps a floating seat leased: it renews at each lease's renew_after until
// ctx ends or Close is called, and reports a lapsed seat through Config.OnLapsed. Run it
// in its own goroutine.
func (c *Client) Heartbeat(ctx context.Context) {
	for {
		v := c.Check(ctx)
		if v.Licensed && !c.cfg.Now().Before(v.RenewAfter) {
			// Check renews a lease past its renew_after in the background, one renewal at a
			// time: the lease it brings sets the next wait.
			c.WaitRenewal()
			v = c.Check(ctx)
		}
		wait := time.Minute
		if v.Licensed {
			wait = max(v.RenewAfter.Sub(c.cfg.Now()), time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.stop:
			return
		case <-c.after(wait):
		}
	}
}

// Close stops the heartbeat and, for a floating seat, releases it at once
// (deactivate-license) so another machine can take it.
func (c *Client) Close(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.WaitRenewal()
	c.mu.Lock()
	lease, token := c.state.Lease, c.state.Token
	c.mu.Unlock()
	if token == "" || lease == "" {
		return nil
	}
	// The stored lease was verified when it was stored; an expired one still names the seat.
	claims, _ := VerifyLease(lease, c.keys, LeaseCheck{ProductID: c.cfg.ProductID, LicenseKey: c.cfg.Key, Now: c.cfg.Now(), Components: c.cfg.Components})
	if claims == nil || !claims.Floating {
		return nil
	}
	_, derr := c.Deactivate(ctx)
	return derr
}
