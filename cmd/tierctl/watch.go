package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// watchStates are the River states shown, in lifecycle order.
var watchStates = []string{"scheduled", "available", "running", "retryable", "completed", "cancelled", "discarded"}

// queueCountsQuery counts jobs per queue and state. It reads every row of
// river_job, which is fine for watching a demo or a test database; the
// metrics endpoint (a later issue) uses cheaper, indexed queries.
const queueCountsQuery = `SELECT queue, state::text, count(*) FROM river_job GROUP BY queue, state`

func (a *app) watchCommand() *cobra.Command {
	var (
		interval time.Duration
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Show live job counts and progress per queue until interrupted",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return &usageError{fmt.Errorf("--interval must be at least 100ms, not %s", interval)}
			}
			ctx := cmd.Context()
			_, pool, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()

			redraw := isTerminal(a.stdout) && !once
			lines := 0
			ticker := time.NewTicker(interval)
			defer ticker.Stop()
			for {
				counts, err := queueCounts(ctx, pool)
				if err != nil {
					if ctx.Err() != nil {
						return nil // interrupted
					}
					return err
				}
				table := renderCounts(counts)
				if redraw && lines > 0 {
					fmt.Fprintf(a.stdout, "\033[%dA\033[J", lines) // back over the last table
				}
				fmt.Fprint(a.stdout, table)
				lines = strings.Count(table, "\n")
				if once {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-ticker.C:
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	cmd.Flags().BoolVar(&once, "once", false, "print the counts once and exit")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd())) //nolint:gosec // file descriptors fit in int
}

func queueCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]map[string]int64, error) {
	rows, err := pool.Query(ctx, queueCountsQuery)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	defer rows.Close()
	counts := map[string]map[string]int64{}
	for rows.Next() {
		var (
			queue, state string
			n            int64
		)
		if err := rows.Scan(&queue, &state, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", err)
		}
		if counts[queue] == nil {
			counts[queue] = map[string]int64{}
		}
		counts[queue][state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return counts, nil
}

// renderCounts renders one table: a row per queue, a column per state, and a
// bar of finished (completed, cancelled, discarded) over all jobs.
func renderCounts(counts map[string]map[string]int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", time.Now().Format("15:04:05"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "QUEUE\t")
	for _, state := range watchStates {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(state))
	}
	fmt.Fprint(tw, "PROGRESS\t\n")
	if len(counts) == 0 {
		fmt.Fprint(tw, "(no jobs)\t\n")
	}
	for _, queue := range slices.Sorted(maps.Keys(counts)) {
		var total, finished int64
		fmt.Fprintf(tw, "%s\t", queue)
		for _, state := range watchStates {
			n := counts[queue][state]
			total += n
			if state == "completed" || state == "cancelled" || state == "discarded" {
				finished += n
			}
			fmt.Fprintf(tw, "%d\t", n)
		}
		fmt.Fprintf(tw, "%s\t\n", bar(finished, total, 20))
	}
	_ = tw.Flush()
	return b.String()
}

func bar(done, total int64, width int) string {
	filled := 0
	if total > 0 {
		filled = int(done * int64(width) / total)
	}
	return fmt.Sprintf("[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total)
}
