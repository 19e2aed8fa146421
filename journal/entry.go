package journal

import (
	"bytes"
	"encoding/json"
)

// encodeEntry is the entry writing method with args, raw JSON: the JSON
// of entry, made without a second pass over args (which json.Marshal
// would make to check and compact them), as args may be megabytes.
func encodeEntry(method string, args json.RawMessage) []byte {
	name, _ := json.Marshal(method)
	b := make([]byte, 0, len(`{"m":,"a":}`)+len(name)+len(args))
	b = append(b, `{"m":`...)
	b = append(b, name...)
	b = append(b, `,"a":`...)
	b = append(b, args...)
	return append(b, '}')
}

// readEntry reads an entry. One in the form encodeEntry makes, its method
// a plain name, is cut apart without a pass over its arguments (the
// write's own decoding reads them); any other is decoded as JSON.
func readEntry(data []byte) (entry, error) {
	if rest, ok := bytes.CutPrefix(data, []byte(`{"m":"`)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && plainName(rest[:i]) {
			if args, ok := bytes.CutPrefix(rest[i+1:], []byte(`,"a":`)); ok {
				if args, ok := bytes.CutSuffix(args, []byte("}")); ok {
					return entry{Method: string(rest[:i]), Args: args}, nil
				}
			}
		}
	}
	var e entry
	err := json.Unmarshal(data, &e)
	return e, err
}

// plainName says name is letters and digits only, so its JSON string is
// itself between quotes.
func plainName(name []byte) bool {
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
