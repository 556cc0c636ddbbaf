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

// requiredRoute is a route of the document whose JSON body has required fields.
type requiredRoute struct {
	method, path string
	required     []string
	properties   map[string]map[string]any
}

// pathResources makes, for each route with a path parameter and required body fields, the
// object the path names (on the self-hosted stack, with its admin key), and returns the
// path that names it: without it a 404 would come before the required fields are read.
var pathResources = map[string]func(t *testing.T, a *Client) string{
	"/v1/storefront/webhooks/{webhook_id}/secret": func(t *testing.T, a *Client) string {
		id := a.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 200).JSON(t)["webhook_id"].(string)
		return "/v1/storefront/webhooks/" + id + "/secret"
	},
}

// requiredSkipped names the routes with required fields this test does not send, and why.
// A route left out without an entry here fails the test.
var requiredSkipped = map[string]string{}

// TestOpenAPIRequiredFieldsAreEnforced holds the document's "required" lists to the
// gateway's behaviour: for every route with a JSON body, a request carrying every
// required field but one is a 400 whose error names the missing field (or is the fixed
// message api.md gives that route for missing fields). A route with a path parameter gets
// a real object to name (pathResources); operator routes are sent with the operator's
// credential on the hosted stack (the self-hosted one has no operator).
func TestOpenAPIRequiredFieldsAreEnforced(t *testing.T) {
	t.Parallel()
	self, host := selfHosted(t), hosted(t)
	raw := anon(t, self).Get("/v1/openapi.json").Expect(t, 200).Body
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
	var routes []requiredRoute
	for path, item := range doc.Paths {
		for method, op := range item {
			for _, p := range op.Parameters {
				def, ok := doc.Definitions[strings.TrimPrefix(p.Schema.Ref, "#/definitions/")]
				if p.In == "body" && ok && len(def.Required) > 0 {
					routes = append(routes, requiredRoute{strings.ToUpper(method), path, def.Required, def.Properties})
				}
			}
		}
	}
	slices.SortFunc(routes, func(a, b requiredRoute) int { return strings.Compare(a.method+" "+a.path, b.method+" "+b.path) })

	// api.md's fixed answers that do not name the field.
	fixed := []string{"Missing required fields", "Malformed or corrupt license_file"}
	checked, pathRoutes, operatorRoutes := 0, 0, 0
	for _, route := range routes {
		name := route.method + " " + route.path
		if why, ok := requiredSkipped[name]; ok {
			t.Logf("not sent: %s: %s", name, why)
			continue
		}
		c, path := admin(t, self), route.path
		switch {
		case strings.HasPrefix(route.path, "/v1/operator/"):
			c = admin(t, host)
			operatorRoutes++
		case strings.Contains(route.path, "{"):
			resolve, ok := pathResources[route.path]
			if !ok {
				t.Errorf("%s has required fields and a path parameter: add the object it names to pathResources (or, with the reason, to requiredSkipped)", name)
				continue
			}
			path = resolve(t, c)
			pathRoutes++
		}
		for _, missing := range route.required {
			body := map[string]any{}
			for f, v := range companions {
				if _, ok := route.properties[f]; ok {
					body[f] = v
				}
			}
			for _, f := range route.required {
				if f != missing {
					body[f] = dummy(f, route.properties[f])
				}
			}
			r := c.Do(route.method, path, body)
			msg, _ := r.JSON(t)["error"].(string)
			if r.Status != 400 || !(strings.Contains(msg, missing) || slices.Contains(fixed, msg)) {
				t.Errorf("%s (%s) without required %q: %d %s", name, path, missing, r.Status, r.Body)
			}
			checked++
		}
	}
	if checked < 20 || pathRoutes == 0 || operatorRoutes == 0 {
		t.Fatalf("%d required fields checked (%d routes with a path parameter, %d operator routes); the document lost its required lists",
			checked, pathRoutes, operatorRoutes)
	}
	for name := range requiredSkipped {
		method, path, _ := strings.Cut(name, " ")
		if !slices.ContainsFunc(routes, func(r requiredRoute) bool { return r.method == method && r.path == path }) {
			t.Errorf("requiredSkipped names %s, which is no route with required fields any more", name)
		}
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
