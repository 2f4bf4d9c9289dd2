// Package migrations embeds aspd's schema migrations, one goose folder per
// SQL dialect. The two folders describe the same tables; only types differ.
package migrations

import "embed"

// FS holds postgres/*.sql and sqlite/*.sql.
//
//go:embed postgres/*.sql sqlite/*.sql
var FS embed.FS
