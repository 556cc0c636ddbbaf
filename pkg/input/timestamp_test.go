package input

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

func TestOptionalTimeReadsRFC3339OrNullAndNamesTheField(t *testing.T) {
	const wording = "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"
	for _, tc := range []struct {
		name  string
		in    *structpb.Value
		want  string // RFC 3339 of the result; "" for nil
		error string
	}{
		{"absent", nil, "", ""},
		{"null", structpb.NewNullValue(), "", ""},
		{"offset and fraction: UTC, whole seconds", structpb.NewStringValue(" 2030-06-01T12:00:00.999+02:00 "), "2030-06-01T10:00:00Z", ""},
		{"date only", structpb.NewStringValue("2030-01-01"), "", wording},
		{"words", structpb.NewStringValue("next tuesday"), "", wording},
		{"number", structpb.NewNumberValue(5), "", wording},
		{"bool", structpb.NewBoolValue(true), "", wording},
		{"year 0000", structpb.NewStringValue("0000-06-01T00:00:00Z"), "", "expires_at must be between years 0001 and 9999"},
		{"offset pushes it before year 0001", structpb.NewStringValue("0001-01-01T00:00:00+01:00"), "", "expires_at must be between years 0001 and 9999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OptionalTime("expires_at", tc.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.error {
				t.Fatalf("error %q, want %q", gotErr, tc.error)
			}
			gotTime := ""
			if got != nil {
				gotTime = got.Format(time.RFC3339Nano)
			}
			if gotTime != tc.want {
				t.Fatalf("time %q, want %q", gotTime, tc.want)
			}
		})
	}
}
