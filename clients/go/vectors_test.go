package keyhouse

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

// The shared vectors (clients/testdata/vectors.json) are the suite every SDK passes.
type vectors struct {
	Now        int64  `json:"now"`
	ProductID  string `json:"product_id"`
	LicenseKey string `json:"license_key"`
	RSAPEM     string `json:"rsa_public_key_pem"`
	LeaseKeys  map[string]JWKS
	Components struct {
		ProductID   string            `json:"product_id"`
		Raw         map[string]string `json:"raw"`
		Hashed      map[string]string `json:"hashed"`
		InstanceIDs []struct {
			Components map[string]string `json:"components"`
			InstanceID string            `json:"instance_id"`
		} `json:"instance_ids"`
	} `json:"components"`
	Exports []struct {
		Name, JSON, Key, Tier, Error string
		OK                           bool
	} `json:"exports"`
	Manifests []struct {
		Name    string
		Request UpdateRequest
		Release Release
		MaxAge  int64 `json:"max_age"`
		OK      bool
		Error   string
	} `json:"manifests"`
	Leases []struct {
		Name, Lease, Keys string
		Components        map[string]string
		NewestIATSeen     *int64 `json:"newest_iat_seen"`
		Verdict           string
	} `json:"leases"`
	Errors []struct {
		Status int
		Error  string
		Code   string
	} `json:"errors"`
}

func loadVectors(t *testing.T) *vectors {
	t.Helper()
	b, err := os.ReadFile("../testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		LeaseKeys map[string]JWKS `json:"lease_keys"`
	}
	_ = json.Unmarshal(b, &raw)
	v.LeaseKeys = raw.LeaseKeys
	return &v
}

func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func TestVectorsComponents(t *testing.T) {
	v := loadVectors(t)
	for name, raw := range v.Components.Raw {
		if got := HashComponent(v.Components.ProductID, raw); got != v.Components.Hashed[name] {
			t.Errorf("%s: %s, want %s", name, got, v.Components.Hashed[name])
		}
	}
	if HashComponent("another-product", "x") == HashComponent(v.ProductID, "x") {
		t.Error("the hash does not depend on the product")
	}
}

func TestVectorsInstanceIDs(t *testing.T) {
	v := loadVectors(t)
	if len(v.Components.InstanceIDs) == 0 {
		t.Fatal("no instance id vectors")
	}
	for _, c := range v.Components.InstanceIDs {
		if got := InstanceID(c.Components); got != c.InstanceID {
			t.Errorf("%v: %q, want %q", c.Components, got, c.InstanceID)
		}
	}
}

func TestVectorsOfflineExports(t *testing.T) {
	v := loadVectors(t)
	pub, err := ParsePublicKey(v.RSAPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range v.Exports {
		t.Run(e.Name, func(t *testing.T) {
			lic, err := VerifyOfflineExport([]byte(e.JSON), pub, time.Unix(v.Now, 0))
			if e.OK {
				if err != nil || lic.Key != e.Key || lic.Tier != e.Tier {
					t.Fatalf("%v %+v", err, lic)
				}
			} else if codeOf(err) != e.Error {
				t.Fatalf("error %q, want %s", codeOf(err), e.Error)
			}
		})
	}
}

func TestVectorsManifests(t *testing.T) {
	v := loadVectors(t)
	pub, _ := ParsePublicKey(v.RSAPEM)
	for _, m := range v.Manifests {
		t.Run(m.Name, func(t *testing.T) {
			err := VerifyManifest(&m.Release, m.Request, pub, time.Unix(v.Now, 0), time.Duration(m.MaxAge)*time.Second)
			if m.OK && err != nil || !m.OK && codeOf(err) != m.Error {
				t.Fatalf("error %v, want %q", err, m.Error)
			}
		})
	}
}

func TestVectorsLeases(t *testing.T) {
	v := loadVectors(t)
	for _, l := range v.Leases {
		t.Run(l.Name, func(t *testing.T) {
			c := LeaseCheck{ProductID: v.ProductID, LicenseKey: v.LicenseKey, Now: time.Unix(v.Now, 0), Components: l.Components}
			if l.NewestIATSeen != nil {
				c.NewestIssuedAt = *l.NewestIATSeen
			}
			_, err := VerifyLease(l.Lease, v.LeaseKeys[l.Keys], c)
			got := "licensed"
			if err != nil {
				got = codeOf(err)
			}
			if got != l.Verdict {
				t.Fatalf("verdict %s (%v), want %s", got, err, l.Verdict)
			}
		})
	}
}

func TestVectorsErrors(t *testing.T) {
	v := loadVectors(t)
	for _, e := range v.Errors {
		if got := codeFor(e.Status, e.Error); got != e.Code {
			t.Errorf("%d %q: %s, want %s", e.Status, e.Error, got, e.Code)
		}
		if !errors.Is(&Error{Status: e.Status, Code: codeFor(e.Status, e.Error), Message: e.Error}, code(e.Code)) {
			t.Errorf("errors.Is does not match %s", e.Code)
		}
	}
}
