package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestOversizeNamesWhatIsLarge: a node whose declaration would pass the cap
// is sent nothing, and the push and status both say which modules and
// resources take the room, with advice that can help: for many small
// resources, fewer of them or another node (not "move file contents out of
// line", which cannot help them); for inline contents, one archive file
// over the inline limit, which travels as a blob. Status says this instead of "mesh push NODE".
func TestOversizeNamesWhatIsLarge(t *testing.T) {
	t.Parallel()
	many := spec.Module{Name: "many", Version: "1"}
	for i := range 9000 {
		p := fmt.Sprintf("/srv/many/d%05d", i)
		many.Resources = append(many.Resources, spec.Resource{Name: spec.ResourceName("many", spec.KindDirectory, p), Kind: spec.KindDirectory, Module: "many",
			Spec: &spec.DirectorySpec{Path: p, Mode: 0o755}})
	}
	big := spec.Module{Name: "big", Version: "1"}
	for i := range 24 {
		p := fmt.Sprintf("/srv/big/f%02d", i)
		content := []byte(strings.Repeat(fmt.Sprint(i%10), 48<<10))
		sum := sha256.Sum256(content)
		big.Resources = append(big.Resources, spec.Resource{Name: spec.ResourceName("big", spec.KindFile, p), Kind: spec.KindFile, Module: "big",
			Spec: &spec.FileSpec{Path: p, Mode: 0o644, Content: content, Size: int64(len(content)), Digest: "sha256:" + hex.EncodeToString(sum[:])}})
	}
	for _, tc := range []struct {
		mod    spec.Module
		says   []string
		advice string
	}{
		{many, []string{"module many", "in 9000 resources", "many:directory:/srv/many/d"}, "declare fewer resources (it declares 9000)"},
		{big, []string{"module big", "in 24 resources", "big:file:/srv/big/f"}, "ship many small contents as one archive file over 64 KiB"},
	} {
		t.Run(tc.mod.Name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{now: time.Now()}
			c, db := newController(t, clk)
			ctx := context.Background()
			if _, err := db.RegisterModules(ctx, []spec.Module{tc.mod}, clk.Now()); err != nil {
				t.Fatal(err)
			}
			if err := db.Assign(ctx, tc.mod.Name, "alpha", nil, clk.Now()); err != nil {
				t.Fatal(err)
			}
			res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
			if err != nil {
				t.Fatal(err)
			}
			why := res.Nodes[0].Error
			if res.Nodes[0].Seq != 0 || !strings.Contains(why, `the declaration of node "alpha" would be`) || !strings.Contains(why, "nothing was sent") {
				t.Fatalf("push: %+v, want alpha not sent, saying it does not fit", res.Nodes[0])
			}
			for _, s := range append(tc.says, tc.advice) {
				if !strings.Contains(why, s) {
					t.Errorf("push's reason does not say %q:\n%s", s, why)
				}
			}
			st, err := c.status(ctx, spec.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			problems := strings.Join(st.Problems, "\n")
			if !strings.Contains(problems, tc.advice) || strings.Contains(problems, "mesh push alpha") {
				t.Errorf("status:\n%s\nwant the reason it does not fit, not mesh push alpha", problems)
			}
		})
	}
}
