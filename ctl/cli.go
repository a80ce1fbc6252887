package ctl

// Helpers shared by tierctl's commands: connecting, flag and id parsing,
// progress and JSON output.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/schollz/progressbar/v3"

	"github.com/tierq/tierq/internal/process"
	"github.com/tierq/tierq/producer"
)

// connectProducer connects (a.connect) and builds an insert-only River
// client (no queues, never a leader) on the pool; the caller closes the pool.
// ConnectProducer is what tierctl's inserting commands connect with, for a
// command added through Config.Commands (the stock tierctl's demo): the
// configuration from environ (config.CLI), a pool, the schema check of
// every command (migrate.Check: a *migrate.SchemaError says to run
// `tierctl migrate`), and an insert-only River client on the pool
// (producer.ClientConfig: no queues, never a leader). The caller closes
// the pool.
func ConnectProducer(ctx context.Context, environ []string) (*pgxpool.Pool, *river.Client[pgx.Tx], error) {
	return (&app{environ: environ}).connectProducer(ctx)
}

func (a *app) connectProducer(ctx context.Context) (*pgxpool.Pool, *river.Client[pgx.Tx], error) {
	cfg, pool, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	client, err := process.NewClient(pool, producer.ClientConfig(cfg.Schema, nil))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, client, nil
}

// checkRange is a usage error unless lo <= n <= hi.
func checkRange(flag string, n, lo, hi int) error {
	if n < lo || n > hi {
		return &UsageError{fmt.Errorf("%s must be between %d and %d, not %d", flag, lo, hi, n)}
	}
	return nil
}

// parseIDs reads positive ids from arguments.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, len(args))
	for i, arg := range args {
		id, err := parseID("ID", arg)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

func (a *app) progressBar(total int, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(a.stdout),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(a.stdout) }),
	)
}

// printJSON prints v as indented JSON with no raw control or format
// character in it (jsonTermSafe): --json output is often read on a terminal.
func (a *app) printJSON(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := a.stdout.Write(jsonTermSafe(buf.Bytes()))
	return err
}

// user is who runs tierctl, from $USER, for the replay audit.
func (a *app) user() string {
	for _, kv := range a.environ {
		if name, ok := strings.CutPrefix(kv, "USER="); ok && name != "" {
			return name
		}
	}
	return "tierctl"
}

// parseID reads a positive row or job id.
func parseID(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, &UsageError{fmt.Errorf("%s %q is not an id (a positive integer)", what, s)}
	}
	return id, nil
}

// parseAge reads a Go duration or a whole number of days ("30d"); "" is 0.
func parseAge(flag, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, &UsageError{fmt.Errorf("%s %q: want a duration such as 90m, 24h or 30d", flag, s)}
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, &UsageError{fmt.Errorf("%s %q: want a duration such as 90m, 24h or 30d", flag, s)}
		}
	}
	return d, nil
}

// oneLine makes s safe for a terminal (termSafe: a newline shows as \n)
// and shortens it to n runes, for a table cell.
func oneLine(s string, n int) string {
	return truncate(strings.Join(strings.Fields(termSafe(s)), " "), n)
}

// indentJSON pretty-prints a JSON document, continuation lines prefixed,
// safe for a terminal (termSafeLines).
func indentJSON(doc json.RawMessage, prefix string) string {
	var buf bytes.Buffer
	if json.Indent(&buf, doc, prefix, "  ") != nil {
		return termSafe(string(doc))
	}
	return termSafeLines(buf.String())
}
