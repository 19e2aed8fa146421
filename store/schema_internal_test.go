package store

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateSchema = flag.Bool("update", false, "rewrite schema.sql from what the migrations make")

// TestFreshSchemaIsTheMigrations: schema.sql is what running every
// migration in turn makes (each table, index and trigger as SQLite keeps
// it, and every row they write), and a new store opened through it holds
// the same and records every migration as applied. Run with -update after
// adding a migration.
func TestFreshSchemaIsTheMigrations(t *testing.T) {
	ctx := context.Background()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	migrated, err := sql.Open("sqlite", Options{}.DSN(filepath.Join(dir, "migrated.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer migrated.Close()
	if err := newDB(migrated).migrate(ctx, false); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s%d\n", schemaHeader, len(ms)) + dumpSchema(t, migrated)
	if *updateSchema {
		if err := os.WriteFile("schema.sql", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skip("schema.sql rewritten: build again to embed it")
	}
	if schema != want {
		t.Fatalf("schema.sql is not what the migrations make: run go test ./store -run TestFreshSchemaIsTheMigrations -update\n--- schema.sql\n%s\n--- the migrations\n%s", schema, want)
	}

	fresh, err := Open(ctx, filepath.Join(dir, "fresh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := fmt.Sprintf("%s%d\n", schemaHeader, len(ms)) + dumpSchema(t, fresh.sql); got != want {
		t.Errorf("a new store holds another schema than the migrations make:\n%s\nwant:\n%s", got, want)
	}
	applied, err := fresh.Migrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for _, m := range ms {
		all = append(all, m.version)
	}
	if !slices.Equal(applied, all) {
		t.Errorf("a new store records migrations %v, want %v", applied, all)
	}
}

// dumpSchema is db's schema as statements in the order SQLite keeps
// them, then every row of every table, apart from SQLite's own and the
// record of migrations.
func dumpSchema(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT type, name, sql FROM sqlite_master
		WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var tables []string
	for rows.Next() {
		var typ, name, stmt string
		if err := rows.Scan(&typ, &name, &stmt); err != nil {
			t.Fatal(err)
		}
		b.WriteString(stmt + ";\n")
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for _, table := range tables {
		cols, err := db.Query(`SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		if err != nil {
			t.Fatal(err)
		}
		var quoted []string
		for cols.Next() {
			var c string
			if err := cols.Scan(&c); err != nil {
				t.Fatal(err)
			}
			quoted = append(quoted, fmt.Sprintf(`quote("%s")`, c))
		}
		cols.Close()
		vals, err := db.Query(fmt.Sprintf(`SELECT %s FROM "%s" ORDER BY rowid`, strings.Join(quoted, ` || ',' || `), table))
		if err != nil {
			t.Fatal(err)
		}
		for vals.Next() {
			var v string
			if err := vals.Scan(&v); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "INSERT INTO \"%s\" VALUES (%s);\n", table, v)
		}
		vals.Close()
	}
	return b.String()
}
