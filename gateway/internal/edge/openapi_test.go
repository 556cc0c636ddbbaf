package edge

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// httpRules are the routes of proto/keyhouse/http.yaml ("GET /v1/x"), the ones the
// generated grpc-gateway code registers.
func httpRules(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../../proto/keyhouse/http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	re := regexp.MustCompile(`^\s*(get|post|put|delete|patch):\s*"?([^"\s]+)"?\s*$`)
	for _, line := range strings.Split(string(raw), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			routes = append(routes, strings.ToUpper(m[1])+" "+m[2])
		}
	}
	if len(routes) == 0 {
		t.Fatal("no rules read from http.yaml")
	}
	return routes
}

// plainRoutes are the routes package edge registers itself, read from its source: every
// HandlePath call outside the tests, with its method and pattern (a string literal or a
// string constant of the package).
func plainRoutes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
	}
	// The package's string constants, for patterns named by one (HealthzPath).
	consts := map[string]string{}
	for _, file := range parsed {
		ast.Inspect(file, func(n ast.Node) bool {
			if spec, ok := n.(*ast.ValueSpec); ok {
				for i, name := range spec.Names {
					if i < len(spec.Values) {
						if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	var routes []string
	for _, file := range parsed {
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "HandlePath" {
				return true
			}
			method, okM := httpMethodConst(call.Args[0])
			var pattern string
			okP := false
			switch arg := call.Args[1].(type) {
			case *ast.BasicLit:
				pattern, _ = strconv.Unquote(arg.Value)
				okP = arg.Kind == token.STRING
			case *ast.Ident:
				pattern, okP = consts[arg.Name]
			}
			if !okM || !okP {
				t.Errorf("%s: HandlePath with a method or pattern that is neither written out nor a string constant of the package: the route table test cannot read it", fset.Position(call.Pos()))
				return true
			}
			routes = append(routes, method+" "+pattern)
			return true
		})
	}
	return routes
}

// httpMethodConst reads http.MethodGet and the like.
func httpMethodConst(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "http" || !strings.HasPrefix(sel.Sel.Name, "Method") {
		return "", false
	}
	return strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method")), true
}

func TestOpenAPI_EveryRouteTheEdgeServesIsInTheDocumentAndNothingElse(t *testing.T) {
	t.Parallel()
	served := append(httpRules(t), plainRoutes(t)...)
	var documented []string
	for _, r := range openapi.Routes() {
		documented = append(documented, r.Method+" "+r.Path)
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not in the OpenAPI document (http.yaml: run make proto; a plain handler: add it to gateway/internal/openapi/handwritten.json)", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s is in the OpenAPI document but the edge does not serve it", r)
		}
	}
	if dup := slices.Compact(slices.Clone(served)); len(dup) != len(served) {
		t.Errorf("a route is registered twice: %v", served)
	}
}

func TestOpenAPI_EveryRouteHasARateTierAndAnAccessLevel(t *testing.T) {
	t.Parallel()
	routes := openapi.Routes()
	if len(routes) < 35 {
		t.Fatalf("%d routes in the document, want every route of api.md", len(routes))
	}
	for _, r := range routes {
		if r.Tier == "" || r.Access == "" {
			t.Errorf("%s %s: tier %q access %q", r.Method, r.Path, r.Tier, r.Access)
		}
	}
}

// serveBackends starts a gRPC server whose every call goes to handle, and returns the
// gateway's connections to it, one for every service.
func serveBackends(tb testing.TB, handle grpc.StreamHandler) Conns {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(handle))
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return Conns{Licensing: conn, Activations: conn, Releases: conn, Billing: conn, Storefront: conn, Events: conn}
}

// backends is a gRPC server standing in for every service: it records the method each
// call names and answers Unimplemented.
type backends struct {
	mu     sync.Mutex
	called []string
}

func (b *backends) handle(_ any, stream grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(stream)
	b.mu.Lock()
	b.called = append(b.called, m)
	b.mu.Unlock()
	return status.Error(codes.Unimplemented, "test backend")
}

func (b *backends) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.called
	b.called = nil
	return c
}

// batchedThrough names the methods whose REST calls the gateway sends in batches, by the
// batch method that carries them (the document names the method a direct gRPC client
// calls). This backend serves no batch call, so the gateway then sends the call alone.
var batchedThrough = map[string]string{
	activationsv1.ActivationsService_TrackUsage_FullMethodName:        activationsv1.ActivationsService_TrackUsageBatch_FullMethodName,
	activationsv1.ActivationsService_ActivateLicense_FullMethodName:   activationsv1.ActivationsService_ChangeSeatsBatch_FullMethodName,
	activationsv1.ActivationsService_DeactivateLicense_FullMethodName: activationsv1.ActivationsService_ChangeSeatsBatch_FullMethodName,
	licensingv1.LicensingService_VerifyLicense_FullMethodName:         licensingv1.LicensingService_VerifyLicenseBatch_FullMethodName,
	activationsv1.ActivationsService_ValidateLicense_FullMethodName:   activationsv1.ActivationsService_ValidateLicenseBatch_FullMethodName,
	releasesv1.ReleasesService_CheckUpdate_FullMethodName:             releasesv1.ReleasesService_CheckUpdateBatch_FullMethodName,
	activationsv1.LeasesService_CreateLease_FullMethodName:            activationsv1.LeasesService_CreateLeaseBatch_FullMethodName,
}

func TestOpenAPI_EveryDocumentedRouteReachesTheMethodItNames(t *testing.T) {
	t.Parallel()
	b := &backends{}
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle)})
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, r := range openapi.Routes() {
		path := param.ReplaceAllString(r.Path, "17")
		var body io.Reader
		if r.Method != http.MethodGet {
			body = strings.NewReader(`{"key":"KEY-1","instance_id":"host-1"}`)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(r.Method, path, body))
		called := b.take()
		if r.GRPCMethod == "" {
			if w.Code != http.StatusOK || len(called) != 0 {
				t.Errorf("%s %s: status %d, backend calls %v; want the gateway's own 200", r.Method, path, w.Code, called)
			}
			continue
		}
		want := []string{r.GRPCMethod}
		if via, ok := batchedThrough[r.GRPCMethod]; ok {
			want = []string{via, r.GRPCMethod}
		}
		if !slices.Equal(called, want) {
			t.Errorf("%s %s: called %v (status %d %s), want %v", r.Method, path, called, w.Code, w.Body, want)
		}
	}
}

func TestOpenAPI_TheDocumentIsServed(t *testing.T) {
	t.Parallel()
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil))
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var doc struct {
		Swagger string         `json:"swagger"`
		Info    map[string]any `json:"info"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Swagger != "2.0" || doc.Info["title"] != "Keyhouse API" || doc.Paths["/v1/verify-license"] == nil {
		t.Errorf("swagger %q, info %v, %d paths", doc.Swagger, doc.Info, len(doc.Paths))
	}
}
