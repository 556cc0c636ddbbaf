// Package release builds what a Keyhouse release ships, with no container engine: static
// binaries for each platform (one tar.gz per platform) and one OCI image per platform
// holding every process, written as a tarball that `docker load` and `podman load` accept
// and that a registry push (crane push, the release workflow) takes as it is.
//
// One image holds every process, as the Dockerfile's does: the Helm chart and the compose
// file run it with the process's name as the command (`licensing serve`, `gateway`), so
// one tag names one consistent set of binaries and a node pulls it once.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/stack"
)

// Repository is the image's name in the public registry; the Helm chart and
// docker-compose.yml use the same name, with the version as the tag.
const Repository = "ghcr.io/keyhouse/keyhouse"

// NonRoot is the uid and gid the image runs as (the distroless convention).
const NonRoot = 65532

// CABundle is where the image keeps the CA certificates (Stripe, SMTP over TLS, OTLP).
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// Options says what to build.
type Options struct {
	// Version is the SemVer the binaries report and the image's tag (no leading v).
	Version string
	// OutDir receives the archives, the image tarballs and SHA256SUMS.
	OutDir string
	// Platforms are GOOS/GOARCH pairs; only linux is supported (the image's OS).
	Platforms []string
	// CACerts is the CA bundle copied into the image (Debian's ca-certificates package).
	CACerts string
	// Repository overrides the image name (default Repository).
	Repository string
}

// Artifact is what one platform produced.
type Artifact struct {
	Platform string
	// Archive is the tar.gz of the binaries (the processes and the operator's tools),
	// LICENSE and NOTICE.
	Archive string
	// Image is the image tarball; Ref its name and tag inside, Tag the tag alone (what the
	// Helm chart's image.tag and compose's KEYHOUSE_VERSION take).
	Image string
	Ref   string
	Tag   string
	// Binaries are the built executables of the processes (in OutDir/bin/<os>_<arch>/),
	// the image's contents; Tools the operator's tools beside them, in the archive only.
	Binaries []string
	Tools    []string
}

// ImageTag is the image tag of version: the version itself, but for a "+" (SemVer's build
// metadata, as in an untagged build's 0.0.0-dev+<commit>), which a tag cannot hold and
// becomes "_".
func ImageTag(version string) string { return strings.ReplaceAll(version, "+", "_") }

// Report writes what Build produced, for an operator to act on: where each file is, and
// the image tag to give the chart and compose, which differs from the version when the
// version has build metadata.
func Report(w io.Writer, arts []Artifact, outDir string) {
	for _, a := range arts {
		fmt.Fprintf(w, "%s\n  binaries: %s\n  image:    %s (%s; docker load -i %s)\n", a.Platform, a.Archive, a.Image, a.Ref, a.Image)
	}
	fmt.Fprintf(w, "checksums: %s/SHA256SUMS\n", outDir)
	if len(arts) > 0 {
		tag := arts[0].Tag
		fmt.Fprintf(w, "image tag: %s (helm: --set image.tag=%s; docker compose: KEYHOUSE_VERSION=%s)\n", tag, tag, tag)
	}
}

// Build builds every platform's binaries, archive and image, then SHA256SUMS.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if o.Version == "" || strings.HasPrefix(o.Version, "v") {
		return nil, fmt.Errorf("release: version %q: want SemVer without a leading v", o.Version)
	}
	if o.Repository == "" {
		o.Repository = Repository
	}
	ref, err := name.NewTag(o.Repository + ":" + ImageTag(o.Version))
	if err != nil {
		return nil, fmt.Errorf("release: image name: %w", err)
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("release: CA certificates for the image (Debian: apt-get install ca-certificates): %w", err)
	}
	root, err := stack.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []Artifact
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" || goarch == "" {
			return nil, fmt.Errorf("release: platform %q: want linux/<arch>", p)
		}
		binDir := filepath.Join(o.OutDir, "bin", goos+"_"+goarch)
		bins, err := compile(ctx, root, binDir, goos, goarch, o.Version, stack.Packages())
		if err != nil {
			return nil, err
		}
		tools, err := compile(ctx, root, binDir, goos, goarch, o.Version, stack.Tools())
		if err != nil {
			return nil, err
		}
		a := Artifact{Platform: p, Binaries: bins, Tools: tools, Ref: ref.String(), Tag: ref.TagStr()}
		a.Archive = filepath.Join(o.OutDir, fmt.Sprintf("keyhouse_%s_%s_%s.tar.gz", o.Version, goos, goarch))
		if err := writeArchive(a.Archive, root, append(slices.Clone(bins), tools...)); err != nil {
			return nil, err
		}
		img, err := Image(bins, certs, root, o.Version, goarch)
		if err != nil {
			return nil, err
		}
		a.Image = filepath.Join(o.OutDir, fmt.Sprintf("keyhouse_%s_%s_%s.image.tar", o.Version, goos, goarch))
		if err := tarball.WriteToFile(a.Image, ref, img); err != nil {
			return nil, fmt.Errorf("release: write %s: %w", a.Image, err)
		}
		out = append(out, a)
	}
	return out, writeSums(o.OutDir, out)
}

// compile builds main packages pkgs for one platform: static (no cgo), reproducible
// paths (-trimpath), the version stamped in.
func compile(ctx context.Context, root, binDir, goos, goarch, version string, pkgs []string) ([]string, error) {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build", "-trimpath", "-ldflags",
		"-s -w -X github.com/keyhouse/keyhouse/pkg/buildinfo.version=" + version,
		"-o", binDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("release: go build %s/%s: %v\n%s", goos, goarch, err, out)
	}
	var bins []string
	for _, pkg := range pkgs {
		bins = append(bins, filepath.Join(binDir, filepath.Base(pkg)))
	}
	return bins, nil
}

// Image is the OCI image of one platform: every binary in /usr/local/bin, the CA bundle,
// a passwd entry for the non-root user it runs as, a writable /tmp; no shell, no package
// manager. The command is the process to run (default: the gateway).
func Image(bins []string, caCerts []byte, root, version, goarch string) (v1.Image, error) {
	layer, err := imageLayer(bins, caCerts, root)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", goarch
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()} // reproducible: the same inputs, the same digest
	cfg.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cfg.Config.WorkingDir = "/home/nonroot"
	cfg.Config.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CABundle}
	cfg.Config.Cmd = []string{"gateway"}
	cfg.Config.ExposedPorts = map[string]struct{}{}
	for _, port := range ExposedPorts() {
		cfg.Config.ExposedPorts[fmt.Sprintf("%d/tcp", port)] = struct{}{}
	}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "keyhouse",
		"org.opencontainers.image.description": "Keyhouse license server: gateway and services",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.source":      "https://github.com/keyhouse/keyhouse",
	}
	return mutate.ConfigFile(img, cfg)
}

// ExposedPorts are the ports the image's processes listen on by default: the gateway's
// HTTP port, each service's gRPC port, and each one's metrics port (its port + 1000,
// pkg/config's MetricsAddr).
func ExposedPorts() []int {
	ports := []int{gatewayPort, gatewayPort + 1000}
	for _, addr := range []string{config.DefaultLicensingAddr, config.DefaultActivationsAddr, config.DefaultReleasesAddr,
		config.DefaultBillingAddr, config.DefaultStorefrontAddr, config.DefaultEventsAddr} {
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		ports = append(ports, p, p+1000)
	}
	slices.Sort(ports)
	return ports
}

// gatewayPort is the gateway's default PORT.
const gatewayPort = 8080

type file struct {
	path string
	mode int64
	uid  int
	data []byte
	dir  bool
}

func imageLayer(bins []string, caCerts []byte, root string) (v1.Layer, error) {
	files := []file{
		{path: "etc/", mode: 0o755, dir: true},
		{path: "etc/ssl/", mode: 0o755, dir: true},
		{path: "etc/ssl/certs/", mode: 0o755, dir: true},
		{path: strings.TrimPrefix(CABundle, "/"), mode: 0o644, data: caCerts},
		{path: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))},
		{path: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot))},
		{path: "home/", mode: 0o755, dir: true},
		{path: "home/nonroot/", mode: 0o700, uid: NonRoot, dir: true},
		{path: "tmp/", mode: 0o1777, dir: true},
		{path: "usr/", mode: 0o755, dir: true},
		{path: "usr/local/", mode: 0o755, dir: true},
		{path: "usr/local/bin/", mode: 0o755, dir: true},
		{path: "usr/share/", mode: 0o755, dir: true},
		{path: "usr/share/doc/", mode: 0o755, dir: true},
		{path: "usr/share/doc/keyhouse/", mode: 0o755, dir: true},
	}
	for _, doc := range []string{"LICENSE", "NOTICE"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			return nil, err
		}
		files = append(files, file{path: "usr/share/doc/keyhouse/" + doc, mode: 0o644, data: data})
	}
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			return nil, err
		}
		files = append(files, file{path: "usr/local/bin/" + filepath.Base(b), mode: 0o755, data: data})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeArchive writes the binaries with LICENSE and NOTICE into a tar.gz.
func writeArchive(path, root string, bins []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	add := func(src, name string, mode int64) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	var errs []error
	for _, doc := range []string{"LICENSE", "NOTICE", "README.md", "CHANGELOG.md"} {
		errs = append(errs, add(filepath.Join(root, doc), doc, 0o644))
	}
	for _, b := range bins {
		errs = append(errs, add(b, filepath.Base(b), 0o755))
	}
	errs = append(errs, tw.Close(), gz.Close(), f.Close())
	return errors.Join(errs...)
}

// writeSums writes SHA256SUMS for every archive and image, in the format sha256sum -c reads.
func writeSums(dir string, arts []Artifact) error {
	var lines []string
	for _, a := range arts {
		for _, p := range []string{a.Archive, a.Image} {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			lines = append(lines, hex.EncodeToString(sum[:])+"  "+filepath.Base(p))
		}
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
