package grpcx

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// policyPeer answers the methods the input tests call, counting the calls that reach it.
type policyPeer struct {
	licensingv1.UnimplementedLicensingServiceServer
	activationsv1.UnimplementedActivationsServiceServer
	reached atomic.Int64
}

func (p *policyPeer) IssueLicense(_ context.Context, req *licensingv1.IssueLicenseRequest) (*licensingv1.IssueLicenseResponse, error) {
	p.reached.Add(1)
	return &licensingv1.IssueLicenseResponse{Key: "issued to " + req.GetIssuedTo()}, nil
}

func (p *policyPeer) ActivateLicense(_ context.Context, req *activationsv1.ActivateLicenseRequest) (*activationsv1.ActivateLicenseResponse, error) {
	p.reached.Add(1)
	return &activationsv1.ActivateLicenseResponse{Token: proto.String("for " + req.GetInstanceId())}, nil
}

func (p *policyPeer) ValidateLicense(context.Context, *activationsv1.ValidateLicenseRequest) (*activationsv1.ValidateLicenseResponse, error) {
	p.reached.Add(1)
	return &activationsv1.ValidateLicenseResponse{Valid: false}, nil
}

// servePolicyPeer serves policyPeer behind the shared chain with an admin key, so that
// IssueLicense needs a credential and ActivateLicense does not.
func servePolicyPeer(t *testing.T) (*policyPeer, *grpc.ClientConn) {
	t.Helper()
	srv := NewServer(slog.New(slog.DiscardHandler), auth.New(auth.Config{AdminKey: "admin-key-for-tests"}), ServerOptions{})
	peer := &policyPeer{}
	licensingv1.RegisterLicensingServiceServer(srv.GRPC, peer)
	activationsv1.RegisterActivationsServiceServer(srv.GRPC, peer)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(lis) }()
	t.Cleanup(srv.GRPC.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return peer, conn
}

// rawBytes is a client codec that sends a request's bytes as they are (a Go client
// refuses to marshal a string field that is not UTF-8).
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawBytes) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

var _ encoding.Codec = rawBytes{}

func stringField(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func answer(err error) string {
	st := status.Convert(err)
	return fmt.Sprintf("%s %q", st.Code(), st.Message())
}

// A direct caller gets the REST edge's answers: a control character in an identifier is
// InvalidArgument "<field> must not contain control characters", before any credential is
// looked at and before the service does anything; so is a request gRPC cannot decode,
// which is logged and counted as a call (it was Internal with gRPC's own words, before
// any interceptor). Free text keeps its line breaks, and validate-license still answers
// anything itself.
func TestDirectCallsGetTheEdgesInputPolicy(t *testing.T) {
	peer, conn := servePolicyPeer(t)
	lic := licensingv1.NewLicensingServiceClient(conn)
	act := activationsv1.NewActivationsServiceClient(conn)
	ctx := context.Background()
	const activate = "/keyhouse.activations.v1.ActivationsService/ActivateLicense"

	_, err := lic.IssueLicense(ctx, &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: "app", IssuedTo: "eve\r\nX-Injected: 1"})
	if got, want := answer(err), `InvalidArgument "issued_to must not contain control characters"`; got != want {
		t.Errorf("issue without a credential, CR LF in issued_to: %s, want %s", got, want)
	}
	_, err = act.ActivateLicense(ctx, &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "build-agent\x1b]0;owned\x07"})
	if got, want := answer(err), `InvalidArgument "instance_id must not contain control characters"`; got != want {
		t.Errorf("activate, escape sequence in instance_id: %s, want %s", got, want)
	}

	refusedBefore := testutil.ToFloat64(metrics.GRPCRequests.WithLabelValues(activate, codes.InvalidArgument.String()))
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"a string field that is not UTF-8", `InvalidArgument "instance_id is not valid UTF-8"`, append(stringField(1, "K"), stringField(2, "caf\xff")...)},
		{"bytes that are no protobuf message", `InvalidArgument "Invalid protobuf message"`, []byte{0xff, 0xff, 0xff, 0xff}},
	} {
		var reply []byte
		err := conn.Invoke(ctx, activate, tc.body, &reply, grpc.ForceCodec(rawBytes{}))
		if got := answer(err); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(metrics.GRPCRequests.WithLabelValues(activate, codes.InvalidArgument.String())) - refusedBefore; got != 2 {
		t.Errorf("keyhouse_grpc_server_requests_total counted %v malformed requests, want 2", got)
	}
	if n := peer.reached.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the service", n)
	}

	// A client cannot forge a deferred refusal: an unknown field is ignored, as ever.
	forged := append(stringField(1, "K"), stringField(refusalField, "pretend")...)
	var reply []byte
	if err := conn.Invoke(ctx, activate, append(forged, stringField(2, "laptop")...), &reply, grpc.ForceCodec(rawBytes{})); err != nil {
		t.Errorf("a request with an unknown field: %s", answer(err))
	}
	if v, err := act.ValidateLicense(ctx, &activationsv1.ValidateLicenseRequest{Key: "K\n", InstanceId: "x\x01"}); err != nil || v.GetValid() {
		t.Errorf("validate-license with control characters: %v %s, want valid false", v, answer(err))
	}
	if peer.reached.Load() != 2 {
		t.Fatalf("reached %d times, want 2 (the unknown field, validate-license)", peer.reached.Load())
	}
}

// Refusals are per call: malformed, refused and good requests sent at once on one
// connection each get their own answer, and only the good ones reach the service.
func TestInputRefusalsStayWithTheirCallsInParallel(t *testing.T) {
	peer, conn := servePolicyPeer(t)
	const activate = "/keyhouse.activations.v1.ActivationsService/ActivateLicense"
	const calls = 300
	var wg sync.WaitGroup
	errs := make(chan string, calls)
	for i := range calls {
		wg.Go(func() {
			instance := fmt.Sprintf("host-%d", i)
			body, want := append(stringField(1, "K"), stringField(2, instance)...), "OK"
			switch i % 3 {
			case 1:
				body, want = append(stringField(1, "K"), stringField(2, instance+"\xff")...), `InvalidArgument "instance_id is not valid UTF-8"`
			case 2:
				body, want = append(stringField(1, "K"), stringField(2, instance+"\n")...), `InvalidArgument "instance_id must not contain control characters"`
			}
			var reply []byte
			err := conn.Invoke(context.Background(), activate, body, &reply, grpc.ForceCodec(rawBytes{}))
			got := "OK"
			if err != nil {
				got = answer(err)
			} else {
				var r activationsv1.ActivateLicenseResponse
				if proto.Unmarshal(reply, &r) != nil || r.GetToken() != "for "+instance || want != "OK" {
					got = "answered " + r.GetToken()
				}
			}
			if got != want {
				errs <- fmt.Sprintf("call %d: %s, want %s", i, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := peer.reached.Load(); n != calls/3 {
		t.Fatalf("%d calls reached the service, want %d", n, calls/3)
	}
}

// The exempt methods exist: a renamed one would quietly fall under the policy.
func TestPolicyExemptMethodsExist(t *testing.T) {
	for method := range policyExempt {
		service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok || sd.Methods().ByName(protoreflect.Name(name)) == nil {
			t.Errorf("%s is no method", method)
		}
	}
}

// The interceptor's cost on the hot paths' requests, a good request
// (`go test -bench InputPolicy -benchmem ./grpcx`).
func BenchmarkInputPolicyInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: "/keyhouse.licensing.v1.LicensingService/VerifyLicense"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, bc := range []struct {
		name string
		req  proto.Message
	}{
		{"verify-license", &licensingv1.VerifyLicenseRequest{Key: proto.String("KH-ABCD-EFGH-IJKL-MNOP")}},
		{"lease", &activationsv1.CreateLeaseRequest{Key: "KH-ABCD-EFGH-IJKL-MNOP", Token: "tok_0123456789abcdef0123456789abcdef", Nonce: proto.String("n-1")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inputUnary(context.Background(), bc.req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
