package pgxx

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

var createTable = regexp.MustCompile(`(?i)CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)`)

// CheckSharedDDL is how a service's migrations are held to a table that a shared package's
// code relies on (idempotency.TableSQL, natsx.OutboxTableSQL): the package's constant is
// the one source, each service copies it into a migration (only `migrate` may change a
// schema), and a test per service calls this. It fails unless, across the *.sql files at
// fsys's root, each ddl appears verbatim exactly once and no statement outside it creates,
// alters or renames a table it creates.
func CheckSharedDDL(fsys fs.FS, ddls ...string) error {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	var all strings.Builder
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return err
		}
		all.Write(b)
		all.WriteByte('\n')
	}
	rest := all.String()
	var tables []string
	for _, ddl := range ddls {
		m := createTable.FindStringSubmatch(ddl)
		if m == nil {
			return fmt.Errorf("shared DDL creates no table: %.40q", ddl)
		}
		switch n := strings.Count(rest, ddl); n {
		case 1:
		case 0:
			return fmt.Errorf("table %s: the migrations do not hold the shared DDL verbatim (copy the package's constant)", m[1])
		default:
			return fmt.Errorf("table %s: the shared DDL appears %d times", m[1], n)
		}
		rest = strings.Replace(rest, ddl, "", 1)
		tables = append(tables, m[1])
	}
	for _, table := range tables {
		other := regexp.MustCompile(`(?i)(CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?|ALTER\s+TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?)` + table + `\b`)
		if loc := other.FindString(rest); loc != "" {
			return fmt.Errorf("table %s: %q outside the shared DDL; change the package's constant instead", table, loc)
		}
	}
	return nil
}
