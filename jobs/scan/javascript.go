package scan

// parseJS finds `it(...)` and `test(...)` calls, with their modifiers
// (`it.only`, `test.skip`, `test.each(...)`), in JavaScript or TypeScript
// source. `describe` blocks do not count, nor do method calls such as
// `/re/.test(s)`, nor anything inside comments or string literals.
func parseJS(name string, src []byte) []Test {
	var (
		tests []Test
		line  = 1
		prev  byte // previous significant byte
	)
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			i += 2
			for i < len(src) && !(src[i] == '*' && i+1 < len(src) && src[i+1] == '/') {
				if src[i] == '\n' {
					line++
				}
				i++
			}
			i += 2
			prev = ' '
		case c == '"' || c == '\'' || c == '`':
			_, end, newlines := jsString(src, i)
			line += newlines
			i = end
			prev = c
		case isIdentStart(c):
			start := i
			for i < len(src) && isIdentPart(src[i]) {
				i++
			}
			word := string(src[start:i])
			if (word == "it" || word == "test") && prev != '.' {
				if title, ok := jsTestCall(src, i); ok {
					tests = append(tests, Test{File: name, Name: title, Framework: JS, Line: line})
				}
			}
			prev = 'a'
		default:
			prev = c
			i++
		}
	}
	return tests
}

// jsTestCall looks at what follows `it` or `test` at i: optional modifiers
// (`.only`, `.skip`, `.each(...)`...), then a call. It returns the title when
// the first argument is a string literal, and whether it is a call at all.
func jsTestCall(src []byte, i int) (string, bool) {
	i = skipSpace(src, i)
	for i < len(src) && src[i] == '.' {
		i = skipSpace(src, i+1)
		start := i
		for i < len(src) && isIdentPart(src[i]) {
			i++
		}
		switch string(src[start:i]) {
		case "only", "skip", "todo", "concurrent", "failing":
		case "each":
			// test.each(table)(title, fn): skip the table's parentheses.
			i = skipSpace(src, i)
			end, ok := skipParens(src, i)
			if !ok {
				return "", false
			}
			i = end
		default:
			return "", false
		}
		i = skipSpace(src, i)
	}
	if i >= len(src) || src[i] != '(' {
		return "", false
	}
	i = skipSpace(src, i+1)
	if i < len(src) && (src[i] == '"' || src[i] == '\'' || src[i] == '`') {
		title, _, _ := jsString(src, i)
		return title, true
	}
	return "", true
}

// jsString reads the string literal opening at i and returns its contents,
// the index after it and the newlines it spans.
func jsString(src []byte, i int) (string, int, int) {
	quote := src[i]
	var (
		out      []byte
		newlines int
	)
	for i++; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\\' && i+1 < len(src):
			i++
			out = append(out, src[i])
			if src[i] == '\n' {
				newlines++
			}
		case c == quote:
			return string(out), i + 1, newlines
		case c == '\n':
			newlines++
			if quote != '`' {
				return string(out), i, newlines - 1 // unterminated: stop at the line end
			}
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	return string(out), i, newlines
}

func skipParens(src []byte, i int) (int, bool) {
	if i >= len(src) || src[i] != '(' {
		return i, false
	}
	depth := 0
	for i < len(src) {
		switch c := src[i]; c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case '"', '\'', '`':
			_, end, _ := jsString(src, i)
			i = end
			continue
		}
		i++
	}
	return i, false
}

func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') {
		i++
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
