// Package safetext makes text written by producers and workers (a job's
// args, errors, metadata, tenant, and the actor of a replay or an
// escalation) safe to show to an operator: on a terminal (tierctl) and in
// a web page (the API's operator console). Printed raw, an error holding
// ESC [2J clears the operator's screen, an OSC sequence retitles the window
// or plants a hyperlink, a bare CR or backspaces overwrite what came
// before, and a bidi override (U+202E) reorders a line, in a terminal and
// in a browser alike. Visible replaces every such character with a visible
// Go escape, so the operator reads what is there.
package safetext

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Visible returns s with every character a terminal or a browser would act
// on or not show replaced by a visible Go escape: C0 controls including
// newline, tab and CR (\x1b, \x00, \n, \t, \r, \b), DEL (\x7f), C1
// controls (\u009b), format characters such as bidi overrides (\u202e) and
// zero-width spaces, spaces other than U+0020 (\u00a0), and bytes that are
// not UTF-8 (\xff). Printable text, in any script, is kept as it is; so
// are backslashes, so the text "\x1b" and an escaped ESC show alike (both
// harmlessly).
func Visible(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u009b': drop the quotes
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// VisibleLines is Visible for text whose line breaks are kept (a stack
// trace, indented JSON): each line is made visible on its own, and tabs
// become four spaces.
func VisibleLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		lines[i] = Visible(strings.ReplaceAll(line, "\t", "    "))
	}
	return strings.Join(lines, "\n")
}
