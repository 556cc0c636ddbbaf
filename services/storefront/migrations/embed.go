// Package migrations embeds the storefront schema's SQL migrations.
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
