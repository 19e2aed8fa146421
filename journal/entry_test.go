package journal

import (
	"encoding/json"
	"testing"
)

// An entry reads back as written, cut apart or decoded as JSON whatever
// its form.
func TestEntryReadsAsWritten(t *testing.T) {
	t.Parallel()
	args := json.RawMessage(`{"node":"a","body":"e30=","list":[1,2,{"m":"x"}]}`)
	for _, data := range [][]byte{
		encodeEntry("RecordDeclarations", args),
		[]byte(`{"a":` + string(args) + `,"m":"RecordDeclarations"}`),
		[]byte(`{ "m" : "RecordDeclarations", "a" : ` + string(args) + ` }`),
	} {
		e, err := readEntry(data)
		if err != nil || e.Method != "RecordDeclarations" {
			t.Fatalf("readEntry(%s) = %q, %v; want RecordDeclarations", data, e.Method, err)
		}
		var got, want any
		if err := json.Unmarshal(e.Args, &got); err != nil {
			t.Fatalf("readEntry(%s): args %s: %v", data, e.Args, err)
		}
		json.Unmarshal(args, &want)
		if g, w := mustJSON(got), mustJSON(want); g != w {
			t.Fatalf("readEntry(%s): args %s, want %s", data, g, w)
		}
	}
	if !json.Valid(encodeEntry("Audit", args)) {
		t.Fatal("encodeEntry made invalid JSON")
	}
	if _, err := readEntry([]byte(`{"m":"Audit","a":`)); err == nil {
		t.Fatal("readEntry of a cut entry: no error")
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
