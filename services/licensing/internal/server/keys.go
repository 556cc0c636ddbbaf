package server

import "github.com/keyhouse/keyhouse/pkg/license"

// The key format lives in pkg/license: the gateway's per-license-key rate limit must read
// a typed key exactly as licensing does.
func newLicenseKey() string { return license.NewKey() }

func canonicalKey(input string) string { return license.CanonicalKey(input) }
