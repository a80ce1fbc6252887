package ctl

// tierctl queues: River's own pause and resume (river.Client.QueuePause and
// QueueResume, through an insert-only client), and the list of queues River
// knows with whether each is paused and the workers serving it now (their
// fair-share heartbeats). A paused queue keeps its jobs and keeps
// taking inserts; workers fetch nothing from it until it is resumed (running
// jobs finish), and tierq's sweeps leave it alone (docs/scheduling.md,
// "Paused queues").

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/spf13/cobra"

	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/queuestats"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/scheduler"
)

// errQueueNotRegistered: a queue tierq knows but River has no row for in
// river_queue yet: no worker serving it has started, so there is nothing to
// pause.
var errQueueNotRegistered = errors.New("queue not registered")

func (a *app) queuesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List queues and pause or resume one (River's pause)",
		Long: `A paused queue keeps its jobs and keeps taking inserts, but no worker fetches
from it until it is resumed; jobs already running finish. tierq's escalation
and aging sweeps leave a paused queue alone. This is River's own pause
(river_queue.paused_at), the same as River UI's pause button.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return &UsageError{errors.New("queues needs a subcommand: list, pause or resume")}
		},
	}
	cmd.AddCommand(a.queuesListCommand(), a.queuePauseCommand(true), a.queuePauseCommand(false))
	return cmd
}

// queuePauseCommand is `queues pause` (pause true) or `queues resume`.
func (a *app) queuePauseCommand(pause bool) *cobra.Command {
	verb, short := "resume", "Resume a paused queue: workers fetch from it again"
	if pause {
		verb, short = "pause", "Pause a queue: workers fetch no new jobs from it until it is resumed"
	}
	return &cobra.Command{
		Use:     verb + " QUEUE",
		Short:   short,
		Example: "  tierctl queues " + verb + " analysis_default",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkQueueName(name); err != nil {
				return &UsageError{err}
			}
			ctx := cmd.Context()
			pool, client, err := a.connectProducer(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			services, err := a.catalog(ctx, pool)
			if err != nil {
				return err
			}
			// A known service's queue or the scheduler's, or one
			// river_queue has.
			serviceQueues := services.queues()
			known := append(slices.Clip(serviceQueues), scheduler.Queue)
			if !slices.Contains(known, name) {
				if known, err = queuestats.KnownQueues(ctx, pool, serviceQueues); err != nil {
					return fmt.Errorf("list queues: %w", err)
				}
				if !slices.Contains(known, name) {
					return &UsageError{fmt.Errorf("%q is not a queue; the queues are %s", name, strings.Join(known, ", "))}
				}
			}
			before, err := client.QueueGet(ctx, name)
			if errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("%w: queue %s has no row in river_queue: no worker serving it has started yet, so there is nothing to %s (start one, e.g. make run, and try again)",
					errQueueNotRegistered, name, verb)
			}
			if err != nil {
				return fmt.Errorf("read queue %s: %w", name, err)
			}
			switch {
			case pause && before.PausedAt != nil:
				fmt.Fprintf(a.stdout, "queue %s was already paused (since %s); nothing changed\n", name, formatTime(*before.PausedAt))
				return nil
			case !pause && before.PausedAt == nil:
				fmt.Fprintf(a.stdout, "queue %s is not paused; nothing changed\n", name)
				return nil
			case pause:
				if err := client.QueuePause(ctx, name, nil); err != nil {
					return fmt.Errorf("pause queue %s: %w", name, err)
				}
				fmt.Fprintf(a.stdout, "queue %s paused: workers fetch no new jobs from it (running jobs finish) until `tierctl queues resume %s`\n", name, name)
				if name == scheduler.Queue {
					fmt.Fprintln(a.stdout, "the scheduler's periodic jobs (the aging and escalation sweeps, the dead-letter drain, the services' periodic jobs) wait until then")
				}
			default:
				if err := client.QueueResume(ctx, name, nil); err != nil {
					return fmt.Errorf("resume queue %s: %w", name, err)
				}
				fmt.Fprintf(a.stdout, "queue %s resumed (it was paused for %s)\n", name, time.Since(*before.PausedAt).Round(time.Second))
			}
			return nil
		},
	}
}

// checkQueueName refuses what cannot be a queue name before any database
// is asked: River's rule (at most 128 bytes of letters, digits, '_' and
// '-'; River's "*", every queue at once, is not offered here).
func checkQueueName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("queue name %q: want 1 to 128 bytes", name)
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("queue name %q: only letters, digits, '_' and '-' (River's rule)", name)
		}
	}
	return nil
}

// queueRow is one line of `queues list`.
type queueRow struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"` // "service", "scheduler" or "other"
	PausedAt *time.Time `json:"paused_at"`
	// Workers, Processes and HeartbeatAt are the queue's live fair-share
	// heartbeats (fair_share_slots rows not expired): the workers tierq's
	// worker processes run on it, how many processes, and the latest
	// heartbeat (nil when none is live).
	Workers     int        `json:"workers"`
	Processes   int        `json:"processes"`
	HeartbeatAt *time.Time `json:"heartbeat_at"`
}

// listQueuesSQL reads River's pause of each queue, if it has a row, and
// the queue's live worker heartbeats (each worker process of tierq renews
// its rows every 5s; a row expires after three missed heartbeats).
const listQueuesSQL = `
SELECT q.name, r.paused_at, coalesce(h.workers, 0), coalesce(h.processes, 0), h.heartbeat_at
FROM unnest($1::text[]) WITH ORDINALITY AS q(name, ord)
LEFT JOIN ` + riverschema.QueueTable + ` AS r ON r.name = q.name
LEFT JOIN (
    SELECT s.queue, sum(s.slots)::int AS workers, count(DISTINCT s.client_id)::int AS processes,
           max(s.heartbeat_at) AS heartbeat_at
    FROM fair_share_slots AS s
    WHERE s.expires_at > now()
    GROUP BY s.queue
) AS h ON h.queue = q.name
ORDER BY q.ord`

// listQueues lists KnownQueues with River's pause and their live workers.
func listQueues(ctx context.Context, q db.Querier, serviceQueues []string) ([]queueRow, error) {
	known, err := queuestats.KnownQueues(ctx, q, serviceQueues)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	rows, err := q.Query(ctx, listQueuesSQL, known)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	var (
		out []queueRow
		r   queueRow
	)
	if _, err := pgx.ForEachRow(rows, []any{&r.Name, &r.PausedAt, &r.Workers, &r.Processes, &r.HeartbeatAt}, func() error {
		r.Kind = "other"
		if slices.Contains(serviceQueues, r.Name) {
			r.Kind = "service"
		} else if r.Name == scheduler.Queue {
			r.Kind = "scheduler"
		}
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return out, nil
}

// workersCell is the WORKERS cell of a queue: its live workers and
// processes with the latest heartbeat, or why there is no figure: none for
// a service's queue means no worker process serves it now; the scheduler's
// queue and other River clients' queues are served by processes that send
// no heartbeat.
func workersCell(q queueRow) string {
	switch {
	case q.HeartbeatAt != nil:
		processes := "processes"
		if q.Processes == 1 {
			processes = "process"
		}
		return fmt.Sprintf("%d in %d %s (heartbeat %s)", q.Workers, q.Processes, processes, formatTime(*q.HeartbeatAt))
	case q.Kind == "service":
		return "none (no worker process serves it now)"
	case q.Kind == "scheduler":
		return "not reported (the scheduler's own)"
	}
	return "not reported (not a tierq worker's queue)"
}

func (a *app) queuesListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the queues: the services', the scheduler's and any other River knows, paused or not, with their live workers",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			services, err := a.catalog(ctx, pool)
			if err != nil {
				return err
			}
			queues, err := listQueues(ctx, pool, services.queues())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(queues)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "QUEUE\tKIND\tSTATE\tWORKERS")
			for _, q := range queues {
				state := "active"
				if q.PausedAt != nil {
					state = "paused since " + formatTime(*q.PausedAt)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", termSafe(q.Name), q.Kind, state, workersCell(q))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// formatTime shows a time in UTC to the second.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
