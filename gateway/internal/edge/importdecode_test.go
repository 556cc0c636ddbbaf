package edge

import (
	"context"
	"strings"
	"testing"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// licensingAnsweringImports answers ImportLicenses as licensing does for the items the
// decoder empties: invalid, for want of a key; every other item imported.
type licensingAnsweringImports struct {
	licensingv1.LicensingServiceClient
	got *licensingv1.ImportLicensesRequest
}

func (l *licensingAnsweringImports) ImportLicenses(_ context.Context, req *licensingv1.ImportLicensesRequest, _ ...grpc.CallOption) (*licensingv1.ImportLicensesResponse, error) {
	l.got = req
	resp := &licensingv1.ImportLicensesResponse{}
	for i, item := range req.GetLicenses() {
		r := &licensingv1.ImportResult{Index: int32(i), Key: item.GetKey(), Result: "imported"}
		if item.GetKey() == "" {
			r.Result, r.Error = "invalid", proto.String("key must be 8 to 200 characters")
			resp.Invalid++
		} else {
			resp.Imported++
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// An item whose field has the wrong JSON type is answered invalid, naming the field, and
// the other items of the call go to licensing at their own indexes (docs/import.md).
func TestImportItemsOfTheWrongJSONTypeAreAnsweredOneByOne(t *testing.T) {
	m := newJSONMarshaler()
	body := `{"on_conflict":"skip","licenses":[
		{"key":"GOOD-0000-0","product_id":"p","tier":"pro","issued_to":"a@example.com"},
		{"key":12345678,"product_id":"p","tier":"pro","issued_to":"a@example.com"},
		{"key":"TIER-0000-2","product_id":"p","tier":3,"issued_to":"a@example.com"},
		{"key":"STAT-0000-3","product_id":"p","tier":"pro","issued_to":"a@example.com","status":true},
		{"key":"LIMS-0000-4","product_id":"p","tier":"pro","issued_to":"a@example.com","limits":["seats"]},
		{"key":"USGE-0000-5","product_id":"p","tier":"pro","issued_to":"a@example.com","usage":4},
		{"key":"GOOD-0000-6","product_id":"p","tier":"pro","issued_to":"a@example.com"}]}`
	var req licensingv1.ImportLicensesRequest
	if err := m.NewDecoder(strings.NewReader(body)).Decode(&req); err != nil {
		t.Fatalf("decode: %v, want the mistyped items answered one by one", err)
	}
	licensing := &licensingAnsweringImports{}
	resp, err := mistypedImportsAnswered{licensing}.ImportLicenses(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(licensing.got.GetLicenses()); n != 7 || licensing.got.GetOnConflict() != "skip" || licensing.got.GetLicenses()[6].GetKey() != "GOOD-0000-6" {
		t.Fatalf("licensing got %d items (%v), want all 7 at their indexes", n, licensing.got)
	}
	want := []struct{ key, result, err string }{
		{"GOOD-0000-0", "imported", ""},
		{"", "invalid", "key must be a string"},
		{"TIER-0000-2", "invalid", "tier must be a string"},
		{"STAT-0000-3", "invalid", "status must be a string"},
		{"LIMS-0000-4", "invalid", "limits must be an object"},
		{"USGE-0000-5", "invalid", "usage must be an object"},
		{"GOOD-0000-6", "imported", ""},
	}
	for i, w := range want {
		r := resp.GetResults()[i]
		if r.GetKey() != w.key || r.GetResult() != w.result || r.GetError() != w.err {
			t.Errorf("item %d: %q %s %q, want %q %s %q", i, r.GetKey(), r.GetResult(), r.GetError(), w.key, w.result, w.err)
		}
	}
	if resp.GetImported() != 2 || resp.GetInvalid() != 5 {
		t.Errorf("counts imported %d invalid %d, want 2 and 5", resp.GetImported(), resp.GetInvalid())
	}
	if _, left := mistypedImports.Load(&req); left {
		t.Error("the request's mistyped items outlived its call")
	}
}

// What is wrong with the call itself stays a 400 for the whole call.
func TestImportCallErrorsStayWholeCallRefusals(t *testing.T) {
	m := newJSONMarshaler()
	for body, want := range map[string]string{
		`{"licenses":[{"key":"A-000000"}],"on_conflict":1}`:                  "Invalid JSON body: invalid value for string field on_conflict: 1",
		`{"licenses":{"key":2}}`:                                             "invalid value for array field licenses",
		`{"licenses":[{"key":"A-000000","issued_to":"a\u0001b"},{"key":2}]}`: "issued_to must not contain control characters",
	} {
		var req licensingv1.ImportLicensesRequest
		err := m.NewDecoder(strings.NewReader(body)).Decode(&req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("decode %s: %v, want a whole-call error containing %q", body, err, want)
		}
		mistypedImports.Delete(&req)
	}
}
