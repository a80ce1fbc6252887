package safetext_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/safetext"
)

func TestVisible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, give, want string
	}{
		{"plain", "café 東京 <b>", "café 東京 <b>"},
		{"ANSI clear screen", "\x1b[2J", `\x1b[2J`},
		{"OSC title", "\x1b]0;owned\x07", `\x1b]0;owned\a`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"zero-width space", "a\u200bb", `a\u200bb`},
		{"C1 CSI", "\u009b31m", `\u009b31m`},
		{"no-break space", "a\u00a0b", `a\u00a0b`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, safetext.Visible(tt.give))
		})
	}
	require.Equal(t, "a\n    b\\x1b", safetext.VisibleLines("a\n\tb\x1b"), "lines keep their breaks, tabs become spaces")
}
