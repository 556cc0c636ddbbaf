package idempotency

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every service's descriptors, so each handler's method can be looked up (a service
	// package missing here fails the test below as an unknown service).
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
)

const importPath = "github.com/keyhouse/keyhouse/pkg/idempotency"

// TestEveryReaderOfTheKeyIsADeclaredMethod is where a method that reads the
// Idempotency-Key without declaring (keyhouse.api.v1.idempotency_key) is caught: in
// make test, not as a 500 at request time (Key still refuses such a call at run time,
// creating nothing). It reads the source of every Go package of the repository, finds each
// call of Key, and follows the calls back, within its package, to the gRPC handlers that
// reach it (methods of a type embedding Unimplemented<Service>Server); every such method
// must declare the option, and a call no handler reaches is refused too (which method it
// serves cannot be told, so Key is read in the handler's package).
func TestEveryReaderOfTheKeyIsADeclaredMethod(t *testing.T) {
	t.Parallel()
	problems, readers, err := checkReaders(filepath.Join("..", ".."), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The methods known to honour the key: the check must have found them, or it checks
	// nothing.
	for _, m := range []string{
		"keyhouse.licensing.v1.LicensingService.IssueLicense",
		"keyhouse.licensing.v1.LicensingInternalService.IssueLicenseForTenant",
		"keyhouse.releases.v1.ReleasesService.RegisterRelease",
		"keyhouse.storefront.v1.StorefrontService.CreateMapping",
		"keyhouse.activations.v1.ActivationsService.TrackUsage",
		"keyhouse.activations.v1.LeasesService.RotateLeaseKeys",
		"keyhouse.accounts.v1.ApiKeysService.CreateApiKey",
		"keyhouse.accounts.v1.AccountsService.CreateTenant",
		"keyhouse.events.v1.WebhookEndpointsService.CreateWebhookEndpoint",
		"keyhouse.events.v1.WebhookEndpointsService.RollWebhookEndpointSecret",
		"keyhouse.storefront.v1.StorefrontService.ConnectWebhook",
	} {
		if !slices.Contains(readers, m) {
			t.Errorf("%s reads the Idempotency-Key, yet the check did not find it (found %v)", m, readers)
		}
	}
}

func TestTheReaderCheckRefusesAnUndeclaredMethodAndAnOrphanCall(t *testing.T) {
	t.Parallel()
	problems, readers, err := checkReaders(filepath.Join("testdata", "misdeclared"), false)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"keyhouse.licensing.v1.LicensingService.VerifyLicense reads the Idempotency-Key (server.go: readKey) but does not declare (keyhouse.api.v1.idempotency_key)",
		"server.go: orphan reads the Idempotency-Key but no gRPC handler of its package reaches it",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems:\n%s\nwant one saying: %s", got, want)
		}
	}
	if len(problems) != 2 || !slices.Equal(readers, []string{"keyhouse.licensing.v1.LicensingService.IssueLicense", "keyhouse.licensing.v1.LicensingService.VerifyLicense"}) {
		t.Errorf("problems %q, readers %v", problems, readers)
	}
}

// checkReaders checks the Go packages under root (each directory one package; testdata
// directories skipped when skipTestdata). It returns what is wrong
// and every gRPC method found reading the key.
func checkReaders(root string, skipTestdata bool) (problems, readers []string, err error) {
	dirs := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || (skipTestdata && name == "testdata")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, ".pb.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, files := range dirs {
		p, r, err := checkPackage(files)
		if err != nil {
			return nil, nil, err
		}
		problems = append(problems, p...)
		readers = append(readers, r...)
	}
	slices.Sort(problems)
	slices.Sort(readers)
	return problems, slices.Compact(readers), nil
}

// function is one func declaration of a package: what it calls (by the names funcKey
// gives) and whether it calls Key itself.
type function struct {
	file     string
	calls    []string
	readsKey bool
}

// funcKey names a package's function "F" and a method "T.M" (pointer or not).
func funcKey(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	return recvType(d.Recv.List[0].Type) + "." + d.Name.Name
}

// shortName is a function's name without its receiver type.
func shortName(key string) string { return key[strings.Index(key, ".")+1:] }

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

func checkPackage(files []string) (problems, readers []string, err error) {
	fset := token.NewFileSet()
	funcs := map[string]*function{}
	services := map[string][]string{} // type name → the services it implements
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		alias := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
				alias = "idempotency"
				if imp.Name != nil {
					alias = imp.Name.Name
				}
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, field := range st.Fields.List {
						if len(field.Names) > 0 {
							continue
						}
						if sel, ok := field.Type.(*ast.SelectorExpr); ok {
							if svc, ok := strings.CutPrefix(sel.Sel.Name, "Unimplemented"); ok && strings.HasSuffix(svc, "Server") {
								services[ts.Name.Name] = append(services[ts.Name.Name], strings.TrimSuffix(svc, "Server"))
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				fn := &function{file: filepath.Base(path)}
				recv := ""
				if d.Recv != nil && len(d.Recv.List) > 0 && len(d.Recv.List[0].Names) > 0 {
					recv = d.Recv.List[0].Names[0].Name
				}
				ast.Inspect(d.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					switch fun := call.Fun.(type) {
					case *ast.Ident:
						fn.calls = append(fn.calls, fun.Name)
					case *ast.SelectorExpr:
						if x, ok := fun.X.(*ast.Ident); ok {
							switch {
							case alias != "" && x.Name == alias && fun.Sel.Name == "Key":
								fn.readsKey = true
							case recv != "" && x.Name == recv:
								fn.calls = append(fn.calls, recvType(d.Recv.List[0].Type)+"."+fun.Sel.Name)
							}
						}
					}
					return true
				})
				funcs[funcKey(d)] = fn
			}
		}
	}
	// reaches: the functions calling Key that name reaches, itself included.
	reaches := func(name string) []string {
		var found []string
		seen := map[string]bool{}
		var walk func(string)
		walk = func(n string) {
			fn, ok := funcs[n]
			if !ok || seen[n] {
				return
			}
			seen[n] = true
			if fn.readsKey {
				found = append(found, fn.file+": "+shortName(n))
			}
			for _, c := range fn.calls {
				walk(c)
			}
		}
		walk(name)
		return found
	}
	reached := map[string]bool{}
	for typ, svcs := range services {
		for _, svc := range svcs {
			sd, err := findService(svc)
			if err != nil {
				return nil, nil, err
			}
			for i := range sd.Methods().Len() {
				md := sd.Methods().Get(i)
				found := reaches(typ + "." + string(md.Name()))
				if len(found) == 0 {
					continue
				}
				for _, f := range found {
					reached[f] = true
				}
				readers = append(readers, string(md.FullName()))
				if !proto.GetExtension(md.Options(), apiv1.E_IdempotencyKey).(bool) {
					problems = append(problems, fmt.Sprintf("%s reads the Idempotency-Key (%s) but does not declare (keyhouse.api.v1.idempotency_key)",
						md.FullName(), strings.Join(found, ", ")))
				}
			}
		}
	}
	for name, fn := range funcs {
		if short := fn.file + ": " + shortName(name); fn.readsKey && !reached[short] {
			problems = append(problems, fmt.Sprintf("%s reads the Idempotency-Key but no gRPC handler of its package reaches it", short))
		}
	}
	return problems, readers, nil
}

// findService finds a service by its short name among every registered proto file.
func findService(name string) (protoreflect.ServiceDescriptor, error) {
	var found []protoreflect.ServiceDescriptor
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if sd := fd.Services().ByName(protoreflect.Name(name)); sd != nil {
			found = append(found, sd)
		}
		return true
	})
	if len(found) != 1 {
		return nil, fmt.Errorf("service %s: %d registered services of that name (import its generated package in this test)", name, len(found))
	}
	return found[0], nil
}
