// Package tiers owns the billing tiers that tierq routes by: free, pro,
// pro_plus and enterprise.
//
// A Tier is a small integer so that routing on it costs nothing; its text form
// is the canonical lower-case name used in environment variables, job args,
// JSON and the subscriptions table. The zero value is not a tier: it is what an
// unset field holds, and routing treats it like an unknown tier (the default
// queue, counted).
package tiers

import (
	"errors"
	"fmt"
	"strings"
)

// Tier is a billing tier. The zero value is "no tier".
type Tier uint8

const (
	// Free is the unpaid tier. Its work goes to the `<service>_default` queue.
	Free Tier = iota + 1
	// Pro is the first paid tier. Its work goes to the `<service>_priority` queue.
	Pro
	// ProPlus is the second paid tier (canonical name `pro_plus`).
	ProPlus
	// Enterprise is the highest paid tier.
	Enterprise
)

// ErrUnknownTier is wrapped by every error that Parse returns.
var ErrUnknownTier = errors.New("unknown tier")

// All lists every tier from the cheapest to the most expensive.
func All() []Tier { return []Tier{Free, Pro, ProPlus, Enterprise} }

// names is indexed by Tier; index 0 is the zero value.
var names = [...]string{"", "free", "pro", "pro_plus", "enterprise"}

// Valid reports whether t is one of the four tiers (not the zero value, not an
// out-of-range number).
func (t Tier) Valid() bool { return t >= Free && t <= Enterprise }

// Paid reports whether t is a paying tier (pro, pro_plus or enterprise).
func (t Tier) Paid() bool { return t >= Pro && t <= Enterprise }

// String returns the canonical name ("free", "pro", "pro_plus",
// "enterprise"). The zero value and out-of-range values print as
// "unknown(N)" so that they are visible in logs.
func (t Tier) String() string {
	if t.Valid() {
		return names[t]
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Parse returns the tier named by s. Names are matched case-insensitively and
// surrounding white space is ignored. Anything else, the empty string included,
// is an error wrapping ErrUnknownTier.
func Parse(s string) (Tier, error) {
	trimmed := strings.TrimSpace(s)
	for t := Free; t <= Enterprise; t++ {
		if strings.EqualFold(trimmed, names[t]) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w %q (want free, pro, pro_plus or enterprise)", ErrUnknownTier, s)
}

// MarshalText implements encoding.TextMarshaler. The zero value and
// out-of-range values are an error, so an invalid tier is never written out.
func (t Tier) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownTier, uint8(t))
	}
	return []byte(names[t]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with the rules of Parse.
func (t *Tier) UnmarshalText(text []byte) error {
	parsed, err := Parse(string(text))
	if err != nil {
		return err
	}
	*t = parsed
	return nil
}
