// Package buildinfo reports what this binary is: its version and a fingerprint of the build.
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// version is set at link time: -ldflags "-X github.com/keyhouse/keyhouse/pkg/buildinfo.version=…".
var version = ""

// Version is the server's own version.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "0.0.0-dev"
}

var fingerprint = sync.OnceValue(func() string {
	h := sha256.New()
	if exe, err := os.Executable(); err == nil {
		if f, err := os.Open(exe); err == nil {
			_, _ = io.Copy(h, f)
			_ = f.Close()
			return hex.EncodeToString(h.Sum(nil))[:16]
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		_, _ = io.WriteString(h, bi.String())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
})

// Fingerprint identifies the exact build: the first 16 hex digits of the SHA-256 of the
// running executable, so two binaries with the same version but different bytes differ.
func Fingerprint() string { return fingerprint() }
