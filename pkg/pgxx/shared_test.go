package pgxx_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

const shared = "CREATE TABLE things (\n    id bigint PRIMARY KEY\n);\nCREATE INDEX things_id ON things (id);\n"

func TestCheckSharedDDL(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name  string
		files fstest.MapFS
		fails string
	}{
		{"verbatim copy", fstest.MapFS{"00001_a.sql": file("-- +goose Up\n" + shared + "-- +goose Down\nDROP TABLE things;\n")}, ""},
		{"copy in a later file", fstest.MapFS{"00001_a.sql": file("SELECT 1;"), "00002_b.sql": file(shared)}, ""},
		{"missing", fstest.MapFS{"00001_a.sql": file("SELECT 1;")}, "do not hold"},
		{"one column retyped", fstest.MapFS{"00001_a.sql": file(strings.Replace(shared, "bigint", "integer", 1))}, "do not hold"},
		{"index left out", fstest.MapFS{"00001_a.sql": file(strings.Split(shared, "CREATE INDEX")[0])}, "do not hold"},
		{"copied twice", fstest.MapFS{"00001_a.sql": file(shared), "00002_b.sql": file(shared)}, "2 times"},
		{"altered later", fstest.MapFS{"00001_a.sql": file(shared), "00002_b.sql": file("ALTER TABLE things ADD COLUMN x int;")}, "outside the shared DDL"},
		{"created again", fstest.MapFS{"00001_a.sql": file(shared + "CREATE TABLE IF NOT EXISTS things (x int);")}, "outside the shared DDL"},
		{"a table with a longer name is another table", fstest.MapFS{"00001_a.sql": file(shared + "CREATE TABLE things_archive (x int);")}, ""},
	}
	for _, tc := range cases {
		err := pgxx.CheckSharedDDL(tc.files, shared)
		switch {
		case tc.fails == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.fails)
		}
	}
}

func TestCheckSharedTablesWithHistory(t *testing.T) {
	t.Parallel()
	const (
		v1      = "CREATE TABLE things (\n    id bigint PRIMARY KEY\n);\n"
		upgrade = "-- +goose Up\nALTER TABLE things ADD COLUMN x int;\n-- +goose Down\nALTER TABLE things DROP COLUMN x;\n"
		current = "CREATE TABLE things (\n    id bigint PRIMARY KEY,\n    x  int\n);\n"
	)
	table := pgxx.SharedTable{Create: current, Earlier: []pgxx.SharedTableVersion{{Create: v1, Upgrade: upgrade}}}
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name  string
		files fstest.MapFS
		fails string
	}{
		{"current version", fstest.MapFS{"00001_a.sql": file(current)}, ""},
		{"earlier version upgraded", fstest.MapFS{"00001_a.sql": file(v1), "00002_b.sql": file(upgrade)}, ""},
		{"earlier version without its upgrade", fstest.MapFS{"00001_a.sql": file(v1)}, "upgrade 1 of 1 is missing"},
		{"upgrade before the table", fstest.MapFS{"00001_a.sql": file(upgrade), "00002_b.sql": file(v1)}, "comes before"},
		{"upgrade on top of the current version", fstest.MapFS{"00001_a.sql": file(current), "00002_b.sql": file(upgrade)}, "outside the shared DDL"},
		{"an alteration of its own", fstest.MapFS{"00001_a.sql": file(v1), "00002_b.sql": file(upgrade), "00003_c.sql": file("ALTER TABLE things ADD COLUMN y int;")}, "outside the shared DDL"},
		{"neither", fstest.MapFS{"00001_a.sql": file("SELECT 1;")}, "do not hold"},
	}
	for _, tc := range cases {
		err := pgxx.CheckSharedTables(tc.files, table)
		switch {
		case tc.fails == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.fails)
		}
	}
}
