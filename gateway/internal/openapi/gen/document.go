package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// What the protos say about a REST route beyond its access and tier, written into the
// document here rather than by hand so that every route, including routes added later,
// is described the same way: required fields and real types from the field options,
// the Idempotency-Key header and the error answers from the method options.

// messages holds every message of the image by its full name (".pkg.Msg").
type messages map[string]*descriptorpb.DescriptorProto

func (ms messages) add(prefix string, list []*descriptorpb.DescriptorProto) {
	for _, m := range list {
		name := prefix + "." + m.GetName()
		ms[name] = m
		ms.add(name, m.GetNestedType())
	}
}

// bySimpleName maps a message's own name to it when no other message shares the name:
// protoc-gen-openapiv2 (openapi_naming_strategy=simple) names definitions that way.
func (ms messages) bySimpleName() map[string]*descriptorpb.DescriptorProto {
	out := map[string]*descriptorpb.DescriptorProto{}
	seen := map[string]int{}
	for _, m := range ms {
		if m.GetOptions().GetMapEntry() {
			continue
		}
		seen[m.GetName()]++
		out[m.GetName()] = m
	}
	for name, n := range seen {
		if n > 1 {
			delete(out, name)
		}
	}
	return out
}

// wrapperTypes are the message types the gateway writes as null when unset (it emits
// unpopulated fields): their properties are nullable.
var wrapperTypes = map[string]bool{
	".google.protobuf.Timestamp": true, ".google.protobuf.StringValue": true,
	".google.protobuf.Int32Value": true, ".google.protobuf.Int64Value": true,
	".google.protobuf.UInt32Value": true, ".google.protobuf.DoubleValue": true,
	".google.protobuf.BoolValue": true,
}

// timestampOrNull is a google.protobuf.Value field named *_at without a json_schema:
// api.md's timestamps, an RFC 3339 string or null.
var timestampOrNull = object{"type": "string", "format": "date-time", "x-nullable": true}

// applyMessage types a definition's properties from the message's fields and, for a
// request, lists its required fields. skip names fields that are not in the definition
// (path parameters of a body "*" route).
func applyMessage(def object, m *descriptorpb.DescriptorProto, request bool, skip map[string]bool) error {
	props, _ := def["properties"].(object)
	var required []any
	for _, f := range m.GetField() {
		name := f.GetName()
		prop, ok := props[name].(object)
		if !ok || skip[name] {
			continue
		}
		opts := f.GetOptions()
		if schema := proto.GetExtension(opts, apiv1.E_JsonSchema).(string); schema != "" {
			var typed object
			if err := json.Unmarshal([]byte(schema), &typed); err != nil {
				return fmt.Errorf("%s.%s: (keyhouse.api.v1.json_schema): %w", m.GetName(), name, err)
			}
			if d, ok := prop["description"]; ok {
				if _, own := typed["description"]; !own {
					typed["description"] = d
				}
			}
			props[name] = typed
		} else if f.GetTypeName() == ".google.protobuf.Value" && strings.HasSuffix(name, "_at") {
			for k, v := range timestampOrNull {
				prop[k] = v
			}
		} else if wrapperTypes[f.GetTypeName()] {
			prop["x-nullable"] = true
		}
		if request && proto.GetExtension(opts, apiv1.E_Required).(bool) {
			required = append(required, name)
		}
	}
	if len(required) > 0 {
		def["required"] = required
	} else if request {
		delete(def, "required")
	}
	return nil
}

// int64Field reports a 64-bit integer field, plain or wrapped (google.protobuf.Int64Value).
func int64Field(f *descriptorpb.FieldDescriptorProto) bool {
	switch f.GetType() {
	case descriptorpb.FieldDescriptorProto_TYPE_INT64, descriptorpb.FieldDescriptorProto_TYPE_UINT64,
		descriptorpb.FieldDescriptorProto_TYPE_SINT64, descriptorpb.FieldDescriptorProto_TYPE_FIXED64,
		descriptorpb.FieldDescriptorProto_TYPE_SFIXED64:
		return true
	}
	return f.GetTypeName() == ".google.protobuf.Int64Value" || f.GetTypeName() == ".google.protobuf.UInt64Value"
}

// typeInt64sAsIntegers types the 64-bit integer fields of a definition the server reads
// (a request body and the messages inside it) as integers. protoc-gen-openapiv2 types them
// as strings, protojson's canonical form, but the gateway's decoder refuses a string
// where api.md says number (edge's noStringNumbers), wrapper types included. A field with
// a (keyhouse.api.v1.json_schema) keeps its own schema.
func typeInt64sAsIntegers(def object, m *descriptorpb.DescriptorProto) {
	props, _ := def["properties"].(object)
	for _, f := range m.GetField() {
		prop, ok := props[f.GetName()].(object)
		if !ok || !int64Field(f) || proto.GetExtension(f.GetOptions(), apiv1.E_JsonSchema).(string) != "" {
			continue
		}
		if f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED {
			prop, _ = prop["items"].(object)
		}
		if prop["type"] == "string" {
			prop["type"] = "integer"
		}
	}
}

// readDefinitions are the definitions the server reads: the request bodies and every
// definition they refer to, however deep.
func readDefinitions(defs object, requestDefs map[string]bool) map[string]bool {
	read := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case object:
			if ref, ok := x["$ref"].(string); ok {
				if name, ok := strings.CutPrefix(ref, "#/definitions/"); ok && !read[name] {
					read[name] = true
					walk(defs[name])
				}
			}
			for _, child := range x {
				walk(child)
			}
		case []any:
			for _, child := range x {
				walk(child)
			}
		}
	}
	for name := range requestDefs {
		read[name] = true
		walk(defs[name])
	}
	return read
}

// documentSchemas types every definition that names a message and refuses a property
// left without a type: a google.protobuf.Value needs a (keyhouse.api.v1.json_schema).
// The 64-bit integers of an answer stay strings: protojson writes them so.
func documentSchemas(defs object, ms messages, requestDefs map[string]bool) error {
	simple := ms.bySimpleName()
	read := readDefinitions(defs, requestDefs)
	var errs []string
	for _, name := range sortedKeys(defs) {
		def, _ := defs[name].(object)
		if m, ok := simple[name]; ok && !requestDefs[name] {
			if err := applyMessage(def, m, false, nil); err != nil {
				errs = append(errs, err.Error())
			}
			if read[name] {
				typeInt64sAsIntegers(def, m)
			}
		}
		props, _ := def["properties"].(object)
		for _, p := range sortedKeys(props) {
			if prop, _ := props[p].(object); !typed(prop) {
				errs = append(errs, fmt.Sprintf("definition %s: property %q has no type: give its proto field a (keyhouse.api.v1.json_schema)", name, p))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func typed(s object) bool {
	for _, k := range []string{"type", "$ref", "allOf"} {
		if _, ok := s[k]; ok {
			return true
		}
	}
	return false
}

// documentRequest marks the operation's required parameters and body fields from its
// input message; it returns the body definition it typed, if any.
func documentRequest(op operation, m method, ms messages, defs object) (bodyDef string, err error) {
	in := ms[m.input]
	if in == nil {
		return "", fmt.Errorf("%s %s: input message %s not in the image", op.method, op.path, m.input)
	}
	fields := map[string]*descriptorpb.FieldDescriptorProto{}
	for _, f := range in.GetField() {
		fields[f.GetName()] = f
	}
	pathParams := map[string]bool{}
	for _, p := range asSlice(op.op["parameters"]) {
		param, _ := p.(object)
		switch param["in"] {
		case "path":
			pathParams[param["name"].(string)] = true
		case "query":
			f := fields[param["name"].(string)]
			if f != nil && proto.GetExtension(f.GetOptions(), apiv1.E_Required).(bool) {
				param["required"] = true
			}
			if f != nil && int64Field(f) && param["type"] == "string" {
				param["type"] = "integer" // as in a body: typeInt64sAsIntegers
			}
		}
	}
	for _, p := range asSlice(op.op["parameters"]) {
		param, _ := p.(object)
		if param["in"] != "body" {
			continue
		}
		schema, _ := param["schema"].(object)
		ref, _ := schema["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok {
			continue
		}
		def, _ := defs[name].(object)
		if def == nil {
			return "", fmt.Errorf("%s %s: body definition %s missing", op.method, op.path, name)
		}
		if err := applyMessage(def, in, true, pathParams); err != nil {
			return name, err
		}
		typeInt64sAsIntegers(def, in)
		return name, nil
	}
	return "", nil
}

// idempotencyKeyHeader is the header parameter of a method with (keyhouse.api.v1.idempotency_key).
func idempotencyKeyHeader() object {
	return object{
		"name": "Idempotency-Key", "in": "header", "required": false, "type": "string", "maxLength": 255,
		"description": "Makes a retry safe: within 24 hours, the same key with the same request returns the first answer and creates nothing; the same key with another request is a 409.",
	}
}

// errorStatuses are the error answers of an operation served by a gRPC method: those
// every route of its kind gives, then the method's own (keyhouse.api.v1.http_errors). A
// route with a body, hand-written or not, is a 413 over the edge's cap, a 415 for a
// Content-Encoding other than gzip and a 400 for gzip that does not decompress (addendum
// §6): the edge answers these before any handler reads the body.
func errorStatuses(op operation, m method, generated bool) map[int][]string {
	out := map[int][]string{}
	hasInput, hasBody := false, false
	for _, p := range asSlice(op.op["parameters"]) {
		param, _ := p.(object)
		hasInput = true
		hasBody = hasBody || param["in"] == "body"
	}
	if generated && hasInput {
		out[400] = append(out[400], "Invalid parameters or body; the error names the field or value refused.")
	}
	if hasBody {
		out[400] = append(out[400], "Invalid gzip body.")
		out[413] = append(out[413], "Request body too large.")
		out[415] = append(out[415], "Unsupported Content-Encoding: use gzip or none.")
	}
	if generated {
		if m.access != apiv1.Access_ACCESS_PUBLIC {
			out[403] = append(out[403], "Unauthorized: the API key is missing or wrong.")
		}
		out[503] = append(out[503], "A service behind the route is unavailable or lost a race with a concurrent update; retrying is correct.")
	}
	if m.idempotencyKey {
		out[400] = append(out[400], "Idempotency-Key must be at most 255 characters; Idempotency-Key must be printable ASCII; Idempotency-Key must not be blank; Idempotency-Key must be sent once.")
		out[409] = append(out[409], "Idempotency-Key reused with a different request.")
	}
	for _, e := range m.httpErrors {
		out[int(e.GetStatus())] = append(out[int(e.GetStatus())], e.GetWhen())
	}
	return out
}

// errorSchemas are the definitions of a method's error bodies that carry siblings of
// "error" (HttpError.schema), by status: every answer of that status is typed by it.
func errorSchemas(m method) map[int]string {
	out := map[int]string{}
	for _, e := range m.httpErrors {
		if e.GetSchema() != "" {
			out[int(e.GetStatus())] = e.GetSchema()
		}
	}
	return out
}

// addErrors writes the error answers into the operation's responses, typed by Error
// unless schemas names another definition for the status; an answer the operation
// already describes (a hand-written route's) is kept as written.
func addErrors(op operation, statuses map[int][]string, schemas map[int]string) {
	responses, _ := op.op["responses"].(object)
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		key := strconv.Itoa(c)
		if _, written := responses[key]; written {
			continue
		}
		def := "Error"
		if s, ok := schemas[c]; ok {
			def = s
		}
		responses[key] = object{
			"description": strings.Join(statuses[c], " Or: "),
			"schema":      object{"$ref": "#/definitions/" + def},
		}
	}
}

// documentSummary keeps the summary to the first sentence of the method's comment (the
// rest goes to the description) and gives a method without a comment a summary from
// its name, so every operation has one.
func documentSummary(op operation, methodName string) {
	summary, _ := op.op["summary"].(string)
	desc, _ := op.op["description"].(string)
	summary = strings.Join(strings.Fields(summary), " ")
	if summary == "" {
		summary = humanize(methodName) + "."
	}
	if first, rest, found := cutSentence(summary); found {
		summary = first
		desc = strings.TrimSpace(rest + "\n\n" + desc)
	}
	op.op["summary"] = summary
	if desc != "" {
		op.op["description"] = desc
	}
}

// cutSentence splits after the first full stop followed by a space, when one ends
// the first sentence before the end of the text.
func cutSentence(s string) (first, rest string, found bool) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' {
			// "e.g. " and "i.e. " do not end a sentence.
			if i >= 3 && (s[i-3:i+1] == "e.g." || s[i-3:i+1] == "i.e.") {
				continue
			}
			return s[:i+1], strings.TrimSpace(s[i+2:]), true
		}
	}
	return s, "", false
}

// humanize turns "ListLicenses" into "List licenses".
func humanize(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// tidySchemas walks the whole document: a $ref with siblings (protoc-gen-openapiv2 writes
// "type": "object" next to one, and a field's comment as its description) becomes an
// allOf, which Swagger 2.0 reads, and the buf lint directives protoc-gen-openapiv2 copies
// from field comments into titles and descriptions are dropped.
func tidySchemas(v any) {
	switch x := v.(type) {
	case object:
		for _, k := range []string{"title", "description"} {
			if s, ok := x[k].(string); ok && strings.Contains(s, "buf:lint:") {
				if s = dropLintDirectives(s); s == "" {
					delete(x, k)
				} else {
					x[k] = s
				}
			}
		}
		if ref, ok := x["$ref"]; ok {
			delete(x, "type")
			if len(x) > 1 {
				delete(x, "$ref")
				x["allOf"] = []any{object{"$ref": ref}}
			}
		}
		for _, child := range x {
			tidySchemas(child)
		}
	case []any:
		for _, child := range x {
			tidySchemas(child)
		}
	}
}

func dropLintDirectives(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "buf:lint:") {
			keep = append(keep, line)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// serviceComments reads each service's leading comment from the image's source info,
// by service name: the description of the service's tag.
func serviceComments(set *descriptorpb.FileDescriptorSet) map[string]string {
	out := map[string]string{}
	for _, f := range set.GetFile() {
		for _, loc := range f.GetSourceCodeInfo().GetLocation() {
			// [6, i] is the i-th service of the file.
			if p := loc.GetPath(); len(p) == 2 && p[0] == 6 && loc.GetLeadingComments() != "" {
				name := f.GetService()[p[1]].GetName()
				out[name] = strings.Join(strings.Fields(dropLintDirectives(loc.GetLeadingComments())), " ")
			}
		}
	}
	return out
}
