package e2e

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
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

// companions are fields sent, by route, whenever the body goes: one of them is required
// without either being required alone (a mapping names a payment_link or a service_ref;
// a lease request a token or, for a bound seat, an instance_id).
var companions = map[string]map[string]any{
	"POST /v1/storefront/mappings": {"service_ref": "svc-openapi-required"},
	"POST /v1/leases":              {"token": "x-token"},
}

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
	// The body is checked before the event is looked up: any event id does.
	"/v1/events/{event_id}/redeliver": func(*testing.T, *Client) string { return "/v1/events/evt_none/redeliver" },
}

// requiredSkipped names the routes with required fields this test does not send, and why.
// A route left out without an entry here fails the test.
var requiredSkipped = map[string]string{
	"POST /v1/check-update": "key is the route's credential: without it the answer is a wrong key's, 404 License key not found (TestOpenAPIAnswersMatchTheDocument asks it)",
}

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
			maps.Copy(body, companions[name])
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

// openAPIOperation is the part of an operation of the served document the test below reads.
type openAPIOperation struct {
	Parameters []struct {
		In     string `json:"in"`
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"parameters"`
	Responses map[string]json.RawMessage `json:"responses"`
	Access    string                     `json:"x-keyhouse-access"`
}

// TestOpenAPIListsWhatTheHandlersRefuse holds the served document to the handlers the
// other way round from TestOpenAPIRequiredFieldsAreEnforced:
//   - a body carrying every field the document marks required (and the route's
//     companions) is never refused for a field of the body it left out: such a field is
//     required, and the document must say so;
//   - every status a route with a path parameter answers for an id that names nothing
//     (404 for most) is one the document lists for that route.
//
// It runs on a stack of its own, since complete bodies create what they describe; the
// operator's routes, whose bodies the other test covers, are asked on the shared hosted
// stack, for an unknown tenant only.
func TestOpenAPIListsWhatTheHandlersRefuse(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	host := hosted(t)
	var doc struct {
		Paths       map[string]map[string]openAPIOperation `json:"paths"`
		Definitions map[string]struct {
			Required   []string                  `json:"required"`
			Properties map[string]map[string]any `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(anon(t, s).Get("/v1/openapi.json").Expect(t, 200).Body, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for path, item := range doc.Paths {
		for method := range item {
			names = append(names, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(names)
	bodies, statuses := 0, 0
	for _, name := range names {
		method, path, _ := strings.Cut(name, " ")
		op := doc.Paths[path][strings.ToLower(method)]
		operator := strings.HasPrefix(path, "/v1/operator/")
		c := admin(t, s)
		if operator {
			c = admin(t, host)
		}
		concrete := pathParam.ReplaceAllString(path, "x")
		for _, p := range op.Parameters {
			def, ok := doc.Definitions[strings.TrimPrefix(p.Schema.Ref, "#/definitions/")]
			if p.In != "body" || !ok || operator {
				continue
			}
			body := map[string]any{}
			maps.Copy(body, companions[name])
			for _, f := range def.Required {
				body[f] = dummy(f, def.Properties[f])
			}
			r := c.Do(method, concrete, body)
			msg, _ := r.JSON(t)["error"].(string)
			for f := range def.Properties {
				if _, sent := body[f]; !sent && r.Status == 400 && strings.HasPrefix(msg, f+" ") {
					t.Errorf("%s: a body with every documented required field is refused for %s (%s): mark it required", name, f, msg)
				}
			}
			bodies++
		}
		if !strings.Contains(path, "{") {
			continue
		}
		var r *Response
		if method == http.MethodGet || method == http.MethodDelete {
			r = c.Do(method, concrete, nil)
		} else {
			r = c.Do(method, concrete, map[string]any{})
		}
		if _, listed := op.Responses[strconv.Itoa(r.Status)]; r.Status >= 400 && !listed {
			t.Errorf("%s (%s): %d %s, a status the document does not list for the route", name, concrete, r.Status, r.Body)
		}
		statuses++
	}
	if bodies < 30 || statuses < 15 {
		t.Fatalf("%d bodies and %d unknown ids checked; the document lost its routes", bodies, statuses)
	}
}
