package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Text the API passes to PostgreSQL must be UTF-8 without NUL: a text or
// jsonb column refuses anything else ("invalid byte sequence for encoding
// UTF8", "unsupported Unicode escape sequence"), which would surface as a
// 500. The checks here refuse such input first, as a 400 naming the field:
// CheckText for a JSON body's strings and keys (decodeBody and
// ParseCreateJob), checkRequestText for path and query parameters (every
// route, in Server.Handler).

// TextError is a string of a request that is not UTF-8 or holds a NUL.
type TextError struct {
	// Field names where the string is: a JSON path such as "actor" or
	// "args.target", "query parameter queue" or "path parameter queue".
	Field string
	// Problem is "invalid UTF-8 at byte N" or "NUL (U+0000) at byte N",
	// N counted in the decoded string.
	Problem string
}

func (e *TextError) Error() string { return e.Field + ": " + e.Problem }

// textProblem says what is wrong with s for PostgreSQL, or "".
func textProblem(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		if bad := firstInvalidUTF8(s[:i]); bad >= 0 {
			return fmt.Sprintf("invalid UTF-8 at byte %d", bad)
		}
		return fmt.Sprintf("NUL (U+0000) at byte %d", i)
	}
	if bad := firstInvalidUTF8(s); bad >= 0 {
		return fmt.Sprintf("invalid UTF-8 at byte %d", bad)
	}
	return ""
}

// firstInvalidUTF8 is the offset of s's first byte that is not UTF-8, or -1.
func firstInvalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// CheckText checks every string and key of the JSON value in data, at any
// depth, for NUL and bytes that are not UTF-8 (a JSON escape such as
// \u0000 counts as the character it stands for). It returns a *TextError
// naming the first bad one's path ("actor", "args.target", "args.tags[2]"),
// or nil. data must already have decoded (DecodeStrict): CheckText reads it
// with gjson, which keeps a string's bytes as sent where encoding/json would
// replace them with U+FFFD.
func CheckText(data []byte) error {
	return checkValue("", gjson.ParseBytes(data))
}

func checkValue(path string, v gjson.Result) error {
	var err error
	switch {
	case v.IsObject():
		v.ForEach(func(key, value gjson.Result) bool {
			field := joinField(path, key.Str)
			if p := textProblem(key.Str); p != "" {
				err = &TextError{Field: "key " + field, Problem: p}
				return false
			}
			err = checkValue(field, value)
			return err == nil
		})
	case v.IsArray():
		i := 0
		v.ForEach(func(_, value gjson.Result) bool {
			err = checkValue(path+"["+strconv.Itoa(i)+"]", value)
			i++
			return err == nil
		})
	case v.Type == gjson.String:
		if p := textProblem(v.Str); p != "" {
			return &TextError{Field: bodyField(path), Problem: p}
		}
	}
	return err
}

// joinField appends key to a field path; a key that is not a plain name is
// quoted (with its bad bytes escaped, so the error stays readable).
func joinField(path, key string) string {
	name := key
	if !plainName(key) {
		name = strconv.Quote(key)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

func plainName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// bodyField is path, or "body" for a body that is a bare string.
func bodyField(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// checkRequestText refuses, with a 400 naming the parameter, a request whose
// path parameters (the wildcards of pattern) or query parameters (names and
// values, as decoded from the URL) hold a NUL or bytes that are not UTF-8.
func checkRequestText(pattern string, next http.HandlerFunc) http.HandlerFunc {
	wildcards := patternWildcards(pattern)
	return func(w http.ResponseWriter, r *http.Request) {
		for _, name := range wildcards {
			if p := textProblem(r.PathValue(name)); p != "" {
				writeError(w, http.StatusBadRequest, "%v", &TextError{Field: "path parameter " + name, Problem: p})
				return
			}
		}
		query := r.URL.Query()
		for _, name := range slices.Sorted(maps.Keys(query)) {
			values := query[name]
			field := "query parameter " + joinField("", name)
			if p := textProblem(name); p != "" {
				writeError(w, http.StatusBadRequest, "%v", &TextError{Field: field, Problem: p})
				return
			}
			for _, v := range values {
				if p := textProblem(v); p != "" {
					writeError(w, http.StatusBadRequest, "%v", &TextError{Field: field, Problem: p})
					return
				}
			}
		}
		next(w, r)
	}
}

// patternWildcards are the names of a ServeMux pattern's {wildcards}.
func patternWildcards(pattern string) []string {
	var names []string
	for {
		_, rest, ok := strings.Cut(pattern, "{")
		if !ok {
			return names
		}
		name, after, _ := strings.Cut(rest, "}")
		names = append(names, strings.TrimSuffix(name, "..."))
		pattern = after
	}
}
