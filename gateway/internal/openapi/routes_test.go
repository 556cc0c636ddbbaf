package openapi

import (
	"cmp"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	// The services of http.yaml, registered so their method and field options can be read.
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// httpRule is one route of proto/keyhouse/http.yaml.
type httpRule struct{ selector, method, path string }

func httpRules(t *testing.T) []httpRule {
	t.Helper()
	raw, err := os.ReadFile("../../../proto/keyhouse/http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`^\s*- selector:\s*(\S+)\s*$`)
	verb := regexp.MustCompile(`^\s*(get|post|put|delete|patch):\s*"?([^"\s]+)"?\s*$`)
	var rules []httpRule
	current := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if m := selector.FindStringSubmatch(line); m != nil {
			current = m[1]
		} else if m := verb.FindStringSubmatch(line); m != nil {
			rules = append(rules, httpRule{current, strings.ToUpper(m[1]), m[2]})
		}
	}
	if len(rules) == 0 {
		t.Fatal("no rules read from http.yaml")
	}
	return rules
}

// operationDoc is the part of an operation this test reads.
type operationDoc struct {
	Summary    string `json:"summary"`
	Parameters []struct {
		Name     string          `json:"name"`
		In       string          `json:"in"`
		Required bool            `json:"required"`
		Schema   json.RawMessage `json:"schema"`
	} `json:"parameters"`
	Responses map[string]struct {
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"responses"`
}

func documentOperations(t *testing.T) (map[string]operationDoc, map[string]struct{ Required []string }) {
	t.Helper()
	var d struct {
		Paths       map[string]map[string]json.RawMessage  `json:"paths"`
		Definitions map[string]struct{ Required []string } `json:"definitions"`
	}
	if err := json.Unmarshal(Document(), &d); err != nil {
		t.Fatal(err)
	}
	ops := map[string]operationDoc{}
	for path, item := range d.Paths {
		for key, raw := range item {
			var op operationDoc
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			ops[strings.ToUpper(key)+" "+path] = op
		}
	}
	return ops, d.Definitions
}

// TestEveryHTTPRuleIsDocumentedWithItsErrors: each route of http.yaml is in the document
// with a summary, the error answers every route of its kind gives (400 with input, 403
// for credentials, 429 when limited, 503 behind a service) and those its method
// declares, each with the {"error": …} body; its required fields and the Idempotency-Key
// header as the protos declare them.
func TestEveryHTTPRuleIsDocumentedWithItsErrors(t *testing.T) {
	t.Parallel()
	ops, defs := documentOperations(t)
	for _, rule := range httpRules(t) {
		route := rule.method + " " + rule.path
		op, ok := ops[route]
		if !ok {
			t.Errorf("%s (%s) is not in the document", route, rule.selector)
			continue
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(rule.selector))
		if err != nil {
			t.Errorf("%s: %v", route, err)
			continue
		}
		md := d.(protoreflect.MethodDescriptor)
		opts := md.Options()
		want := []int{503}
		if len(op.Parameters) > 0 {
			want = append(want, 400)
		}
		if proto.GetExtension(opts, apiv1.E_Access).(apiv1.Access) != apiv1.Access_ACCESS_PUBLIC {
			want = append(want, 403)
		}
		if proto.GetExtension(opts, apiv1.E_RateLimit).(*apiv1.RateLimit).GetTier() != apiv1.RateTier_RATE_TIER_NONE {
			want = append(want, 429)
		}
		// A status whose body carries siblings of "error" names its own definition.
		body := map[int]string{}
		for _, e := range proto.GetExtension(opts, apiv1.E_HttpErrors).([]*apiv1.HttpError) {
			want = append(want, int(e.GetStatus()))
			if e.GetSchema() != "" {
				body[int(e.GetStatus())] = e.GetSchema()
			}
		}
		for _, code := range want {
			wantRef := "#/definitions/" + cmp.Or(body[code], "Error")
			r, ok := op.Responses[strconv.Itoa(code)]
			if !ok {
				t.Errorf("%s: no %d answer in the document", route, code)
			} else if code != 429 && r.Schema.Ref != wantRef {
				t.Errorf("%s: the %d answer's body is %q, want %s", route, code, r.Schema.Ref, wantRef)
			}
		}
		if op.Summary == "" {
			t.Errorf("%s: no summary", route)
		}

		documented := map[string]bool{}
		hasHeader := false
		for _, p := range op.Parameters {
			switch {
			case p.In == "header" && p.Name == "Idempotency-Key":
				hasHeader = true
			case p.In == "body":
				var ref struct {
					Ref string `json:"$ref"`
				}
				_ = json.Unmarshal(p.Schema, &ref)
				for _, f := range defs[strings.TrimPrefix(ref.Ref, "#/definitions/")].Required {
					documented[f] = true
				}
			case p.Required:
				documented[p.Name] = true
			}
		}
		fields := md.Input().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if proto.GetExtension(f.Options(), apiv1.E_Required).(bool) && !documented[string(f.Name())] {
				t.Errorf("%s: %s is required in the proto but not in the document", route, f.Name())
			}
		}
		if declared := proto.GetExtension(opts, apiv1.E_IdempotencyKey).(bool); declared != hasHeader {
			t.Errorf("%s: Idempotency-Key header documented %v, declared on the method %v", route, hasHeader, declared)
		}
	}
}

// TestTheAPIReferenceListsEveryRoute: docs/reference/api.md's route reference has a
// section for every operation of the document (http.yaml's and the hand-written ones).
func TestTheAPIReferenceListsEveryRoute(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../docs/reference/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(raw), "## Route reference")
	if !found {
		t.Fatal("docs/reference/api.md has no Route reference section: run make proto")
	}
	headings := strings.Split(section, "\n### ")
	var documented []string
	for _, h := range headings[1:] {
		documented = append(documented, strings.SplitN(h, "\n", 2)[0])
	}
	for _, r := range Routes() {
		if !slices.Contains(documented, r.Method+" "+r.Path) {
			t.Errorf("docs/reference/api.md does not document %s %s: run make proto", r.Method, r.Path)
		}
	}
	for _, rule := range httpRules(t) {
		if !slices.Contains(documented, rule.method+" "+rule.path) {
			t.Errorf("docs/reference/api.md does not document http.yaml's %s %s", rule.method, rule.path)
		}
	}
}

// TestEveryNumberTheServerReadsIsDocumentedAsANumber: the gateway's decoder refuses a
// string where api.md says number, wrapper types included (protojson would take "3600"
// for an int64), so in the document every numeric field of a request body is an integer
// or a number, never protoc-gen-openapiv2's string for a 64-bit integer.
func TestEveryNumberTheServerReadsIsDocumentedAsANumber(t *testing.T) {
	t.Parallel()
	var d struct {
		Definitions map[string]struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(Document(), &d); err != nil {
		t.Fatal(err)
	}
	ops, _ := documentOperations(t)
	checked := 0
	for _, rule := range httpRules(t) {
		route := rule.method + " " + rule.path
		desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(rule.selector))
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		for _, p := range ops[route].Parameters {
			if p.In != "body" {
				continue
			}
			var ref struct {
				Ref string `json:"$ref"`
			}
			_ = json.Unmarshal(p.Schema, &ref)
			props := d.Definitions[strings.TrimPrefix(ref.Ref, "#/definitions/")].Properties
			fields := desc.(protoreflect.MethodDescriptor).Input().Fields()
			for i := range fields.Len() {
				f := fields.Get(i)
				want := numberType(f)
				prop, documented := props[string(f.Name())]
				if want == "" || !documented || proto.GetExtension(f.Options(), apiv1.E_JsonSchema).(string) != "" {
					continue
				}
				checked++
				if prop.Type != want {
					t.Errorf("%s: %s is %q in the document; the server reads only a JSON number (%s)", route, f.Name(), prop.Type, want)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no numeric body field checked")
	}
}

// numberType is the JSON Schema type of a numeric field, plain or wrapped: "integer" or
// "number"; "" for any other field.
func numberType(f protoreflect.FieldDescriptor) string {
	kind := f.Kind()
	if kind == protoreflect.MessageKind && f.Message().FullName().Parent() == "google.protobuf" {
		if v := f.Message().Fields().ByName("value"); v != nil { // a wrapper (Any's value is bytes)
			kind = v.Kind()
		}
	}
	switch kind {
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		return "number"
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind,
		protoreflect.Sint32Kind, protoreflect.Sint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return "integer"
	}
	return ""
}

// schemaProp is the part of a definition's property the tests below read.
type schemaProp struct {
	Type   string `json:"type"`
	Format string `json:"format"`
	Items  *struct {
		Type string `json:"type"`
	} `json:"items"`
}

// definitionProps returns each definition's properties.
func definitionProps(t *testing.T) map[string]map[string]schemaProp {
	t.Helper()
	var d struct {
		Definitions map[string]struct {
			Properties map[string]schemaProp `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(Document(), &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]schemaProp{}
	for name, def := range d.Definitions {
		out[name] = def.Properties
	}
	return out
}

// TestEveryListValueOfABodyHasItsSchema: a request field typed by a
// google.protobuf.ListValue says nothing of what the server takes (the generator renders
// it as an array of objects), so it must carry a (keyhouse.api.v1.json_schema) saying
// what the handler accepts, and the document must show it. (A Value without one is
// refused by make proto, but for the *_at timestamps it types itself.)
func TestEveryListValueOfABodyHasItsSchema(t *testing.T) {
	t.Parallel()
	ops, _ := documentOperations(t)
	props := definitionProps(t)
	checked := 0
	for _, rule := range httpRules(t) {
		route := rule.method + " " + rule.path
		desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(rule.selector))
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		fields := desc.(protoreflect.MethodDescriptor).Input().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.Kind() != protoreflect.MessageKind {
				continue
			}
			if f.Message().FullName() != "google.protobuf.ListValue" {
				continue
			}
			checked++
			if proto.GetExtension(f.Options(), apiv1.E_JsonSchema).(string) == "" {
				t.Errorf("%s: %s is a %s without a (keyhouse.api.v1.json_schema)", route, f.Name(), f.Message().FullName())
			}
			for _, p := range ops[route].Parameters {
				var ref struct {
					Ref string `json:"$ref"`
				}
				_ = json.Unmarshal(p.Schema, &ref)
				if prop, ok := props[strings.TrimPrefix(ref.Ref, "#/definitions/")][string(f.Name())]; p.In == "body" && ok &&
					prop.Type == "array" && (prop.Items == nil || prop.Items.Type == "object") {
					t.Errorf("%s: %s is documented as an array of objects", route, f.Name())
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no ListValue body field checked")
	}
}

// TestABodyFieldAndTheAnswerFieldOfTheSameNameAgree: where a route's body and its 200
// answer have a field of the same name (a policy's lease_ttl_seconds), the document
// types both alike, so a client's one type fits what it sends and what it reads.
func TestABodyFieldAndTheAnswerFieldOfTheSameNameAgree(t *testing.T) {
	t.Parallel()
	ops, _ := documentOperations(t)
	props := definitionProps(t)
	checked := 0
	for route, op := range ops {
		answer := props[strings.TrimPrefix(op.Responses["200"].Schema.Ref, "#/definitions/")]
		for _, p := range op.Parameters {
			if p.In != "body" {
				continue
			}
			var ref struct {
				Ref string `json:"$ref"`
			}
			_ = json.Unmarshal(p.Schema, &ref)
			for name, sent := range props[strings.TrimPrefix(ref.Ref, "#/definitions/")] {
				read, ok := answer[name]
				if !ok || sent.Type == "" || read.Type == "" {
					continue
				}
				checked++
				// A format left out (a JSON value's own schema) says no more than the type.
				if sent.Type != read.Type || (sent.Format != "" && read.Format != "" && sent.Format != read.Format) {
					t.Errorf("%s: %s is %s (%s) in the body but %s (%s) in the answer", route, name, sent.Type, sent.Format, read.Type, read.Format)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no field of a body is in its answer")
	}
}
