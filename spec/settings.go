package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Setting types.
const (
	TypeString = "string"
	TypeInt    = "int"
	TypeBool   = "bool"
	TypeList   = "list" // comma-separated strings
)

// Setting is one setting a module declares.
type Setting struct {
	Name     string  `json:"name"`
	Type     string  `json:"type"`
	Default  *string `json:"default,omitempty"`
	Required bool    `json:"required,omitempty"`
	// Secret settings never appear in show, status, logs or the audit; their
	// values reach only the node they are assigned on.
	Secret      bool   `json:"secret,omitempty"`
	Description string `json:"description,omitempty"`
}

// Route is a name and port a module publishes. On node NODE it is
// NAME.NODE.internal; each public name also resolves, inside the mesh, to the
// node serving it. TLS says the port serves TLS with a mesh certificate for
// NAME.NODE.internal: an edge reaches it over TLS verified against the
// mesh's root, and over plain HTTP otherwise.
type Route struct {
	Name   string   `json:"name"`
	Port   int      `json:"port"`
	Public []string `json:"public,omitempty"`
	TLS    bool     `json:"tls,omitempty"`
}

var settingName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Check refuses a setting that is not well formed.
func (s Setting) Check() error {
	if !settingName.MatchString(s.Name) {
		return fmt.Errorf("setting name %q: use a-z, 0-9 and '_', starting with a letter", s.Name)
	}
	if s.Name == "node" || s.Name == "version" {
		return fmt.Errorf("setting name %q is reserved: ${%s} is filled in by mesh", s.Name, s.Name)
	}
	switch s.Type {
	case TypeString, TypeInt, TypeBool, TypeList:
	default:
		return fmt.Errorf("setting %q: type %q is not string, int, bool or list", s.Name, s.Type)
	}
	if s.Default != nil {
		if _, err := s.Parse(*s.Default); err != nil {
			return fmt.Errorf("setting %q: default: %w", s.Name, err)
		}
	}
	return nil
}

// Parse checks value against the setting's type and returns its canonical
// text: what ${name} is replaced with.
func (s Setting) Parse(value string) (string, error) {
	switch s.Type {
	case TypeInt:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not an int", value)
		}
		return strconv.FormatInt(n, 10), nil
	case TypeBool:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return "", fmt.Errorf("%q is not a bool (true or false)", value)
		}
		return strconv.FormatBool(b), nil
	case TypeList:
		var items []string
		for _, it := range strings.Split(value, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		return strings.Join(items, ","), nil
	default:
		return value, nil
	}
}

// Check refuses a route that is not well formed.
func (r Route) Check() error {
	if err := CheckName("route", r.Name); err != nil {
		return err
	}
	if r.Port < 1 || r.Port > 65535 {
		return fmt.Errorf("route %q: port %d is not from 1 to 65535", r.Name, r.Port)
	}
	for _, p := range r.Public {
		if strings.Contains(p, "${") {
			continue // checked once filled in
		}
		if err := CheckDomain(p); err != nil {
			return fmt.Errorf("route %q: public name: %w", r.Name, err)
		}
	}
	return nil
}

// CheckDomain refuses a name that is not a lowercase DNS name of at least two
// labels, or that is under .internal (the mesh's own names).
func CheckDomain(name string) error {
	labels := strings.Split(name, ".")
	if len(labels) < 2 || len(name) > 253 {
		return fmt.Errorf("%q is not a domain name such as www.example.org", name)
	}
	for _, l := range labels {
		if err := CheckName("domain label", l); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
	}
	if labels[len(labels)-1] == "internal" {
		return fmt.Errorf("%q is under .internal, the mesh's own names", name)
	}
	return nil
}

var reference = regexp.MustCompile(`\$\$?\{[^}]*\}`)

// References are the names of the ${name} references in s. $${name} is the
// literal text ${name}; a $ not followed by { is itself.
func References(s string) []string {
	var names []string
	for _, m := range reference.FindAllString(s, -1) {
		if !strings.HasPrefix(m, "$$") {
			names = append(names, m[2:len(m)-1])
		}
	}
	return names
}

// Fill replaces each ${name} in s with values[name], and each $${name} with
// the literal ${name}. Every reference must have a value.
func Fill(s string, values map[string]string) (string, error) {
	var missing string
	out := reference.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "$$") {
			return m[1:]
		}
		name := m[2 : len(m)-1]
		v, ok := values[name]
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("${%s} has no value", missing)
	}
	return out, nil
}
