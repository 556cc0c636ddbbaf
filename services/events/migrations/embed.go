// Package migrations embeds the events schema's SQL migrations.
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
