package spec

import (
	"fmt"
	"strings"
	"time"
)

// Provide is a grant a module provides: the route its consumers reach it
// by, and the file on the provider's node that lists each consumer's
// credential, one line a consumer.
type Provide struct {
	Grant string      `json:"grant"`
	Route string      `json:"route"`
	File  ProvideFile `json:"file"`
}

// ProvideFile is where a provider's node keeps its consumers' credentials:
// Line is written once per consumer, in name order, with ${consumer} and
// ${credential} filled.
type ProvideFile struct {
	Path string `json:"path"`
	Line string `json:"line"`
	// Mode is the file's mode; 0600 when not given.
	Mode Mode `json:"mode,omitempty"`
	// OnChange reloads a container of the provider's module when the file
	// changes (a consumer comes, goes or is given a new credential), as a
	// file's on_change does.
	OnChange *OnChange `json:"on_change,omitempty"`
}

// FileMode is the mode the file is written with.
func (f ProvideFile) FileMode() Mode {
	if f.Mode == 0 {
		return 0o600
	}
	return f.Mode
}

// Consume is a grant a module consumes: which of its settings the
// controller fills, with the consumer's name (User), its credential
// (Password, a secret setting) and the provider's address (Address,
// ROUTE.NODE.internal:PORT). Each may be left empty.
type Consume struct {
	Grant    string `json:"grant"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Address  string `json:"address,omitempty"`
}

// Grant references a provider's line may hold.
const (
	GrantConsumer   = "consumer"
	GrantCredential = "credential"
)

// Filled are the settings the consumer's grant fills, by role.
func (c Consume) Filled() map[string]string {
	out := map[string]string{}
	for role, name := range map[string]string{"user": c.User, "password": c.Password, "address": c.Address} {
		if name != "" {
			out[role] = name
		}
	}
	return out
}

// GrantConsumerName is the name a consumer's credential is minted for:
// its module and node, MODULE-NODE.
func GrantConsumerName(module, node string) string { return module + "-" + node }

// checkGrants refuses provides and consumes that are not well formed
// against the module's settings and routes, naming the field.
func checkGrants(settings []Setting, routes []Route, provides []Provide, consumes []Consume) error {
	seen := map[string]bool{}
	for i, p := range provides {
		field := fmt.Sprintf("provides[%d]", i)
		if err := CheckName("grant", p.Grant); err != nil {
			return fmt.Errorf("%s.grant: %w", field, err)
		}
		if seen[p.Grant] {
			return fmt.Errorf("%s.grant: grant %q is provided twice", field, p.Grant)
		}
		seen[p.Grant] = true
		found := false
		for _, r := range routes {
			found = found || r.Name == p.Route
		}
		if !found {
			return fmt.Errorf("%s.route: %q names no route of the module", field, p.Route)
		}
		if err := CheckPath(p.File.Path); err != nil {
			return fmt.Errorf("%s.file.path: %w", field, err)
		}
		if err := p.File.Mode.CheckFile(); err != nil {
			return fmt.Errorf("%s.file.mode: %w", field, err)
		}
		if p.File.OnChange != nil {
			if err := p.File.OnChange.Check(); err != nil {
				return fmt.Errorf("%s.file.%w", field, err)
			}
		}
		credential := false
		for _, name := range References(p.File.Line) {
			switch name {
			case GrantCredential:
				credential = true
			case GrantConsumer:
			default:
				return fmt.Errorf("%s.file.line: ${%s}: a line may hold only ${%s} and ${%s}", field, name, GrantConsumer, GrantCredential)
			}
		}
		if !credential {
			return fmt.Errorf("%s.file.line: no ${%s}: the line must hold each consumer's credential", field, GrantCredential)
		}
		if strings.ContainsAny(p.File.Line, "\n\x00") {
			return fmt.Errorf("%s.file.line: holds a newline or NUL: it is one line", field)
		}
	}
	seen = map[string]bool{}
	filled := map[string]string{}
	for i, c := range consumes {
		field := fmt.Sprintf("consumes[%d]", i)
		if err := CheckName("grant", c.Grant); err != nil {
			return fmt.Errorf("%s.grant: %w", field, err)
		}
		if seen[c.Grant] {
			return fmt.Errorf("%s.grant: grant %q is consumed twice", field, c.Grant)
		}
		seen[c.Grant] = true
		for _, role := range []string{"user", "password", "address"} {
			name := c.Filled()[role]
			if name == "" {
				continue
			}
			st, ok := settingNamed(settings, name)
			switch {
			case !ok:
				return fmt.Errorf("%s.%s: %q names no setting of the module", field, role, name)
			case st.Type != TypeString:
				return fmt.Errorf("%s.%s: setting %q is of type %s, not string", field, role, name, st.Type)
			case role == "password" && !st.Secret:
				return fmt.Errorf("%s.password: setting %q is not secret: a credential is filled only into a secret setting", field, name)
			case filled[name] != "":
				return fmt.Errorf("%s.%s: setting %q is filled by %s too", field, role, name, filled[name])
			}
			filled[name] = field + "." + role
		}
	}
	return nil
}

func settingNamed(settings []Setting, name string) (Setting, bool) {
	for _, s := range settings {
		if s.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// Provider says whether the module provides grant, and how.
func (m Module) Provider(grant string) (Provide, bool) {
	for _, p := range m.Provides {
		if p.Grant == grant {
			return p, true
		}
	}
	return Provide{}, false
}

// FilledSettings are the settings of m the controller fills for its
// grants, by name, each naming its grant.
func (m Module) FilledSettings() map[string]string {
	out := map[string]string{}
	for _, c := range m.Consumes {
		for _, name := range c.Filled() {
			out[name] = c.Grant
		}
	}
	return out
}

// API requests and results for grants.
type (
	GrantListRequest struct{}
	// GrantListResult is every credential minted, never its value.
	GrantListResult struct {
		Grants []GrantInfo `json:"grants"`
	}
	// GrantInfo is one consumer's grant: who provides it, to whom, when
	// its credential was minted, and whether the provider's node still
	// has a module that provides it (Orphaned when not).
	GrantInfo struct {
		Provider string    `json:"provider"`
		Consumer string    `json:"consumer"`
		Module   string    `json:"module"`
		Node     string    `json:"node"`
		Grant    string    `json:"grant"`
		MintedAt time.Time `json:"minted_at"`
		Orphaned bool      `json:"orphaned,omitempty"`
	}
	// GrantRotateRequest mints new credentials for every grant Module
	// consumes on Node.
	GrantRotateRequest struct {
		Module string `json:"module"`
		Node   string `json:"node"`
	}
	// GrantRotateResult is the grants rotated, and the nodes whose
	// declarations carry the new credentials (the consumer's and each
	// provider's): one push of them carries it to both sides.
	GrantRotateResult struct {
		Grants  []string `json:"grants"`
		Changed []string `json:"changed"`
	}
)
