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
	tables := make([]SharedTable, len(ddls))
	for i, ddl := range ddls {
		tables[i] = SharedTable{Create: ddl}
	}
	return CheckSharedTables(fsys, tables...)
}

// SharedTable is the DDL history of a table a shared package owns. Create is the table as
// the package's code needs it now: a service that adds the table copies it. A service that
// created the table from an earlier Create keeps that migration (applied migrations never
// change) and adds the upgrades after it, each one a whole migration file copied verbatim.
type SharedTable struct {
	Create string
	// Earlier lists the earlier versions, oldest first.
	Earlier []SharedTableVersion
}

// SharedTableVersion is one earlier Create and the migration that takes a table created
// from it to the next version (the next Earlier entry, or Create after the last one).
type SharedTableVersion struct {
	Create  string
	Upgrade string
}

// CheckSharedTables is CheckSharedDDL for tables with a history: for each table, the
// migrations hold either its Create, or one earlier Create followed by every upgrade after
// it, each verbatim exactly once and in that order; no other statement creates or alters
// the table.
func CheckSharedTables(fsys fs.FS, tables ...SharedTable) error {
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
	var names []string
	for _, st := range tables {
		m := createTable.FindStringSubmatch(st.Create)
		if m == nil {
			return fmt.Errorf("shared DDL creates no table: %.40q", st.Create)
		}
		name := m[1]
		pieces := sharedPieces(rest, st)
		at := 0
		for i, piece := range pieces {
			switch n := strings.Count(rest, piece); n {
			case 1:
			case 0:
				if i == 0 {
					return fmt.Errorf("table %s: the migrations do not hold the shared DDL verbatim (copy the package's constant)", name)
				}
				return fmt.Errorf("table %s: created from an earlier version of the shared DDL, and upgrade %d of %d is missing (copy it as a new migration)", name, i, len(pieces)-1)
			default:
				return fmt.Errorf("table %s: the shared DDL appears %d times", name, n)
			}
			idx := strings.Index(rest, piece)
			if idx < at {
				return fmt.Errorf("table %s: upgrade %d comes before what it upgrades", name, i)
			}
			rest = rest[:idx] + rest[idx+len(piece):]
			at = idx
		}
		names = append(names, name)
	}
	for _, table := range names {
		other := regexp.MustCompile(`(?i)(CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?|ALTER\s+TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?)` + table + `\b`)
		if loc := other.FindString(rest); loc != "" {
			return fmt.Errorf("table %s: %q outside the shared DDL; change the package's constant instead", table, loc)
		}
	}
	return nil
}

// sharedPieces picks which version of st the migrations hold: the pieces to find, the
// Create first. It prefers the current Create, then the newest earlier one found.
func sharedPieces(all string, st SharedTable) []string {
	if strings.Contains(all, st.Create) || len(st.Earlier) == 0 {
		return []string{st.Create}
	}
	for i := len(st.Earlier) - 1; i >= 0; i-- {
		if !strings.Contains(all, st.Earlier[i].Create) {
			continue
		}
		pieces := []string{st.Earlier[i].Create}
		for _, v := range st.Earlier[i:] {
			pieces = append(pieces, v.Upgrade)
		}
		return pieces
	}
	return []string{st.Create}
}
