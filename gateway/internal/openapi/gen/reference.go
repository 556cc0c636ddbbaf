package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
)

// The route reference of docs/reference/api.md: every operation of the document with its
// access, rate tier, fields and error answers, written between two markers by the same
// run that writes the document, so the reference lists every route the gateway serves.
const (
	referenceBegin = "<!-- BEGIN ROUTE REFERENCE: written by make proto (gateway/internal/openapi/gen); edit the protos, not this section -->"
	referenceEnd   = "<!-- END ROUTE REFERENCE -->"
)

func writeReference(path string, doc object) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(raw)
	section := referenceBegin + "\n" + renderReference(doc) + referenceEnd + "\n"
	before, rest, found := strings.Cut(text, referenceBegin)
	if !found {
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	} else {
		_, after, ok := strings.Cut(rest, referenceEnd+"\n")
		if !ok {
			return fmt.Errorf("%s: %q without %q", path, referenceBegin, referenceEnd)
		}
		text = before + section + after
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

func renderReference(doc object) string {
	var b strings.Builder
	defs, _ := doc["definitions"].(object)
	paths, _ := doc["paths"].(object)
	b.WriteString("\n## Route reference\n\n")
	b.WriteString("Every route the gateway serves, the contract's and Keyhouse's own, as the OpenAPI document\n")
	b.WriteString("(`GET /v1/openapi.json`) describes it. Access: public (no credential), tenant (self-hosted:\n")
	b.WriteString("the admin key; hosted: the tenant's API key) or admin (the admin key). Every error body is\n")
	b.WriteString("`{\"error\": \"…\"}`; limited routes also answer 429 as the Limits section says.\n")
	for _, op := range operations(paths) {
		fmt.Fprintf(&b, "\n### %s %s\n\n", op.method, op.path)
		if s, _ := op.op["summary"].(string); s != "" {
			b.WriteString(escapeHTML(s) + "\n\n")
		}
		if d, _ := op.op["description"].(string); d != "" {
			b.WriteString(escapeHTML(strings.TrimSpace(d)) + "\n\n")
		}
		fmt.Fprintf(&b, "Access: %s. Rate tier: %s.", op.op[openapi.ExtAccess], op.op[openapi.ExtRateTier])
		if op.op[openapi.ExtPerLicenseKey] == true {
			b.WriteString(" Also counted per license key.")
		}
		b.WriteString("\n")
		var inputs [][]string
		for _, p := range asSlice(op.op["parameters"]) {
			param, _ := p.(object)
			in, _ := param["in"].(string)
			name, _ := param["name"].(string)
			if in == "body" {
				schema, _ := param["schema"].(object)
				inputs = append(inputs, fieldRows(schema, defs, "body")...)
				continue
			}
			inputs = append(inputs, []string{"`" + name + "`", in, typeOf(param, defs), yesNo(param["required"] == true), oneLine(param["description"])})
		}
		if len(inputs) > 0 {
			b.WriteString("\n| Field | In | Type | Required | Notes |\n|---|---|---|---|---|\n")
			for _, r := range inputs {
				b.WriteString("| " + strings.Join(r, " | ") + " |\n")
			}
		}
		responses, _ := op.op["responses"].(object)
		if ok, _ := responses["200"].(object); ok != nil {
			schema, _ := ok["schema"].(object)
			if rows := fieldRows(schema, defs, ""); len(rows) > 0 {
				b.WriteString("\n| Response field | Type | Notes |\n|---|---|---|\n")
				for _, r := range rows {
					b.WriteString("| " + r[0] + " | " + r[2] + " | " + r[4] + " |\n")
				}
			} else if schema != nil {
				fmt.Fprintf(&b, "\nResponse: %s.\n", typeOf(schema, defs))
			}
		}
		var codes []string
		for code := range responses {
			if code != "200" && code != "default" {
				codes = append(codes, code)
			}
		}
		sort.Strings(codes)
		if len(codes) > 0 {
			b.WriteString("\n| Status | When |\n|---|---|\n")
			for _, c := range codes {
				r, _ := responses[c].(object)
				fmt.Fprintf(&b, "| %s | %s |\n", c, oneLine(r["description"]))
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// fieldRows lists the properties of a schema (following one $ref or allOf): name, where,
// type, required, notes.
func fieldRows(schema, defs object, in string) [][]string {
	schema = resolve(schema, defs)
	props, _ := schema["properties"].(object)
	required := map[string]bool{}
	for _, r := range asSlice(schema["required"]) {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	var rows [][]string
	for _, name := range sortedKeys(props) {
		p, _ := props[name].(object)
		rows = append(rows, []string{"`" + name + "`", in, typeOf(p, defs), yesNo(required[name]), oneLine(p["description"])})
	}
	return rows
}

func resolve(schema, defs object) object {
	for range 3 {
		if all := asSlice(schema["allOf"]); len(all) == 1 {
			schema, _ = all[0].(object)
		}
		ref, _ := schema["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok {
			return schema
		}
		schema, _ = defs[name].(object)
	}
	return schema
}

// typeOf renders a schema's type for the reference: string (date-time), array of X,
// object, a definition's name, "or null" when nullable.
func typeOf(s, defs object) string {
	if s == nil {
		return ""
	}
	t := ""
	switch {
	case s["$ref"] != nil || s["allOf"] != nil:
		ref, _ := s["$ref"].(string)
		if all := asSlice(s["allOf"]); len(all) == 1 {
			inner, _ := all[0].(object)
			ref, _ = inner["$ref"].(string)
		}
		t = "object (" + strings.TrimPrefix(ref, "#/definitions/") + ")"
	case s["type"] == "array":
		items, _ := s["items"].(object)
		t = "array of " + typeOf(items, defs)
	case s["type"] == "object":
		t = "object"
		if ap, ok := s["additionalProperties"].(object); ok {
			t = "object of " + typeOf(ap, defs)
		}
	default:
		t, _ = s["type"].(string)
		if f, _ := s["format"].(string); f != "" {
			t += " (" + f + ")"
		}
	}
	if s["x-nullable"] == true {
		t += " or null"
	}
	return t
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

func oneLine(v any) string {
	s, _ := v.(string)
	return escapeHTML(strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", "\\|"))
}

// escapeHTML keeps placeholders such as <key> visible: Markdown would read them as tags.
func escapeHTML(s string) string { return strings.ReplaceAll(s, "<", "&lt;") }
