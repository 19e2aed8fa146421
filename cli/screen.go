package cli

// What reaches the operator's screen. Nodes and modules' authors are not
// trusted, and their texts (facts, reports, names, descriptions) are
// printed: a control character in one (ESC and a terminal sequence, a
// carriage return, a bidi override) could erase or rewrite what mesh
// prints around it. So every character that moves the cursor, changes the
// terminal's state or reorders the text is shown escaped: bytes below
// 0x20 and invalid UTF-8 as \xNN, the others as \uNNNN (DEL, the C1
// controls, U+061C, U+200E-U+200F, U+2028-U+2029, U+202A-U+202E,
// U+2066-U+2069).
//
// Two layers do it. The command's writers (newApp) are screens, which
// escape all of these but the newline and the tab that lay out mesh's own
// lines and tables: nothing any printer writes can reach the terminal
// raw. And say, which every printer writes a line with, escapes its
// arguments whole, newline and tab included, so that a node's text stays
// in its cell and on its line.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"unicode/utf8"
)

// unsafe says whether r, a whole character, is shown escaped.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// escape appends s to dst with every unsafe character escaped, but the
// newline and the tab when layout is true. The escapes are JSON's too for
// every character but those below 0x20 and invalid bytes, which
// encoding/json never writes raw: a screen keeps JSON valid.
func escape(dst []byte, s []byte, layout bool) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b < 0x7f {
			dst = append(dst, b)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case layout && (b == '\n' || b == '\t'):
			dst = append(dst, b)
		case r == utf8.RuneError && size <= 1, r < 0x20:
			dst = append(dst, '\\', 'x', hex[b>>4], hex[b&0xf])
			size = 1
		case unsafe(r):
			dst = append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// shown is s as one cell or one part of a line: every unsafe character
// escaped, newline and tab included.
func shown(s string) string {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f {
			return string(escape(make([]byte, 0, len(s)+16), []byte(s), false))
		}
	}
	return s
}

// say is fmt.Fprintf with every argument shown: a string, an error or a
// list of strings is escaped whole (numbers carry nothing to escape). The format is the program's own and is kept as is.
func say(w io.Writer, format string, args ...any) {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = shown(v)
		case []string:
			l := make([]string, len(v))
			for j, s := range v {
				l[j] = shown(s)
			}
			args[i] = l
		case error:
			args[i] = shown(v.Error())
		default:
			// A named string type (an outcome, a state) is a string too.
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				args[i] = shown(rv.String())
			}
		}
	}
	fmt.Fprintf(w, format, args...)
}

// screen is a writer that escapes every unsafe character but the newline
// and the tab. A character split between two writes is escaped byte by
// byte: every printer writes whole strings.
type screen struct{ w io.Writer }

// screenOf is w as a screen; w itself if it is one.
func screenOf(w io.Writer) io.Writer {
	if _, ok := w.(screen); ok {
		return w
	}
	return screen{w}
}

// rawOf is what s writes to, for a child process given the command's own
// output (it is the child's to escape).
func rawOf(w io.Writer) io.Writer {
	if s, ok := w.(screen); ok {
		return s.w
	}
	return w
}

func (s screen) Write(p []byte) (int, error) {
	clean := true
	for _, b := range p {
		if (b < 0x20 && b != '\n' && b != '\t') || b >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s.w.Write(p)
	}
	if _, err := s.w.Write(escape(make([]byte, 0, len(p)+16), p, true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printJSON writes v as indented JSON, every unsafe character a JSON
// escape: encoding/json escapes those below 0x20 and U+2028-U+2029
// itself, not DEL, the C1 controls or the bidi ones.
func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escape(nil, buf.Bytes(), true))
	return err
}
