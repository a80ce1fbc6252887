package scan

import (
	"bytes"
	"regexp"
	"strings"
)

var (
	pyClassRe = regexp.MustCompile(`^class\s+(Test\w*)\s*[:(]`)
	pyDefRe   = regexp.MustCompile(`^(?:async\s+)?def\s+(test_\w*)\s*\(`)
)

// parsePython finds what pytest collects by default: functions named test_*
// at the top level of the module, and methods named test_* directly in a
// top-level class named Test*. Nested functions, methods of other classes and
// code inside triple-quoted strings do not count.
func parsePython(name string, src []byte) []Test {
	var (
		tests      []Test
		class      string // current top-level Test* class, "" outside one
		bodyIndent = -1   // indentation of that class's body
		inString   string // the triple quote we are inside, if any
	)
	for i, raw := range bytes.Split(src, []byte("\n")) {
		line := strings.TrimRight(string(raw), " \t\r")
		if inString != "" {
			if strings.Count(line, inString)%2 == 1 {
				inString = ""
			}
			continue
		}
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(trimmed)
		opensString := func() {
			for _, q := range []string{`"""`, `'''`} {
				if strings.Count(trimmed, q)%2 == 1 {
					inString = q
					return
				}
			}
		}

		if indent == 0 {
			class, bodyIndent = "", -1
			if m := pyClassRe.FindStringSubmatch(trimmed); m != nil {
				class = m[1]
			} else if m := pyDefRe.FindStringSubmatch(trimmed); m != nil {
				tests = append(tests, Test{File: name, Name: m[1], Framework: Pytest, Line: i + 1})
			}
			opensString()
			continue
		}
		if class != "" {
			if bodyIndent < 0 {
				bodyIndent = indent
			}
			if indent == bodyIndent {
				if m := pyDefRe.FindStringSubmatch(trimmed); m != nil {
					tests = append(tests, Test{File: name, Name: class + "::" + m[1], Framework: Pytest, Line: i + 1})
				}
			}
		}
		opensString()
	}
	return tests
}
