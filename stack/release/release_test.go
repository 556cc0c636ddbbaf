package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

	// The binary archive holds the operator's tools too: keyhousectl, which docs/import.md
	// tells operators to run, starts from it.
	archived := archiveFiles(t, a.Archive, filepath.Join(out, "archive"))
	for _, want := range []string{"gateway", "licensing", "events", "keyhousectl", "LICENSE", "NOTICE"} {
		if !slices.Contains(archived, want) {
			t.Errorf("%s lacks %s: it holds %v", filepath.Base(a.Archive), want, archived)
		}
	}
	if got, _ := exec.Command(filepath.Join(out, "archive", "keyhousectl")).CombinedOutput(); !strings.Contains(string(got), "usage: keyhousectl import") {
		t.Errorf("the archive's keyhousectl: %q", got)
	}

	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil || !strings.Contains(string(sums), filepath.Base(a.Image)) || !strings.Contains(string(sums), filepath.Base(a.Archive)) {
		t.Fatalf("SHA256SUMS: %q %v", sums, err)
	}
}

// archiveFiles unpacks the tar.gz at path into dir and lists the names it holds.
func archiveFiles(t *testing.T, path, dir string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	unpackTar(t, tar.NewReader(gz), dir, func(name string) { names = append(names, name) })
	return names
}

// The image declares every port its processes listen on by default: the gateway's, each
// service's gRPC port (9101 … 9106) and each one's metrics port (9080, 10101 … 10106).
func TestImageExposesEveryProcessPort(t *testing.T) {
	dir := t.TempDir()
	var bins []string
	for _, pkg := range stack.Packages() {
		bin := filepath.Join(dir, filepath.Base(pkg))
		if err := os.WriteFile(bin, []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, bin)
	}
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(bins, []byte("certs"), root, "1.2.3", runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for port := range cfg.Config.ExposedPorts {
		got = append(got, port)
	}
	slices.Sort(got)
	want := []string{"10101/tcp", "10102/tcp", "10103/tcp", "10104/tcp", "10105/tcp", "10106/tcp", "8080/tcp", "9080/tcp",
		"9101/tcp", "9102/tcp", "9103/tcp", "9104/tcp", "9105/tcp", "9106/tcp"}
	if !slices.Equal(got, want) {
		t.Fatalf("ExposedPorts %v, want %v", got, want)
	}
}

// What make release prints names the image tag to install, which for an untagged build
// is not the version: a tag cannot hold SemVer's "+".
func TestReportNamesTheImageTagOfAnUntaggedBuild(t *testing.T) {
	const version = "0.0.0-dev+bf04bdf"
	tag, err := name.NewTag(Repository + ":" + ImageTag(version))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	Report(&out, []Artifact{{Platform: "linux/amd64", Archive: "a.tar.gz", Image: "a.image.tar", Ref: tag.String(), Tag: tag.TagStr()}}, "rel")
	if want := "image tag: 0.0.0-dev_bf04bdf (helm: --set image.tag=0.0.0-dev_bf04bdf; docker compose: KEYHOUSE_VERSION=0.0.0-dev_bf04bdf)"; !strings.Contains(out.String(), want) {
		t.Fatalf("make release printed\n%s\nwant a line %q", out.String(), want)
	}
}

// unpack writes a flattened image file system (regular files and folders) under dir.
func unpack(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()
	defer rc.Close()
	unpackTar(t, tar.NewReader(rc), dir, func(string) {})
}

// unpackTar writes the regular files and folders of tr under dir, telling seen each name.
func unpackTar(t *testing.T, tr *tar.Reader, dir string, seen func(name string)) {
	t.Helper()
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		seen(h.Name)
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
