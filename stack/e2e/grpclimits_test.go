package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// fourMiB is gRPC's default limit on a received message, which list pages the contract
// allows exceed.
const fourMiB = 4 << 20

// inParallel runs do(i) for i in [0, n) on 8 workers and fails on the first error.
func inParallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	jobs := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				if err := do(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Pages of list-licenses, list-releases and the event log larger than 4 MiB, of values
// the contract allows (4-byte characters up to each field's cap), answer 200 with every
// row; they were 429 with gRPC's "received message larger than max" as the error. The
// rows are written over gRPC, as an internal caller does, past the Management tier.
func TestListPagesOverFourMiBAnswerEveryRow(t *testing.T) {
	s := selfHosted(t)
	adm := admin(t, s)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.AdminKey)
	licConn, err := grpcx.Dial("licensing", s.Env("LICENSING_ADDR"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = licConn.Close() })
	relConn, err := grpcx.Dial("releases", s.Env("RELEASES_ADDR"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relConn.Close() })
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)

	// 800 licenses of about 5.6 KB (tier and product_id 200, issued_to 1,000 characters
	// of 4 bytes): a page of 4.5 MB, and as many license.issued events of the same size.
	const licenses = 800
	licProduct := strings.Repeat("🔑", 170) + product("big")
	lic := licensingv1.NewLicensingServiceClient(licConn)
	inParallel(t, licenses, func(i int) error {
		_, err := lic.IssueLicense(ctx, &licensingv1.IssueLicenseRequest{Tier: strings.Repeat("🏷", 200), ProductId: licProduct, IssuedTo: strings.Repeat("😀", 1000)})
		return err
	})
	// 120 releases of 10,000-character notes of 4 bytes: a page of 4.9 MB.
	const releases = 120
	relProduct := product("bigrel")
	rel := releasesv1.NewReleasesServiceClient(relConn)
	inParallel(t, releases, func(i int) error {
		_, err := rel.RegisterRelease(ctx, &releasesv1.RegisterReleaseRequest{ProductId: relProduct, Version: fmt.Sprintf("1.%d.0", i),
			ArtifactUrl: "https://example.com/a.tar.gz", ReleaseNotes: strings.Repeat("📝", 10000)})
		return err
	})

	page := adm.Get("/v1/list-licenses?limit=1000&product_id="+url.QueryEscape(licProduct)).Expect(t, http.StatusOK)
	var licPage struct {
		Licenses []struct {
			IssuedTo string `json:"issued_to"`
		} `json:"licenses"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal(page.Body, &licPage); err != nil {
		t.Fatal(err)
	}
	if len(licPage.Licenses) != licenses || licPage.Total != licenses || len(page.Body) < fourMiB {
		t.Fatalf("list-licenses: %d rows of %d (total %d) in %d bytes, want every row in over 4 MiB", len(licPage.Licenses), licenses, licPage.Total, len(page.Body))
	}
	if licPage.Licenses[0].IssuedTo != strings.Repeat("😀", 1000) {
		t.Fatalf("issued_to came back as %q…", licPage.Licenses[0].IssuedTo[:min(40, len(licPage.Licenses[0].IssuedTo))])
	}

	page = adm.Get("/v1/list-releases?limit=1000&product_id="+relProduct).Expect(t, http.StatusOK)
	var relPage struct {
		Releases []struct {
			ReleaseNotes string `json:"release_notes"`
		} `json:"releases"`
	}
	if err := json.Unmarshal(page.Body, &relPage); err != nil {
		t.Fatal(err)
	}
	if len(relPage.Releases) != releases || len(page.Body) < fourMiB || relPage.Releases[0].ReleaseNotes != strings.Repeat("📝", 10000) {
		t.Fatalf("list-releases: %d rows of %d in %d bytes, want every row whole in over 4 MiB", len(relPage.Releases), releases, len(page.Body))
	}

	// A direct caller whose client takes answers up to grpcx.MaxAnswerBytes (as
	// ARCHITECTURE.md tells it to) gets the same page.
	got, err := rel.ListReleases(ctx, &releasesv1.ListReleasesRequest{ProductId: relProduct, Limit: "1000"})
	if err != nil || len(got.GetReleases()) != releases || proto.Size(got) < fourMiB {
		t.Fatalf("ListReleases over gRPC: %d rows, %d bytes, %v", len(got.GetReleases()), proto.Size(got), err)
	}

	// The event log: the newest 1,000 license.issued events since the start hold the 800
	// of this test (the relay publishes them within moments; the wait is a bound, not a goal).
	deadline := time.Now().Add(time.Minute)
	for {
		page = adm.Get("/v1/events?type=license.issued&limit=1000&since="+since).Expect(t, http.StatusOK)
		var evPage struct {
			Events []struct {
				Data struct {
					ProductID string `json:"product_id"`
				} `json:"data"`
			} `json:"events"`
		}
		if err := json.Unmarshal(page.Body, &evPage); err != nil {
			t.Fatal(err)
		}
		ours := 0
		for _, e := range evPage.Events {
			if e.Data.ProductID == licProduct {
				ours++
			}
		}
		if ours == licenses && len(page.Body) >= fourMiB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events: %d of this test's %d license.issued events in a page of %d bytes", ours, licenses, len(page.Body))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// grpcCall makes one call over a bare HTTP/2 connection, with headers a gRPC library
// would not send (two authorization values, bytes that are not UTF-8), and returns the
// answer's grpc-status and grpc-message.
func grpcCall(t *testing.T, addr, method string, request proto.Message, headers ...[2]string) (code, message string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	_ = fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, h := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}}, headers...) {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	body, _ := proto.Marshal(request)
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%s: no answer: %v", method, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			for _, h := range f.Fields {
				switch h.Name {
				case "grpc-status":
					code = h.Value
				case "grpc-message":
					message = h.Value
				}
			}
			if f.StreamEnded() {
				return code, message
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%s: stream reset %v", method, f.ErrCode)
		}
	}
}

// A direct caller is refused as a REST client is: two authorization values (either
// order, either valid) are InvalidArgument "Authorization must be sent once" (the first
// one won); a credential that is not UTF-8 is Unauthenticated "Unauthorized" like any
// unknown one (it was Unavailable "Authentication service unavailable, retry"), in both
// modes.
func TestDirectCallsAreRefusedAsRESTRefusesTheirCredentials(t *testing.T) {
	const (
		getStats        = "/keyhouse.licensing.v1.LicensingService/GetStats"
		invalidArgument = "3"
		unauthenticated = "16"
	)
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			s := sharedStack(t, mode)
			addr := s.Env("LICENSING_ADDR")
			for _, pair := range [][2]string{{"Bearer wrong", "Bearer " + s.AdminKey}, {"Bearer " + s.AdminKey, "Bearer wrong"}} {
				code, msg := grpcCall(t, addr, getStats, &licensingv1.GetStatsRequest{}, [2]string{"authorization", pair[0]}, [2]string{"authorization", pair[1]})
				if code != invalidArgument || msg != "Authorization must be sent once" {
					t.Fatalf("two authorization values (%.12s…, %.12s…): %s %q, want InvalidArgument \"Authorization must be sent once\"", pair[0], pair[1], code, msg)
				}
			}
			code, msg := grpcCall(t, addr, getStats, &licensingv1.GetStatsRequest{}, [2]string{"authorization", "Bearer \xff\xfe"})
			if code != unauthenticated || msg != "Unauthorized" {
				t.Fatalf("a credential that is not UTF-8: %s %q, want Unauthenticated \"Unauthorized\"", code, msg)
			}
			// REST says the same: 403 Unauthorized, 400 for two headers.
			if r, err := newClient(t, s.URL, "\xff\xfe").Try(http.MethodGet, "/v1/admin/stats", nil); err == nil {
				r.ExpectError(t, http.StatusForbidden, "Unauthorized")
			}
		})
	}
}
