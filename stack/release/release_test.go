package release

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The image a release ships is loaded from its tarball as `docker load` would, its file
// system unpacked, and its binaries run: each reports the release's version, and the
// whole stack starts from them on a real Postgres and answers. A broken image (a binary
// that needs libc, a missing CA bundle, a wrong user) fails here, not on a user's cluster.
func TestReleaseImageLoadsUnpacksAndRuns(t *testing.T) {
	testkit.Integration(t)
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("the image ships the build machine's CA bundle (make deps installs ca-certificates): %v", err)
	}
	out := filepath.Join(testkit.Dir(t), "release")
	const version = "1.2.3-test"
	ctx := context.Background()
	arts, err := Build(ctx, Options{Version: version, OutDir: out, Platforms: []string{"linux/" + runtime.GOARCH}, CACerts: ca})
	if err != nil {
		t.Fatal(err)
	}
	a := arts[0]
	tag, err := name.NewTag(Repository + ":" + version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(a.Image, &tag)
	if err != nil {
		t.Fatalf("load %s as %s: %v", a.Image, tag, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || cfg.Architecture != runtime.GOARCH || cfg.OS != "linux" ||
		cfg.Config.Labels["org.opencontainers.image.version"] != version || cfg.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Fatalf("image config: user %q, %s/%s, labels %v", cfg.Config.User, cfg.OS, cfg.Architecture, cfg.Config.Labels)
	}

	root := filepath.Join(out, "rootfs")
	unpack(t, mutate.Extract(img), root)
	for _, f := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/passwd", "usr/share/doc/keyhouse/LICENSE"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the image lacks /%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "bin/sh")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image has a shell: %v", err)
	}
	binDir := filepath.Join(root, "usr/local/bin")
	for _, pkg := range stack.Packages() {
		bin := filepath.Join(binDir, filepath.Base(pkg))
		got, err := exec.Command(bin, "--version").Output()
		if err != nil || !strings.HasPrefix(string(got), version+" ") {
			t.Fatalf("%s --version: %q %v", bin, got, err)
		}
	}

	// A real start from the image's binaries: migrations on a fresh database, every
	// service and the gateway, then GET / names the version.
	s, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(out, "stack"), BinDir: binDir, Env: map[string]string{
		"ADMIN_API_KEY": "release-test-admin-key-0123456789abcdef",
		"DATABASE_URL":  testkit.DatabaseURL(t, testkit.Empty),
		"REDIS_URL":     testkit.RedisURL(t),
	}})
	if err != nil {
		t.Fatalf("start the stack from the image's binaries: %v", err)
	}
	defer s.Stop()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var health struct {
		Version string `json:"version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil || resp.StatusCode != 200 || health.Version != version {
		t.Fatalf("GET / from the image's gateway: %d %+v %v", resp.StatusCode, health, err)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), filepath.Base(a.Image)) || !strings.Contains(string(sums), filepath.Base(a.Archive)) {
		t.Fatalf("SHA256SUMS: %q %v", sums, err)
	}
}

// unpack writes a flattened image file system (regular files and folders) under dir.
func unpack(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
