// Package naming checks the names, descriptions and addresses people
// give (tokens, roles, templates, Blueprints, invitations) and makes
// slugs, one rule for each.
package naming

import (
	"fmt"
	"net/mail"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Name checks a required name: one line of at most 100 characters.
func Name(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", apierr.Invalid("name", "name is required")
	}
	if len(name) > 100 || strings.ContainsAny(name, "\x00\r\n") {
		return "", apierr.Invalid("name", "name must be at most 100 characters on one line")
	}
	return name, nil
}

// Field checks a required one-line value of at most max characters,
// without control characters, named field in errors.
func Field(field, value string, max int) (string, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return "", apierr.Invalid(field, "%s is required", field)
	}
	if len(value) > max {
		return "", apierr.Invalid(field, "%s must be at most %d characters", field, max)
	}
	for _, r := range value {
		if r < 0x20 || r == 0x7f {
			return "", apierr.Invalid(field, "%s must not contain control characters", field)
		}
	}
	return value, nil
}

// Email checks a plain email address (name@example.com) and lowercases
// it: accounts and invitations are keyed by it.
func Email(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", apierr.Invalid("email", "email is required")
	}
	addr, err := mail.ParseAddress(s)
	if err != nil || addr.Address != s || addr.Name != "" || len(s) > 254 {
		return "", apierr.Invalid("email", "email must be a plain address such as name@example.com")
	}
	return s, nil
}

// Description checks a description: at most 2000 characters.
func Description(d string) (string, error) {
	if len(d) > 2000 || strings.ContainsRune(d, 0) {
		return "", apierr.Invalid("description", "description must be at most 2000 characters")
	}
	return d, nil
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// Slug makes a slug from a name (fallback when the name has no letter
// or digit): the name itself when not taken, else with the first free
// number, or a random suffix when random is set (a retry after a race).
func Slug(name, fallback string, taken map[string]bool, random bool) string {
	base := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(base) > 48 {
		base = strings.Trim(base[:48], "-")
	}
	if base == "" {
		base = fallback
	}
	if random {
		return base + "-" + ids.Random(3)[:5]
	}
	if !taken[base] {
		return base
	}
	for n := 2; ; n++ {
		if s := fmt.Sprintf("%s-%d", base, n); !taken[s] {
			return s
		}
	}
}
