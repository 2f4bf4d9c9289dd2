package store

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/search"
)

func TestZZDebugSteps(t *testing.T) {
	url := os.Getenv("ZZ_URL")
	if url == "" {
		t.Skip()
	}
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, _ := search.Parse(os.Getenv("ZZ_Q"))
	f := SearchFilter{Query: q, Limit: 20, Participant: os.Getenv("ZZ_P"), Session: os.Getenv("ZZ_S")}
	for _, st := range []searchStep{{walk: searchWalkShort}, {limit: searchIndexCap}, {walk: searchWalkLong}, {}} {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		hits, n, err := s.searchStep(ctx, f, st)
		cancel()
		t.Logf("%+v: %d hits, %d candidates, %v, err %v", st, len(hits), n, time.Since(t0), err)
		if os.Getenv("ZZ_SQL") != "" {
			sq, _ := s.searchSQL(f, st)
			t.Log(sq)
		}
	}
}

func TestZZDebugPlan(t *testing.T) {
	url := os.Getenv("ZZ_URL")
	if url == "" {
		t.Skip()
	}
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, _ := search.Parse(os.Getenv("ZZ_Q"))
	f := SearchFilter{Query: q, Limit: 20}
	sq, args := s.searchSQL(f, searchStep{walk: searchWalkShort})
	rows, err := s.read.Query("EXPLAIN QUERY PLAN "+sq, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, b, c int
		var d string
		rows.Scan(&a, &b, &c, &d)
		t.Log(a, b, d)
	}
	var v string
	s.read.QueryRow("select sqlite_version()").Scan(&v)
	t.Log(v)
}
