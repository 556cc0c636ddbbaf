// Command gen writes gateway/internal/openapi/openapi.json (run by `make proto`): the
// document protoc-gen-openapiv2 rendered from the http.yaml routes, plus the hand-written
// routes of handwritten.json, with every operation stamped with its gRPC method, access
// level and rate tier as declared on that method in the protos. It fails for a routed
// method without a rate tier, so no route reaches the gateway unclassified.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	swagger := flag.String("swagger", ".keyhouse/openapi/keyhouse.swagger.json", "protoc-gen-openapiv2's merged output")
	image := flag.String("image", ".keyhouse/openapi/image.binpb", "buf build's image of proto/ (for the method options)")
	handwritten := flag.String("handwritten", "gateway/internal/openapi/handwritten.json", "the hand-written routes")
	out := flag.String("out", "gateway/internal/openapi/openapi.json", "the document to write")
	reference := flag.String("reference", "docs/reference/api.md", "the API reference whose route section is written from the document")
	flag.Parse()
	if err := run(*swagger, *image, *handwritten, *out, *reference); err != nil {
		fmt.Fprintln(os.Stderr, "openapi gen:", err)
		os.Exit(1)
	}
}

// method is what the protos declare about one gRPC method.
type method struct {
	full           string // /pkg.Service/Method
	name           string // Method
	input          string // .pkg.Request
	access         apiv1.Access
	rateLimit      *apiv1.RateLimit
	idempotencyKey bool
	httpErrors     []*apiv1.HttpError
}

type object = map[string]any

func run(swaggerPath, imagePath, handwrittenPath, outPath, referencePath string) error {
	byFull, byOperationID, msgs, services, err := loadMethods(imagePath)
	if err != nil {
		return err
	}
	doc, err := readJSON(swaggerPath)
	if err != nil {
		return err
	}
	hand, err := readJSON(handwrittenPath)
	if err != nil {
		return err
	}

	// Generated operations: the operationId ("Service_Method") names the method.
	paths, _ := doc["paths"].(object)
	if paths == nil {
		paths = object{}
	}
	defs, _ := doc["definitions"].(object)
	if defs == nil {
		defs = object{}
	}
	requestDefs := map[string]bool{}
	var errorDefs []map[int]string
	var errs []error
	for _, op := range operations(paths) {
		path := op.path
		id, _ := op.op["operationId"].(string)
		m, ok := byOperationID[id]
		if !ok {
			errs = append(errs, fmt.Errorf("%s %s: operationId %q names no single gRPC method", op.method, path, id))
			continue
		}
		op.op[openapi.ExtGRPCMethod] = m.full
		bodyDef, err := documentRequest(op, m, msgs, defs)
		if bodyDef != "" {
			requestDefs[bodyDef] = true
		}
		if m.idempotencyKey {
			op.op["parameters"] = append(asSlice(op.op["parameters"]), idempotencyKeyHeader())
		}
		documentSummary(op, m.name)
		addErrors(op, errorStatuses(op, m, true), errorSchemas(m))
		errorDefs = append(errorDefs, errorSchemas(m))
		errs = append(errs, err, stamp(op, m))
	}

	// Hand-written operations: added as written; the tier and access come from the
	// x-keyhouse-grpc-method they name, or are written out when the gateway answers itself.
	handPaths, _ := hand["paths"].(object)
	for _, op := range operations(handPaths) {
		path := op.path
		if existing, ok := paths[path].(object); ok && existing[op.key] != nil {
			errs = append(errs, fmt.Errorf("%s %s: both an http.yaml route and a hand-written one", op.method, path))
			continue
		}
		if full, ok := op.op[openapi.ExtGRPCMethod].(string); ok {
			m, found := byFull[full]
			if !found {
				errs = append(errs, fmt.Errorf("%s %s: %s %q is not a method of the protos", op.method, path, openapi.ExtGRPCMethod, full))
				continue
			}
			addErrors(op, errorStatuses(op, m, false), errorSchemas(m))
			errorDefs = append(errorDefs, errorSchemas(m))
			documentSummary(op, m.name)
			errs = append(errs, stamp(op, m))
		} else {
			errs = append(errs, decorate(op))
		}
		item, _ := paths[path].(object)
		if item == nil {
			item = object{}
			paths[path] = item
		}
		item[op.key] = op.op
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	doc["paths"] = paths

	for _, k := range []string{"info", "securityDefinitions"} {
		if v, ok := hand[k]; ok {
			doc[k] = v
		}
	}
	handDefs, _ := hand["definitions"].(object)
	for name, d := range handDefs {
		if _, dup := defs[name]; dup {
			return fmt.Errorf("definition %q is both generated and hand-written", name)
		}
		defs[name] = d
	}
	for _, byStatus := range errorDefs {
		for _, name := range byStatus {
			if _, ok := defs[name]; !ok {
				return fmt.Errorf("(keyhouse.api.v1.http_errors) schema %q is no definition: write it in %s", name, handwrittenPath)
			}
		}
	}
	if err := documentSchemas(defs, msgs, requestDefs); err != nil {
		return err
	}
	doc["definitions"] = defs
	// Tags: one per service plus the hand-written ones, sorted.
	tags := map[string]bool{}
	for _, op := range operations(paths) {
		for _, t := range asSlice(op.op["tags"]) {
			if s, ok := t.(string); ok {
				tags[s] = true
			}
		}
	}
	var tagList []any
	for _, t := range sortedKeys(tags) {
		desc := services[t]
		if desc == "" {
			desc = "The " + humanize(t) + " routes."
		}
		tagList = append(tagList, object{"name": t, "description": desc})
	}
	doc["tags"] = tagList
	tidySchemas(doc["definitions"])
	tidySchemas(doc["paths"])

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	// The gateway's own reading of the document must accept what was written.
	if _, err := openapi.Parse(buf.Bytes()); err != nil {
		return err
	}
	if err := os.WriteFile(outPath, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return writeReference(referencePath, doc)
}

// loadMethods reads every method of a buf image, with the keyhouse method options.
func loadMethods(imagePath string) (byFull, byOperationID map[string]method, msgs messages, services map[string]string, err error) {
	raw, err := os.ReadFile(imagePath)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var set descriptorpb.FileDescriptorSet
	// apiv1 is linked in, so its extensions are parsed rather than kept as unknown fields.
	if err := proto.Unmarshal(raw, &set); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s: %w", imagePath, err)
	}
	byFull, byOperationID, msgs = map[string]method{}, map[string]method{}, messages{}
	ambiguous := map[string]bool{}
	for _, f := range set.GetFile() {
		msgs.add("."+f.GetPackage(), f.GetMessageType())
		for _, s := range f.GetService() {
			for _, md := range s.GetMethod() {
				m := method{full: "/" + f.GetPackage() + "." + s.GetName() + "/" + md.GetName(), name: md.GetName(), input: md.GetInputType()}
				if opts := md.GetOptions(); opts != nil {
					m.access = proto.GetExtension(opts, apiv1.E_Access).(apiv1.Access)
					m.rateLimit = proto.GetExtension(opts, apiv1.E_RateLimit).(*apiv1.RateLimit)
					m.idempotencyKey = proto.GetExtension(opts, apiv1.E_IdempotencyKey).(bool)
					m.httpErrors = proto.GetExtension(opts, apiv1.E_HttpErrors).([]*apiv1.HttpError)
				}
				byFull[m.full] = m
				id := s.GetName() + "_" + md.GetName()
				if _, dup := byOperationID[id]; dup {
					ambiguous[id] = true
				}
				byOperationID[id] = m
			}
		}
	}
	for id := range ambiguous {
		delete(byOperationID, id)
	}
	return byFull, byOperationID, msgs, serviceComments(&set), nil
}

var tierNames = map[apiv1.RateTier]string{
	apiv1.RateTier_RATE_TIER_NONE:       openapi.TierNone,
	apiv1.RateTier_RATE_TIER_VALIDATION: openapi.TierValidation,
	apiv1.RateTier_RATE_TIER_ACTIVATION: openapi.TierActivation,
	apiv1.RateTier_RATE_TIER_PUBLIC:     openapi.TierPublic,
	apiv1.RateTier_RATE_TIER_MANAGEMENT: openapi.TierManagement,
	apiv1.RateTier_RATE_TIER_ADMIN_INFO: openapi.TierAdminInfo,
	apiv1.RateTier_RATE_TIER_IMPORT:     openapi.TierImport,
}

var accessNames = map[apiv1.Access]string{
	apiv1.Access_ACCESS_PUBLIC: "public",
	apiv1.Access_ACCESS_TENANT: "tenant",
	apiv1.Access_ACCESS_ADMIN:  "admin",
}

// stamp writes a method's declared access and rate tier onto its operation.
func stamp(op operation, m method) error {
	path := op.path
	tier, ok := tierNames[m.rateLimit.GetTier()]
	if !ok {
		return fmt.Errorf("%s %s: %s has no (keyhouse.api.v1.rate_limit) tier: declare one next to its access option", op.method, path, m.full)
	}
	access, ok := accessNames[m.access]
	if !ok {
		return fmt.Errorf("%s %s: %s has access %s, which no REST route may have", op.method, path, m.full, m.access)
	}
	if _, set := op.op[openapi.ExtRateTier]; set {
		return fmt.Errorf("%s %s: the tier comes from %s's proto option, not from the document", op.method, path, m.full)
	}
	op.op[openapi.ExtRateTier] = tier
	op.op[openapi.ExtAccess] = access
	if m.rateLimit.GetPerLicenseKey() {
		op.op[openapi.ExtPerLicenseKey] = true
	}
	return decorate(op)
}

// decorate adds what every operation shares: the bearer requirement of tenant and admin
// routes, the error body, and the rate-limit headers and 429 of limited routes.
func decorate(op operation) error {
	tier, _ := op.op[openapi.ExtRateTier].(string)
	access, _ := op.op[openapi.ExtAccess].(string)
	if tier == "" || access == "" {
		return fmt.Errorf("%s %s: a route without a gRPC method states %s and %s", op.method, op.path, openapi.ExtRateTier, openapi.ExtAccess)
	}
	if access == "public" {
		op.op["security"] = []any{}
	} else {
		op.op["security"] = []any{object{"bearer": []any{}}}
	}
	responses, _ := op.op["responses"].(object)
	if responses == nil {
		responses = object{}
		op.op["responses"] = responses
	}
	if _, ok := responses["default"]; !ok {
		responses["default"] = object{
			"description": "An unexpected server error (500); the body never names internals.",
			"schema":      object{"$ref": "#/definitions/Error"},
		}
	}
	if tier == openapi.TierNone {
		return nil
	}
	for code, r := range responses {
		if resp, ok := r.(object); ok && code != "default" {
			resp["headers"] = rateLimitHeaders(code == "429")
		}
	}
	responses["429"] = object{
		"description": "The " + tier + " tier's limit is reached for this client (or, where the per-license-key limit applies, for this license key).",
		"schema":      object{"$ref": "#/definitions/RateLimited"},
		"headers":     rateLimitHeaders(true),
	}
	return nil
}

func rateLimitHeaders(retryAfter bool) object {
	h := object{
		"X-RateLimit-Limit":     object{"type": "integer", "description": "Requests allowed in the window."},
		"X-RateLimit-Remaining": object{"type": "integer", "description": "Requests left in the window."},
		"X-RateLimit-Reset":     object{"type": "integer", "description": "Unix time (seconds) the window resets."},
	}
	if retryAfter {
		h["Retry-After"] = object{"type": "integer", "description": "Seconds until the window resets."}
	}
	return h
}

type operation struct {
	path, key, method string // "/v1/x", "get", "GET"
	op                object
}

// operations lists the operations of a paths object, by path then method.
func operations(paths object) []operation {
	var ops []operation
	for _, path := range sortedKeys(paths) {
		item, _ := paths[path].(object)
		for _, key := range sortedKeys(item) {
			op, ok := item[key].(object)
			if !ok || key == "parameters" {
				continue
			}
			ops = append(ops, operation{path: path, key: key, method: strings.ToUpper(key), op: op})
		}
	}
	return ops
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func readJSON(path string) (object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v object
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
