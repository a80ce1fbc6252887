// Package specdoc turns the tests an analysis found into a readable spec
// document: tests grouped by file, each name turned into a sentence
// (`TestSelectQueue_UnknownTierGoesDefault` reads "Select queue: unknown tier
// goes default"). It is the work of the SpecGenerator service, kept free of
// River and the database.
package specdoc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tierq/tierq/jobs/scan"
)

// Sentence turns a test name of the given framework into a sentence.
//
//   - Go: the Test prefix goes, the part before the first underscore is the
//     subject, the rest what it does: TestParse_EmptyString → "Parse: empty
//     string". CamelCase splits into lower-case words; acronyms stay.
//   - pytest: test_ goes and underscores become spaces; a Test* class becomes
//     the subject: TestCalc::test_mul_by_zero → "Calc: mul by zero".
//   - js: titles are sentences already; only the first letter is raised.
func Sentence(framework scan.Framework, name string) string {
	switch framework {
	case scan.Go:
		return goSentence(name)
	case scan.Pytest:
		return pytestSentence(name)
	default:
		return capitalize(strings.TrimSpace(name))
	}
}

func goSentence(name string) string {
	rest := strings.TrimPrefix(name, "Test")
	parts := strings.FieldsFunc(rest, func(r rune) bool { return r == '_' })
	if len(parts) == 0 {
		return name
	}
	subject := capitalize(strings.Join(camelWords(parts[0]), " "))
	if len(parts) == 1 {
		return subject
	}
	var behaviour []string
	for _, p := range parts[1:] {
		behaviour = append(behaviour, camelWords(p)...)
	}
	return subject + ": " + strings.Join(behaviour, " ")
}

func pytestSentence(name string) string {
	class, fn, hasClass := strings.Cut(name, "::")
	if !hasClass {
		fn, class = class, ""
	}
	words := strings.Join(strings.FieldsFunc(strings.TrimPrefix(fn, "test_"), func(r rune) bool { return r == '_' }), " ")
	if class == "" {
		return capitalize(words)
	}
	subject := capitalize(strings.Join(camelWords(strings.TrimPrefix(class, "Test")), " "))
	if subject == "" {
		return capitalize(words)
	}
	return subject + ": " + words
}

// camelWords splits "UnknownTierGoesDefault" into ["unknown", "tier", "goes",
// "default"] and "HTTPServerOK" into ["HTTP", "server", "OK"]: words are
// lower-cased unless they are acronyms.
func camelWords(s string) []string {
	runes := []rune(s)
	var words []string
	start := 0
	for i := 1; i < len(runes); i++ {
		prev, cur := runes[i-1], runes[i]
		var next rune
		if i+1 < len(runes) {
			next = runes[i+1]
		}
		lowerToUpper := !unicode.IsUpper(prev) && unicode.IsUpper(cur)
		acronymEnd := unicode.IsUpper(prev) && unicode.IsUpper(cur) && unicode.IsLower(next)
		if lowerToUpper || acronymEnd {
			words = append(words, string(runes[start:i]))
			start = i
		}
	}
	if start < len(runes) {
		words = append(words, string(runes[start:]))
	}
	for i, w := range words {
		if !isAcronym(w) {
			words[i] = strings.ToLower(w)
		}
	}
	return words
}

func isAcronym(w string) bool {
	if utf8.RuneCountInString(w) < 2 {
		return false
	}
	for _, r := range w {
		if unicode.IsLower(r) {
			return false
		}
	}
	return true
}

func capitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError {
		return s
	}
	return string(unicode.ToUpper(r)) + s[size:]
}

// Document is a rendered spec.
type Document struct {
	Title   string
	Content string // Markdown
}

// Render renders the spec of the tests found in target, grouped by file in
// path order and by line inside a file.
func Render(target, commit string, tests []scan.Test) Document {
	sorted := slices.Clone(tests)
	slices.SortStableFunc(sorted, func(a, b scan.Test) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})

	title := "Spec: " + target
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "%d tests", len(tests))
	if commit != "" {
		fmt.Fprintf(&b, " at commit %s", commit[:min(12, len(commit))])
	}
	b.WriteString(".\n")
	file := ""
	for _, test := range sorted {
		if test.File != file {
			file = test.File
			fmt.Fprintf(&b, "\n## %s\n\n", file)
		}
		fmt.Fprintf(&b, "- %s\n", Sentence(test.Framework, test.Name))
	}
	return Document{Title: title, Content: b.String()}
}
