package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestCADomains: domains are recorded once, listed by name; a second add
// of one is ErrExists and changes nothing.
func TestCADomains(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, d := range []string{"example.org", "example.net"} {
		if err := db.AddCADomain(ctx, d, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AddCADomain(ctx, "example.org", at.Add(time.Hour)); !errors.Is(err, store.ErrExists) {
		t.Errorf("a second add of example.org: %v, want ErrExists", err)
	}
	ds, err := db.CADomains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.CADomain{{Name: "example.net", Added: at}, {Name: "example.org", Added: at}}
	if !slices.EqualFunc(ds, want, func(a, b store.CADomain) bool { return a.Name == b.Name && a.Added.Equal(b.Added) }) {
		t.Errorf("CADomains = %v, want %v", ds, want)
	}
}

// TestCerts: every leaf recorded is listed in the order of issue, paged;
// the latest leaf for each node's name is the last recorded that names it.
func TestCerts(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	leaves := []store.Cert{
		{Serial: "01", Node: "alpha", Names: []string{"alpha.internal", "web.alpha.internal"}, NotAfter: at.Add(24 * time.Hour), Issued: at},
		{Serial: "02", Node: "beta", Names: []string{"beta.internal"}, NotAfter: at.Add(48 * time.Hour), Issued: at},
		{Serial: "03", Node: "alpha", Names: []string{"alpha.internal"}, NotAfter: at.Add(72 * time.Hour), Issued: at.Add(time.Hour)},
	}
	for _, c := range leaves {
		if err := db.RecordCert(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.RecordCert(ctx, leaves[0]); err == nil {
		t.Error("a second leaf with serial 01 was recorded")
	}
	all, err := db.Certs(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].Serial != "01" || all[2].Serial != "03" || !slices.Equal(all[0].Names, leaves[0].Names) ||
		!all[1].NotAfter.Equal(leaves[1].NotAfter) || !all[2].Issued.Equal(leaves[2].Issued) || all[1].Node != "beta" {
		t.Fatalf("Certs = %+v, want the three leaves as recorded, in order", all)
	}
	page, err := db.Certs(ctx, all[0].ID, 1)
	if err != nil || len(page) != 1 || page[0].Serial != "02" {
		t.Errorf("Certs after the first, one: %+v, %v; want 02", page, err)
	}
	latest, err := db.LatestCerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, nc := range latest {
		got = append(got, nc.Cert.Node+" "+nc.Name+" "+nc.Cert.Serial)
	}
	want := []string{"alpha alpha.internal 03", "alpha web.alpha.internal 01", "beta beta.internal 02"}
	if !slices.Equal(got, want) {
		t.Errorf("LatestCerts = %v, want %v", got, want)
	}
}

// TestIntermediate: none is kept until one is set; a set records the
// domain with it, once, and a later set replaces the intermediate.
func TestIntermediate(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	if _, err := db.Intermediate(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before any set: %v, want ErrNotFound", err)
	}
	first := store.Intermediate{Serial: "0a", CertPEM: "cert a", KeySealed: "sealed a", Set: at}
	second := store.Intermediate{Serial: "0b", CertPEM: "cert b", KeySealed: "sealed b", Set: at.Add(time.Hour)}
	for _, in := range []store.Intermediate{first, second} {
		if err := db.SetIntermediate(ctx, in, "example.org"); err != nil {
			t.Fatal(err)
		}
		got, err := db.Intermediate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Serial != in.Serial || got.CertPEM != in.CertPEM || got.KeySealed != in.KeySealed || !got.Set.Equal(in.Set) {
			t.Fatalf("kept %+v, want %+v", got, in)
		}
	}
	ds, err := db.CADomains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Name != "example.org" || !ds[0].Added.Equal(at) {
		t.Fatalf("domains %v: want example.org once, as first recorded", ds)
	}
}
