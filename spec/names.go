package spec

import "fmt"

// CheckName reports whether s is a valid DNS label, the rule for mesh and
// node names: 1 to 63 characters of a-z, 0-9 and '-', neither first nor last
// a '-'. what names the thing being checked, for the error.
func CheckName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s name is empty: use 1 to 63 characters of a-z, 0-9 and '-'", what)
	}
	if len(s) > 63 {
		return fmt.Errorf("%s name %q is %d characters long: a DNS label holds at most 63", what, s, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(s)-1 {
				return fmt.Errorf("%s name %q begins or ends with '-': a DNS label may not", what, s)
			}
		default:
			return fmt.Errorf("%s name %q holds %q: use only a-z, 0-9 and '-'", what, s, rune(c))
		}
	}
	return nil
}
