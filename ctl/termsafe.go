package ctl

// Making job data safe for a terminal. A job's args, errors, metadata, kind,
// queue, tags and tenant, and the actor of a replay or an escalation, are
// written by producers and workers, not by tierctl: printed raw, an error
// holding ESC [2J clears the operator's screen, an OSC sequence retitles the
// window or plants a hyperlink, a bare CR or backspaces overwrite what came
// before, and a bidi override reorders a line. Every value tierctl prints
// from a job goes through termSafe (or a helper built on it) first.

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// termSafe returns s with every character a terminal would act on or not
// show replaced by a visible Go escape: C0 controls including newline, tab
// and CR (\x1b, \x00, \n, \t, \r, \b), DEL (\x7f), C1 controls (\u009b),
// format characters such as bidi overrides (\u202e) and zero-width spaces,
// spaces other than U+0020 (\u00a0), and bytes that are not UTF-8 (\xff).
// Printable text, in any script, is kept as it is; so are backslashes, so
// the text "\x1b" and an escaped ESC print alike (both harmlessly).
func termSafe(s string) string {
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

// termSafeLines is termSafe for text whose line breaks tierctl keeps (a
// stack trace, indented JSON): each line is made safe on its own, and tabs
// become four spaces.
func termSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		lines[i] = termSafe(strings.ReplaceAll(line, "\t", "    "))
	}
	return strings.Join(lines, "\n")
}

// truncate shortens s to n runes, the last one "…" when it was longer.
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// jsonTermSafe rewrites a JSON document from encoding/json so that it holds
// no character termSafe would escape: encoding/json escapes C0 controls but
// writes DEL, C1 controls and format characters raw. Outside strings such a
// document holds only spaces and newlines, so every other character found
// is inside a string and becomes a \u escape; the document means the same.
func jsonTermSafe(doc []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(doc))
	for i := 0; i < len(doc); {
		r, size := utf8.DecodeRune(doc[i:])
		invalid := r == utf8.RuneError && size == 1
		switch {
		case !invalid && (r == '\n' || strconv.IsPrint(r)):
			out.Write(doc[i : i+size])
		case invalid:
			out.WriteString(`\ufffd`) // encoding/json never writes invalid UTF-8; be safe anyway
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			writeU(&out, r1)
			writeU(&out, r2)
		default:
			writeU(&out, r)
		}
		i += size
	}
	return out.Bytes()
}

func writeU(b *bytes.Buffer, r rune) {
	b.WriteString(`\u`)
	b.WriteString(strconv.FormatUint(uint64(r)|0x10000, 16)[1:])
}
