package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// requiredDummies are values of the right type for required fields, so that a request
// missing one required field is refused for that field, not for its neighbours.
var requiredDummies = map[string]any{
	"url":    "https://receiver.invalid/hook",
	"events": []string{"*"},
	"email":  "support@example.test",
}

// companions are fields sent whenever the body has them: one of them is required
// without either being required alone (a mapping names a payment_link or a service_ref).
var companions = map[string]any{"service_ref": "svc-openapi-required"}

// TestOpenAPIRequiredFieldsAreEnforced holds the document's "required" lists to the
// gateway's behaviour: for every route with a JSON body, a request carrying every
// required field but one is a 400 whose error names the missing field (or is the fixed
// message api.md gives that route for missing fields). Routes with a path parameter are
// left out: the object it names does not exist here, and that 404 comes first.
func TestOpenAPIRequiredFieldsAreEnforced(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	raw := anon(t, s).Get("/v1/openapi.json").Expect(t, 200).Body
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				In     string `json:"in"`
				Schema struct {
					Ref string `json:"$ref"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
		Definitions map[string]struct {
			Required   []string                  `json:"required"`
			Properties map[string]map[string]any `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// api.md's fixed answers that do not name the field.
	fixed := []string{"Missing required fields", "Malformed or corrupt license_file"}
	checked := 0
	for path, item := range doc.Paths {
		if strings.HasPrefix(path, "/v1/operator/") {
			continue // admin key only in hosted mode; the self-hosted stack refuses it first
		}
		if strings.Contains(path, "{") {
			continue // the object the path names does not exist here: a 404 comes first
		}
		for method, op := range item {
			for _, p := range op.Parameters {
				def, ok := doc.Definitions[strings.TrimPrefix(p.Schema.Ref, "#/definitions/")]
				if p.In != "body" || !ok || len(def.Required) == 0 {
					continue
				}
				for _, missing := range def.Required {
					body := map[string]any{}
					for f, v := range companions {
						if _, ok := def.Properties[f]; ok {
							body[f] = v
						}
					}
					for _, f := range def.Required {
						if f != missing {
							body[f] = dummy(f, def.Properties[f])
						}
					}
					r := admin(t, s).Do(strings.ToUpper(method), path, body)
					msg, _ := r.JSON(t)["error"].(string)
					if r.Status != 400 || !(strings.Contains(msg, missing) || slices.Contains(fixed, msg)) {
						t.Errorf("%s %s without required %q: %d %s", strings.ToUpper(method), path, missing, r.Status, r.Body)
					}
					checked++
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d required fields checked; the document lost its required lists", checked)
	}
}

func dummy(name string, schema map[string]any) any {
	if v, ok := requiredDummies[name]; ok {
		return v
	}
	switch schema["type"] {
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "object":
		return map[string]any{}
	case "array":
		return []any{}
	}
	return "x-" + name
}
