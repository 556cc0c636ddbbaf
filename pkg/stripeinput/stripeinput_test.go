package stripeinput_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/stripeinput"
)

func TestCheckEnvelope(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for name, tc := range map[string]struct {
		payload string
		id      string
		created int64
		want    string // "" accepted
	}{
		"ordinary":              {`{}`, "evt_1", now.Unix(), ""},
		"skewed a little ahead": {`{}`, "evt_1", now.Add(time.Minute).Unix(), ""},
		"not UTF-8":             {"{\"id\":\"evt_\xff\"}", "evt_1", now.Unix(), "not valid UTF-8"},
		"empty id":              {`{}`, "", now.Unix(), "id is required"},
		"id with NUL":           {`{}`, "evt_\x00", now.Unix(), "id must be at most 255"},
		"id with a space":       {`{}`, "evt 1", now.Unix(), "id must be at most 255"},
		"id not ASCII":          {`{}`, "evt_\ufffd", now.Unix(), "id must be at most 255"},
		"id over 255":           {`{}`, "evt_" + strings.Repeat("a", 252), now.Unix(), "id must be at most 255"},
		"created in the future": {`{}`, "evt_1", now.Add(time.Hour).Unix(), "created is in the future"},
	} {
		err := stripeinput.CheckEnvelope([]byte(tc.payload), tc.id, tc.created, now)
		var se *stripeinput.Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case tc.want != "" && (!errors.As(err, &se) || !strings.Contains(se.Reason, tc.want)):
			t.Errorf("%s: %v, want a refusal with %q", name, err, tc.want)
		}
	}
	if err := stripeinput.CheckID("id", "evt_"+strings.Repeat("a", 251), true); err != nil {
		t.Errorf("a 255-character id refused: %v", err)
	}
}

func TestFutureDated(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	for header, want := range map[string]bool{
		fmt.Sprintf("t=%d,v1=abc", now.Unix()):                     false,
		fmt.Sprintf("t=%d,v1=abc", now.Add(-time.Hour).Unix()):     false, // stale is stripe-go's to refuse
		fmt.Sprintf("v1=abc, t=%d", now.Add(4*time.Minute).Unix()): false,
		fmt.Sprintf("t=%d,v1=abc", now.Add(6*time.Minute).Unix()):  true,
		"v1=abc":      true,
		"t=soon,v1=x": true,
	} {
		if got := stripeinput.FutureDated(header, now); got != want {
			t.Errorf("FutureDated(%q) = %v, want %v", header, got, want)
		}
	}
}
