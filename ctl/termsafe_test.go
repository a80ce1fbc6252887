package ctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/internal/testdb"
	"github.com/tierq/tierq/jobmeta"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want string
	}{
		{"plain", "render spec: connection refused", "render spec: connection refused"},
		{"non-Latin scripts stay readable", "ошибка 失败 خطأ त्रुटि ✓", "ошибка 失败 خطأ त्रुटि ✓"},
		{"erase display", "\x1b[2Jgone", `\x1b[2Jgone`},
		{"OSC title", "\x1b]0;pwned\x07", `\x1b]0;pwned\a`},
		{"OSC 8 hyperlink", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", `\x1b]8;;https://evil.example\x1b\click\x1b]8;;\x1b\`},
		{"C1 CSI", "\u009b31mred", `\u009b31mred`},
		{"C1 OSC and ST", "\u009d0;t\u009c", `\u009d0;t\u009c`},
		{"NUL", "a\x00b", `a\x00b`},
		{"bare CR", "ok\rFAKE", `ok\rFAKE`},
		{"backspace", "secret\b\b\b\b\b\b", `secret\b\b\b\b\b\b`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"bidi override and isolate", "\u202egnp.exe\u2066x\u2069", `\u202egnp.exe\u2066x\u2069`},
		{"zero width and no-break space", "a\u200bb\u00a0c", `a\u200bb\u00a0c`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"replacement character kept", "a\ufffdb", "a\ufffdb"},
		{"format character above the BMP", "a\U000e0001b", `a\U000e0001b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := termSafe(tt.give)
			require.Equal(t, tt.want, got)
			requireTerminalSafe(t, got, false)
		})
	}
}

func TestJSONTermSafe(t *testing.T) {
	t.Parallel()
	give := map[string]string{"error": hostile, "astral": "a\U000e0001b"}
	doc, err := json.Marshal(give)
	require.NoError(t, err)
	got := jsonTermSafe(doc)
	requireTerminalSafe(t, string(got), true)
	require.Contains(t, string(got), `\u009b`)
	require.Contains(t, string(got), `\u202e`)
	require.Contains(t, string(got), `\udb40\udc01`)
	require.Contains(t, string(got), "ошибка")
	var back map[string]string
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, give, back, "the same document")
}

// hostile holds what an error, args or metadata must never do to an
// operator's terminal, around text that must stay readable. Postgres text
// cannot hold NUL or invalid UTF-8, so those are in TestTermSafe only.
const hostile = "ошибка \x1b[2J\x1b]0;pwned\x07\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\" +
	"\u009b31m ok\rFAKE secret\b\b\b\b\b\b \x7f \u202egnp.exe"

// hostileEscaped is hostile as tierctl prints it.
const hostileEscaped = `ошибка \x1b[2J\x1b]0;pwned\a\x1b]8;;https://evil.example\x1b\link\x1b]8;;\x1b\` +
	`\u009b31m ok\rFAKE secret\b\b\b\b\b\b \x7f \u202egnp.exe`

// TestDeadLetterOutputIsTerminalSafe puts hostile values in every field of
// a real dead letter that tierctl prints (kind, queue, args, metadata's
// tenant, tags, errors, traces, replayed_by) and runs dlq drain, list,
// show, show --trace, the --json forms and a replay: the output holds no
// raw control or format character, shows each escape literally, and keeps
// the tier, the tenant and non-Latin text readable.
func TestDeadLetterOutputIsTerminalSafe(t *testing.T) {
	t.Parallel()

	type bundle struct {
		db      *testdb.DB
		environ []string
	}
	setup := func(t *testing.T) (bundle, int64) {
		t.Helper()
		db := testdb.New(t)
		ctx := context.Background()
		args, err := json.Marshal(map[string]any{"tier": "free", "target": hostile})
		require.NoError(t, err)
		metadata, err := json.Marshal(map[string]any{jobmeta.Tier: "pro", jobmeta.Tenant: "t\x1b[2J" + strings.Repeat("x", 40)})
		require.NoError(t, err)
		jobID := testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis\x1b[2J", Queue: "analysis_default\u009b2J",
			State: "discarded", Args: string(args), Metadata: string(metadata)})
		_, err = db.Pool.Exec(ctx, `
			UPDATE river_job SET tags = ARRAY[$2],
			       errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', $3::text, 'trace', $4::text)]
			WHERE id = $1`, jobID, "tag\u202e", hostile, "goroutine 1 [running]:\n\tmain.go:1\x1b[2J\n")
		require.NoError(t, err)

		b := bundle{db: db, environ: append(dbEnv(t, db), "USER=alice\x1b]0;x\x07")}
		out, err := runTierctl(t, b.environ, "dlq", "drain")
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		require.Contains(t, out, `analysis_default\u009b2J`)
		return b, int64(db.Count(t, `SELECT id FROM dead_letter_jobs`))
	}

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		b, _ := setup(t)
		out, err := runTierctl(t, b.environ, "dlq", "list")
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		require.Regexp(t, `ID\s+JOB ID\s+KIND\s+QUEUE\s+TIER\s+TENANT\s+ATTEMPTS\s+LAST ERROR\s+MOVED AT\s+REPLAYED AS`, out)
		// Tier from metadata; the tenant escaped, then cut to 24 runes.
		require.Contains(t, out, `analysis\x1b[2J  analysis_default\u009b2J  pro   t\x1b[2Jxxxxxxxxxxxxxxx…  1/1`)
		require.Contains(t, out, `ошибка \x1b[2J\x1b]0;pwned\a`)
	})

	t.Run("Show", func(t *testing.T) {
		t.Parallel()
		b, id := setup(t)
		out, err := runTierctl(t, b.environ, "dlq", "show", itoa(id), "--trace")
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		require.Contains(t, out, `kind analysis\x1b[2J`)
		require.Contains(t, out, `queue         analysis_default\u009b2J (priority 4)`)
		require.Contains(t, out, "tier          pro\n")
		require.Contains(t, out, `tenant        t\x1b[2J`+strings.Repeat("x", 40)+"\n")
		require.Contains(t, out, `tags          tag\u202e`)
		require.Contains(t, out, ": "+hostileEscaped+"\n")
		require.Contains(t, out, "      goroutine 1 [running]:\n          main.go:1\\x1b[2J\n")
		// Postgres writes ESC in jsonb as \u001b; C1, DEL and bidi come raw.
		require.Contains(t, out, `"target": "ошибка \u001b[2J`)
		require.Contains(t, out, `\u009b31m ok\rFAKE`)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		b, id := setup(t)
		for _, args := range [][]string{{"dlq", "list", "--json"}, {"dlq", "show", itoa(id), "--json"}} {
			out, err := runTierctl(t, b.environ, args...)
			require.NoError(t, err, out)
			requireTerminalSafe(t, out, true)
			require.Contains(t, out, `\u009b31m`)
		}
		out, err := runTierctl(t, b.environ, "dlq", "show", itoa(id), "--json")
		require.NoError(t, err, out)
		var d dlq.DeadLetter
		require.NoError(t, json.Unmarshal([]byte(out), &d))
		require.Equal(t, hostile, d.Errors[0].Error, "--json keeps every value exactly")
		require.Equal(t, "analysis_default\u009b2J", d.Queue)
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		b, id := setup(t)
		// Its kind and queue are no service's: refused, the reason escaped.
		out, err := runTierctl(t, b.environ, "dlq", "replay", itoa(id), "--to-queue", "analysis_default")
		require.Error(t, err)
		requireTerminalSafe(t, out, false)
		require.Contains(t, out, `a analysis\x1b[2J job from analysis_default\u009b2J cannot go to queue analysis_default`)
		// Made replayable; the actor ($USER) stays hostile.
		_, err = b.db.Pool.Exec(context.Background(), `
			UPDATE dead_letter_jobs
			SET kind = 'analysis', queue = 'analysis_default', tags = '{}', metadata = metadata || '{"tierq:tenant": "u_1"}'
			WHERE id = $1`, id)
		require.NoError(t, err)
		out, err = runTierctl(t, b.environ, "dlq", "replay", itoa(id), "--to-queue", "analysis_default")
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		out, err = runTierctl(t, b.environ, "dlq", "show", itoa(id))
		require.NoError(t, err, out)
		requireTerminalSafe(t, out, false)
		require.Regexp(t, `replayed      \S+ as job \d+ by alice\\x1b\]0;x\\a\n`, out)
	})
}

// TestWatchIsTerminalSafe: a queue name from a job's row is escaped in
// both of watch's tables and in the paused queues' line.
func TestWatchIsTerminalSafe(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "q\x1b[2J\u009b", Metadata: `{"tierq:tier": "pro"}`})
	testdb.InsertRaw(t, db, testdb.RawJob{Kind: "analysis", Queue: "q\x1b[2J\u009b", State: "discarded"})
	// As a River client with that queue registers it.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO river_queue (name, created_at, updated_at, paused_at) VALUES ($1, now(), now(), now())`, "q\x1b[2J\u009b")
	require.NoError(t, err)
	out, err := runTierctl(t, dbEnv(t, db), "watch", "--once")
	require.NoError(t, err, out)
	requireTerminalSafe(t, out, false)
	require.Regexp(t, `(?m)^\s*q\\x1b\[2J\\u009b \(paused\)\s+0\s+0\s+0\s+1\s`, out)
	require.Regexp(t, `(?m)^  q\\x1b\[2J\\u009b since \d\d:\d\d:\d\d$`, out)
	require.Regexp(t, `(?m)^\s*q\\x1b\[2J\\u009b\s+\(any\)\s+1\s`, out)
}

// requireTerminalSafe fails unless s is UTF-8 with no character a terminal
// acts on: C0 controls but the newlines tierctl writes (and none at all
// inside a JSON document's strings), DEL, C1 controls, bidi controls.
func requireTerminalSafe(t *testing.T, s string, isJSON bool) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "invalid UTF-8 in %q", s)
	for i, r := range s {
		bad := (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c
		require.False(t, bad, "raw %U at byte %d of %q", r, i, s)
	}
	if isJSON {
		require.True(t, json.Valid([]byte(s)), "not JSON: %q", s)
	}
}
