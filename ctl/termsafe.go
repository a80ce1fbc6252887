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
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tierq/tierq/internal/safetext"
)

// termSafe returns s with every character a terminal would act on or not
// show replaced by a visible Go escape (safetext.Visible).
func termSafe(s string) string { return safetext.Visible(s) }

// termSafeLines is termSafe for text whose line breaks tierctl keeps (a
// stack trace, indented JSON): safetext.VisibleLines.
func termSafeLines(s string) string { return safetext.VisibleLines(s) }

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
