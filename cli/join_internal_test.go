package cli

import (
	"slices"
	"testing"
)

// TestWithoutJoinDropsTheTokenInEveryForm: the arguments a joined host runs
// itself again with hold none of the join's flags or their values, in any
// form the flag package reads, and keep every other one as given.
func TestWithoutJoinDropsTheTokenInEveryForm(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"mesh", "host", "--dir", "D", "--join", "TOK", "--address", "10.0.0.7"}, []string{"mesh", "host", "--dir", "D"}},
		{[]string{"mesh", "host", "--join=TOK", "--dir=D", "--address=10.0.0.7", "--dns", "127.0.0.1:53"}, []string{"mesh", "host", "--dir=D", "--dns", "127.0.0.1:53"}},
		{[]string{"mesh", "host", "-join", "TOK", "-dir", "D", "-join-file=/f"}, []string{"mesh", "host", "-dir", "D"}},
		{[]string{"mesh", "serve", "host", "--join-file", "/f", "--log-level", "debug"}, []string{"mesh", "serve", "host", "--log-level", "debug"}},
		{[]string{"mesh", "host", "--joined", "x", "--", "--join", "TOK"}, []string{"mesh", "host", "--joined", "x", "--", "--join", "TOK"}},
		{[]string{"mesh", "host", "--join"}, []string{"mesh", "host"}},
	} {
		if got := withoutJoin(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("withoutJoin(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
