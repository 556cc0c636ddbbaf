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
		{"lowercase t and z (RFC 3339 §5.6)", structpb.NewStringValue("2030-01-02t03:04:05z"), "2030-01-02T03:04:05Z", ""},
		{"offset +23:59", structpb.NewStringValue("2030-01-02T03:04:05+23:59"), "2030-01-01T03:05:05Z", ""},
		{"offset +24:00 is no offset", structpb.NewStringValue("2030-01-02T03:04:05+24:00"), "", wording},
		{"offset minutes 60", structpb.NewStringValue("2030-01-02T03:04:05-05:60"), "", wording},
		{"comma before the fraction", structpb.NewStringValue("2030-01-02T03:04:05,5Z"), "", wording},
		{"one-digit hour", structpb.NewStringValue("2030-01-02T3:04:05Z"), "", wording},
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

func TestParseRFC3339IsRFC3339Exactly(t *testing.T) {
	for in, want := range map[string]string{
		"2030-01-02T03:04:05Z":              "2030-01-02T03:04:05Z",
		"2030-01-02t03:04:05z":              "2030-01-02T03:04:05Z",
		"2030-01-02T03:04:05.5z":            "2030-01-02T03:04:05.5Z",
		"2030-01-02T03:04:05.123456789012Z": "2030-01-02T03:04:05.123456789Z",
		"2030-01-02T03:04:05-00:00":         "2030-01-02T03:04:05Z",
		"2030-01-02T03:04:05+23:59":         "2030-01-01T03:05:05Z",
		"2030-01-02T03:04:05-23:59":         "2030-01-03T03:03:05Z",
		"2030-01-02T03:04:05+24:00":         "",
		"2030-01-02T03:04:05-24:00":         "",
		"2030-01-02T03:04:05+99:00":         "",
		"2030-01-02T03:04:05+05:60":         "",
		"2030-01-02T03:04:05,5Z":            "",
		"2030-01-02T03:04:05.Z":             "",
		"2030-01-02T03:04:05+0530":          "",
		"2030-01-02 03:04:05Z":              "",
		"2030-01-02T03:04:05":               "",
		"2030-02-30T00:00:00Z":              "",
		"2030-01-02T24:00:00Z":              "",
		"2030-01-02T03:04:05Z\n":            "",
		"\uff12030-01-02T03:04:05Z":         "",
		"2030-01-02T03:04:05\u0662Z":        "",
		"":                                  "",
	} {
		got, err := ParseRFC3339(in)
		gotS := ""
		if err == nil {
			gotS = got.UTC().Format(time.RFC3339Nano)
		}
		if gotS != want {
			t.Errorf("ParseRFC3339(%q) = %q, %v; want %q", in, gotS, err, want)
		}
	}
}
