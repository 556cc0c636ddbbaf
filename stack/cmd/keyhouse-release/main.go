// Command keyhouse-release builds a release with no container engine (`make release`):
// static binaries and one OCI image per platform, as tarballs, with SHA256SUMS.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/keyhouse/keyhouse/stack/release"
)

func main() {
	version := flag.String("version", "", "SemVer the binaries report and the image's tag (make print-version)")
	out := flag.String("out", ".keyhouse/release", "folder for the archives, image tarballs and SHA256SUMS")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated GOOS/GOARCH pairs")
	ca := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image")
	repo := flag.String("repository", release.Repository, "the image's name")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	arts, err := release.Build(ctx, release.Options{
		Version: *version, OutDir: *out, Platforms: strings.Split(*platforms, ","), CACerts: *ca, Repository: *repo,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	release.Report(os.Stdout, arts, *out)
}
