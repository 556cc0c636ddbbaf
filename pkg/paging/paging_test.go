package paging

import "testing"

func TestParseAppliesDefaultsAndRefusesOutOfRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit, offset string
		l, o          int
		err           string
	}{
		{"", "", 50, 0, ""},
		{"1", "0", 1, 0, ""},
		{"1000", "12345", 1000, 12345, ""},
		{"0", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{"1001", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{"ten", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{"2.5", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{"", "-1", 0, 0, "offset must be a non-negative integer"},
		{"", "x", 0, 0, "offset must be a non-negative integer"},
		// Digits only, as every list route and path id reads a number (input.Decimal).
		{"05", "007", 5, 7, ""},
		{"+5", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{" 5", "", 0, 0, "limit must be an integer between 1 and 1000"},
		{"", "+1", 0, 0, "offset must be a non-negative integer"},
	} {
		l, o, err := Parse(tc.limit, tc.offset)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("Parse(%q, %q) error %v, want %q", tc.limit, tc.offset, err, tc.err)
		case tc.err == "" && (err != nil || l != tc.l || o != tc.o):
			t.Errorf("Parse(%q, %q) = %d, %d, %v", tc.limit, tc.offset, l, o, err)
		}
	}
}
