package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestFlatArraysRoundTrip: textArray and int8Array parameters, written by
// pgarrays.go's codec, reach PostgreSQL as the arrays they hold, through
// pgx's own interface (the message path) and through database/sql (every
// other path), empty arrays and awkward text included.
func TestFlatArraysRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	texts := []textArray{
		{},
		{""},
		{"a", "", "b"},
		{`quote " backslash \ comma , braces {} NULL null`, "é日本語🙂", "\t\n\r", strings.Repeat("x", 70000)},
	}
	ints := []int8Array{{}, {0}, {1, -1, 255, 256, 1 << 40, -(1 << 62), 9223372036854775807, -9223372036854775808}}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The pooled connection has the codec in front of pgx's own.
	for _, v := range []any{textArray{}, int8Array{}} {
		oid := uint32(pgtype.TextArrayOID)
		if _, ok := v.(int8Array); ok {
			oid = pgtype.Int8ArrayOID
		}
		if p := conn.Conn().TypeMap().PlanEncode(oid, pgtype.BinaryFormatCode, v); p == nil || fmt.Sprintf("%T", p) != "store.flatArrayPlan" {
			t.Fatalf("%T is encoded by %T, not by the flat codec", v, p)
		}
	}
	for _, want := range texts {
		var got []string
		if err := conn.QueryRow(ctx, `SELECT $1::text[]`, want).Scan(&got); err != nil {
			t.Fatalf("pgx: %q: %v", want, err)
		}
		if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, []string(want))) {
			t.Fatalf("text[] %q came back as %q", want, got)
		}
		var same bool
		if err := conn.QueryRow(ctx, `SELECT $1::text[] IS NOT DISTINCT FROM $2::text[]`, want, []string(want)).Scan(&same); err != nil || !same {
			t.Fatalf("%q: the flat encoding differs from pgx's own (%v)", want, err)
		}
		var n int
		if err := s.write.QueryRowContext(ctx, `SELECT cardinality($1::text[])`, want).Scan(&n); err != nil || n != len(want) {
			t.Fatalf("database/sql: %q: %d elements, %v", want, n, err)
		}
	}
	for _, want := range ints {
		var got []int64
		if err := conn.QueryRow(ctx, `SELECT $1::bigint[]`, want).Scan(&got); err != nil {
			t.Fatalf("pgx: %v: %v", want, err)
		}
		var same bool
		if err := conn.QueryRow(ctx, `SELECT $1::bigint[] IS NOT DISTINCT FROM $2::bigint[]`, want, []int64(want)).Scan(&same); err != nil || !same {
			t.Fatalf("%v: the flat encoding differs from pgx's own (%v)", want, err)
		}
		if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, []int64(want))) {
			t.Fatalf("bigint[] %v came back as %v", want, got)
		}
	}
	// An array value of another type still goes through pgx's own codec.
	var got []string
	if err := conn.QueryRow(ctx, `SELECT $1::text[]`, []string{"plain"}).Scan(&got); err != nil || !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("[]string: %q %v", got, err)
	}
}

// BenchmarkFlatArrayEncode: allocations of encoding a batch's ten columns.
func BenchmarkFlatArrayEncode(b *testing.B) {
	col := make(textArray, 16)
	for i := range col {
		col[i] = strings.Repeat("y", 40)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for range b.N {
		var err error
		if buf, err = (flatArrayPlan{}).Encode(col, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
