package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tierq/tierq/api"
)

// FuzzCheckText: a JSON body CheckText accepts has no NUL in any string or
// key as encoding/json decodes it (what the handlers pass to PostgreSQL),
// and no byte that is not UTF-8 (which encoding/json would silently replace
// with U+FFFD); a body it refuses is refused with a *api.TextError.
func FuzzCheckText(f *testing.F) {
	f.Add([]byte(`{"actor":"alice","reason":"zoë ☎"}`))
	f.Add([]byte(`{"actor":"a\u0000"}`))
	f.Add([]byte("{\"args\":{\"tags\":[\"ok\",\"\xff\"]}}"))
	f.Add([]byte(`{"k\u0000":1}`))
	f.Add([]byte(`["\ud800",{"a":{"b":"\u0000"}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		err := api.CheckText(data)
		if err != nil {
			if _, ok := err.(*api.TextError); !ok {
				t.Fatalf("%q: %T %v", data, err, err)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("accepted bytes that are not UTF-8: %q", data)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				if strings.ContainsRune(v, 0) {
					t.Fatalf("accepted a NUL: %q", data)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
	})
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want string
	}{
		{"clean", `{"actor":"zoë","n":[1,"☎"]}`, ""},
		{"NUL escaped", `{"actor":"ab\u0000"}`, "actor: NUL (U+0000) at byte 2"},
		{"not UTF-8", "{\"reason\":\"ok\xc3(\"}", "reason: invalid UTF-8 at byte 2"},
		{"nested", `{"args":{"tags":["a","\u0000"]}}`, "args.tags[1]: NUL (U+0000) at byte 0"},
		{"key", `{"args":{"a\u0000":1}}`, `key args."a\x00": NUL (U+0000) at byte 1`},
		{"bare string", `"\u0000"`, "body: NUL (U+0000) at byte 0"},
		{"not UTF-8 before NUL", "{\"a\":\"\xff\\u0000\"}", "a: invalid UTF-8 at byte 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := api.CheckText([]byte(tt.give))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v, want %s", err, tt.want)
			}
		})
	}
}
