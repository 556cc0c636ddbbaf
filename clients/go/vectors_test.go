package keyhouse

import (
	"crypto/rsa"
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
	Exports   []exportVector   `json:"exports"`
	Manifests []manifestVector `json:"manifests"`
	Rotation  struct {
		NextRSAPEM string           `json:"rsa_next_public_key_pem"`
		Exports    []exportVector   `json:"exports"`
		Manifests  []manifestVector `json:"manifests"`
	} `json:"rotation"`
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

type exportVector struct {
	Name, JSON, Key, Tier, Error string
	OK                           bool
}

type manifestVector struct {
	Name    string
	Request UpdateRequest
	Release Release
	MaxAge  int64 `json:"max_age"`
	OK      bool
	Error   string
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

// An app that ships the current and the next key (a planned rotation) verifies what either
// signed, the same as with one key; one that ships only the current key refuses what the
// next key signed (after the server promoted it).
func TestVectorsRotation(t *testing.T) {
	v := loadVectors(t)
	current, err := ParsePublicKey(v.RSAPEM)
	if err != nil {
		t.Fatal(err)
	}
	next, err := ParsePublicKey(v.Rotation.NextRSAPEM)
	if err != nil || len(v.Rotation.Exports) == 0 || len(v.Rotation.Manifests) == 0 {
		t.Fatalf("rotation vectors: %v", err)
	}
	both := []*rsa.PublicKey{current, next}
	at := time.Unix(v.Now, 0)
	checkExport := func(t *testing.T, e exportVector, pubs []*rsa.PublicKey, wantOK bool, wantErr string) {
		t.Helper()
		lic, err := VerifyOfflineExportAnyKey([]byte(e.JSON), pubs, at)
		if wantOK && (err != nil || lic.Key != e.Key || lic.Tier != e.Tier) || !wantOK && codeOf(err) != wantErr {
			t.Fatalf("%v %+v, want ok %v / %q", err, lic, wantOK, wantErr)
		}
	}
	checkManifest := func(t *testing.T, m manifestVector, pubs []*rsa.PublicKey, wantOK bool, wantErr string) {
		t.Helper()
		err := VerifyManifestAnyKey(&m.Release, m.Request, pubs, at, time.Duration(m.MaxAge)*time.Second)
		if wantOK && err != nil || !wantOK && codeOf(err) != wantErr {
			t.Fatalf("error %v, want ok %v / %q", err, wantOK, wantErr)
		}
	}
	for _, e := range v.Exports {
		t.Run("both keys/"+e.Name, func(t *testing.T) { checkExport(t, e, both, e.OK, e.Error) })
	}
	for _, m := range v.Manifests {
		t.Run("both keys/"+m.Name, func(t *testing.T) { checkManifest(t, m, both, m.OK, m.Error) })
	}
	for _, e := range v.Rotation.Exports {
		t.Run("rotation/"+e.Name, func(t *testing.T) {
			checkExport(t, e, both, e.OK, e.Error)
			checkExport(t, e, []*rsa.PublicKey{next, current}, e.OK, e.Error)
			checkExport(t, e, []*rsa.PublicKey{current}, false, "invalid_signature")
		})
	}
	for _, m := range v.Rotation.Manifests {
		t.Run("rotation/"+m.Name, func(t *testing.T) {
			checkManifest(t, m, both, m.OK, m.Error)
			checkManifest(t, m, []*rsa.PublicKey{next, current}, m.OK, m.Error)
			checkManifest(t, m, []*rsa.PublicKey{current}, false, "invalid_signature")
		})
	}
}
