package grpcx

import (
	"bytes"
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/auth"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/paging"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// chars is n characters of the widest UTF-8 encoding (4 bytes each): caps count code
// points (addendum), so this is the most bytes a capped field holds.
func chars(n int) string { return strings.Repeat("😀", n) }

// latest is the widest Timestamp: the most seconds a date of this millennium needs and
// nine digits of nanoseconds.
var latest = timestamppb.New(time.Date(2999, 12, 31, 23, 59, 59, 999999999, time.UTC))

// largestRelease is a release row at every cap of api.md (Release field caps).
func largestRelease() *releasesv1.ReleaseRow {
	return &releasesv1.ReleaseRow{
		Id: math.MaxInt32, ProductId: chars(200), Version: chars(100), Channel: chars(100), Platform: chars(100),
		ArtifactUrl: chars(2048), Checksum: chars(256), ReleaseNotes: chars(10000), Status: "unpublished", CreatedAt: latest,
	}
}

// TestTheLargestAnswersFitTheAnswerLimit builds the largest answer of each kind the REST
// contract allows and checks it is within MaxAnswerBytes, and that the list-releases
// page limits.go's arithmetic names the largest is the largest.
func TestTheLargestAnswersFitTheAnswerLimit(t *testing.T) {
	limits, usage := map[string]*structpb.Value{}, map[string]float64{}
	for k := range license.LimitKeys {
		limits[k] = structpb.NewNumberValue(math.MaxFloat64)
		usage[k] = math.MaxFloat64
	}
	releases := &releasesv1.ListReleasesResponse{Total: math.MaxInt32}
	licenses := &licensingv1.ListLicensesResponse{Total: math.MaxInt32}
	events := &eventsv1.ListEventsResponse{HasMore: true}
	for range paging.MaxLimit {
		releases.Releases = append(releases.Releases, largestRelease())
		licenses.Licenses = append(licenses.Licenses, &licensingv1.LicenseRow{
			Key: strings.Repeat("K", 200), Tier: chars(200), ProductId: chars(200), IssuedTo: chars(1000),
			IssuedAt: latest, ExpiresAt: latest, Status: "revoked", Limits: &structpb.Struct{Fields: limits}, Usage: usage,
			MaxActivations: wrapperspb.Int32(math.MaxInt32), RevokedAt: latest, ActivationsCount: math.MaxInt32,
		})
		data, err := structpb.NewStruct(map[string]any{
			"key": strings.Repeat("K", 200), "product_id": chars(200), "tier": chars(200), "issued_to": chars(1000),
			"expires_at": "2999-12-31T23:59:59.999999Z", "max_activations": math.MaxInt32, "limits": usageAsAny(usage),
		})
		if err != nil {
			t.Fatal(err)
		}
		events.Events = append(events.Events, &eventsv1.EventRecord{
			Id: "evt_" + strings.Repeat("a", 26), Type: "license.terms_updated", CreatedAt: "2999-12-31T23:59:59.999999Z",
			Actor: &eventsv1.Actor{Type: "storefront", RequestId: wrapperspb.String(strings.Repeat("r", 128))}, Data: data,
		})
	}
	updates := &releasesv1.CheckUpdateBatchResponse{}
	for range 256 { // the hot path's batch (maxBatchItems of releases' check-update batch)
		r := largestRelease()
		updates.Results = append(updates.Results, &releasesv1.CheckUpdateBatchResult{
			Outcome: &releasesv1.CheckUpdateBatchResult_Response{Response: &releasesv1.CheckUpdateResponse{UpdateAvailable: true, Release: &releasesv1.Manifest{
				ProductId: r.ProductId, Version: r.Version, Channel: r.Channel, Platform: r.Platform, ArtifactUrl: r.ArtifactUrl,
				Checksum: r.Checksum, ReleaseNotes: r.ReleaseNotes, Signature: strings.Repeat("A", 684), IssuedAt: latest, // RSA-4096, base64
			}}},
			ValidUntil: latest, UpdateClass: chars(400),
		})
	}
	largest := proto.Size(releases)
	for name, m := range map[string]proto.Message{"list-releases": releases, "list-licenses": licenses, "events": events, "check-update batch": updates} {
		size := proto.Size(m)
		t.Logf("%s: %d bytes (%.1f MiB)", name, size, float64(size)/(1<<20))
		if size > MaxAnswerBytes {
			t.Errorf("the largest %s answer is %d bytes, over MaxAnswerBytes (%d)", name, size, MaxAnswerBytes)
		}
		if size > largest {
			t.Errorf("the largest %s answer (%d bytes) is larger than list-releases' (%d): redo limits.go's arithmetic", name, size, largest)
		}
	}
}

func usageAsAny(m map[string]float64) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestTheLargestRESTBodyFitsTheRequestLimit: a 1 MiB body (the edge's cap) of what grows
// most from JSON to protobuf, a list of one-digit numbers in a google.protobuf.Value, is
// within MaxRequestBytes once decoded as the gateway decodes it.
func TestTheLargestRESTBodyFitsTheRequestLimit(t *testing.T) {
	const maxBody = 1 << 20 // edge.MaxBodyBytes, addendum §6
	head, tail := `{"tier":"pro","product_id":"p","issued_to":"i","limits":{"users":[`, `0]}}`
	body := head + strings.Repeat("0,", (maxBody-len(head)-len(tail))/2) + tail
	var req licensingv1.IssueLicenseRequest
	if err := protojson.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	size := proto.Size(&req)
	t.Logf("a %d-byte body is %d bytes of protobuf (%.2f times)", len(body), size, float64(size)/float64(len(body)))
	if size > MaxRequestBytes {
		t.Fatalf("a 1 MiB body decodes to %d bytes, over MaxRequestBytes (%d)", size, MaxRequestBytes)
	}
}

// sizedMethod is sizedService's method.
const sizedMethod = "/grpcxtest.Sized/Answer"

// sizedService's method answers as many zero bytes as its request names ("<size> <padding>").
var sizedService = standIn("grpcxtest.Sized", "Answer", func(in []byte) []byte {
	size, _, _ := bytes.Cut(in, []byte(" "))
	n, _ := strconv.Atoi(string(size))
	return make([]byte, n)
})

// serveLimited starts a server as every service builds it, with sizedService.
func serveLimited(t *testing.T) string {
	return serveStandIn(t, auth.New(auth.Config{}), func(g *grpc.Server) { g.RegisterService(&sizedService, nil) })
}

// An answer as large as the largest list page crosses between a server and a client
// Keyhouse builds (gRPC's own limit, 4 MiB, refused a 4.5 MB list-releases page); past
// MaxAnswerBytes, and a request past MaxRequestBytes, the call fails with gRPC's
// ResourceExhausted (which the gateway answers 500).
func TestAnswersUpToTheAnswerLimitArrive(t *testing.T) {
	conn, err := Dial("sized", serveLimited(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ask := func(n int, request []byte) (int, error) {
		got := &wrapperspb.BytesValue{}
		err := conn.Invoke(ctx, sizedMethod, wrapperspb.Bytes(append([]byte(strconv.Itoa(n)+" "), request...)), got)
		return len(got.Value), err
	}
	const page = 49 << 20 // the largest list-releases page, 48.9 MiB
	if n, err := ask(page, nil); err != nil || n != page {
		t.Fatalf("an answer of %d bytes: got %d bytes, %v", page, n, err)
	}
	if _, err := ask(MaxAnswerBytes, nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an answer over MaxAnswerBytes: %v, want ResourceExhausted", err)
	}
	if _, err := ask(1, make([]byte, MaxRequestBytes)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request over MaxRequestBytes: %v, want ResourceExhausted", err)
	}
	if n, err := ask(1, make([]byte, 6<<20)); err != nil || n != 1 {
		t.Fatalf("a request of 6 MiB (a 1 MiB REST body at its largest): %d, %v", n, err)
	}
}

// A caller that opens calls and never reads their answers holds at most
// maxConcurrentStreams of them on one connection: the server announces the bound, and
// refuses the call past it while the others still wait to be read.
func TestOneConnectionHoldsAtMostMaxConcurrentStreamsCalls(t *testing.T) {
	c, err := net.Dial("tcp", serveLimited(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	// A stream window of 0: no answer can be sent, so every call stays open.
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var announced uint32
	var frames sync.WaitGroup
	refused := make(chan uint32, 1)
	frames.Go(func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					atomic.StoreUint32(&announced, v)
				}
			case *http2.RSTStreamFrame:
				if f.ErrCode == http2.ErrCodeRefusedStream {
					refused <- f.StreamID
					return
				}
			}
		}
	})
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", sizedMethod}, {":authority", "sized"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	request, _ := proto.Marshal(wrapperspb.Bytes([]byte("1000")))
	message := append([]byte{0, 0, 0, 0, byte(len(request))}, request...)
	for i := range maxConcurrentStreams + 1 {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, message); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case id := <-refused:
		if want := uint32(2*maxConcurrentStreams + 1); id != want {
			t.Fatalf("stream %d refused, want the one past the bound, %d", id, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no call refused after %d on one connection", maxConcurrentStreams+1)
	}
	if got := atomic.LoadUint32(&announced); got != maxConcurrentStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", got, maxConcurrentStreams)
	}
	_ = c.Close()
	frames.Wait()
}
