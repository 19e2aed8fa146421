package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestBlobRightIsTheDeclarationsBlobs: a node may fetch exactly the blobs
// its last declaration carries (a file's content that travels as a blob, a
// container's image archive), read from the declaration's resources: not
// a digest that merely appears in its text, such as an inline file's, even
// when the store holds a blob of that digest; and no longer once a later
// declaration drops it.
func TestBlobRightIsTheDeclarationsBlobs(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	key := joinWithKey(t, c, "beta")

	small := []byte("an inline file's content\n")
	big := bytes.Repeat([]byte("a blob's content\n"), 5000)
	archive := []byte("an image archive")
	for _, b := range [][]byte{small, big, archive} {
		if err := db.PutBlob(ctx, spec.ContentDigest(b), b, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	inline := spec.Resource{Name: "m:file:/etc/small", Kind: spec.KindFile, Module: "m",
		Spec: &spec.FileSpec{Path: "/etc/small", Mode: 0o644, Content: small, Size: int64(len(small)), Digest: spec.ContentDigest(small)}}
	blob := spec.Resource{Name: "m:file:/srv/big", Kind: spec.KindFile, Module: "m",
		Spec: &spec.FileSpec{Path: "/srv/big", Mode: 0o644, Blob: true, Size: int64(len(big)), Digest: spec.ContentDigest(big)}}
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m",
		Spec: &spec.ContainerSpec{Name: "web", Image: "w:1", Archive: &spec.ImageArchive{Size: int64(len(archive)), Digest: spec.ContentDigest(archive)}}}
	if _, _, err := c.sender.send(ctx, "beta", content{resources: []spec.Resource{inline, blob, ctr, spec.NodeNetwork("beta")}}, resendAll); err != nil {
		t.Fatal(err)
	}
	if d, _ := db.LastDeclaration(ctx, "beta"); !bytes.Contains(d.Body, []byte(`"digest":"`+spec.ContentDigest(small)+`"`)) {
		t.Fatal("the inline file's digest is not in the declaration's text: the case below proves nothing")
	}

	for _, tc := range []struct {
		what, node, digest string
		ok                 bool
	}{
		{"a file's blob", "beta", spec.ContentDigest(big), true},
		{"a container's archive", "beta", spec.ContentDigest(archive), true},
		{"an inline file's digest", "beta", spec.ContentDigest(small), false},
		{"a digest nowhere", "beta", spec.ContentDigest([]byte("nothing")), false},
		{"another node's blob", "alpha", spec.ContentDigest(big), false},
	} {
		err := c.blobs.mayFetch(ctx, tc.node, tc.digest)
		if (err == nil) != tc.ok {
			t.Errorf("%s (%s): %v, want allowed %v", tc.what, tc.node, err, tc.ok)
		}
	}

	// Over the bus, as the host asks: the blob is served, the inline
	// file's digest refused.
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(digest string) spec.Reply {
		t.Helper()
		m, err := nc.Request(spec.NodeSubject("beta", spec.KindBlob), mustJSON(t, spec.BlobRequest{Digest: digest}), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r spec.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(spec.ContentDigest(big)); r.Error != "" || len(r.Result) == 0 {
		t.Errorf("the blob over the bus: %+v", r)
	}
	if r := ask(spec.ContentDigest(small)); !strings.Contains(r.Error, "is not in node \"beta\"'s declaration") || r.Kind != spec.ReplyRefused {
		t.Errorf("the inline file's digest over the bus: %+v, want it refused (kind %s)", r, spec.ReplyRefused)
	}

	// The next declaration drops the blob: it may not be fetched any more.
	if _, _, err := c.sender.send(ctx, "beta", content{resources: []spec.Resource{inline}}, resendAll); err != nil {
		t.Fatal(err)
	}
	if err := c.blobs.mayFetch(ctx, "beta", spec.ContentDigest(big)); err == nil {
		t.Error("a blob the last declaration dropped may still be fetched")
	}
}
