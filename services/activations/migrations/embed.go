// Package migrations embeds the activations schema's SQL migrations.
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
