//go:build chaos

package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/jobs"
	"github.com/tierq/tierq/producer"
	"github.com/tierq/tierq/tiers"
)

// failoverGate set to 0 skips TestDatabaseFailover, for a machine where
// scripts/ha.sh cannot install or run pg_auto_failover. The scenario runs
// in `make chaos` since it passed three runs in a row
// (docs/reliability.md, database failover).
const failoverGate = "CHAOS_FAILOVER"

// TestDatabaseFailover takes the primary's whole node away under load — its
// PostgreSQL and pg_auto_failover's keeper, by SIGKILL, so nothing restarts
// it in place — and lets the manager promote the synchronous standby.
// tierq's processes and the producer reach whichever node is primary through
// a multi-host DATABASE_URL (target_session_attrs=read-write,
// connect_timeout=2), and none is restarted. Proves: every insert
// acknowledged by a commit exists on the new primary and completes (the
// standby was synchronous); inserts refused during the failover that
// committed anyway are worked too; the workers start jobs again and a
// scheduler leads again, without a restart; no attempt starts twice.
// Reports the manager's time (kill → new primary accepting writes, seen by
// a write tried every 10 ms; ha.sh's own coarser time is logged) and
// tierq's (new primary accepting writes → first job started).
func TestDatabaseFailover(t *testing.T) {
	if os.Getenv(failoverGate) == "0" {
		t.Skipf("%s=0", failoverGate)
	}
	ctx := context.Background()
	ha := startHA(t, filepath.Join(suite.base, "database-failover-ha"), "chaos_database_failover")
	s := newSystemAt(t, "database-failover", withPassword(ha.exports["DATABASE_URL"]))
	// The error paths of a lost database are where a connection string is
	// most likely to be printed: every level is logged here.
	s.env = append(s.env, "LOG_LEVEL=debug")
	s.lendIdlePriority()
	schedulers := []*proc{s.scheduler(), s.scheduler()}
	for _, svc := range s.registry.Services() {
		s.worker(svc)
	}
	s.waitLeader(ctx, schedulers...)

	loadCtx, stopLoad := context.WithCancel(ctx)
	prod, waitLoad := s.produce(loadCtx, 20*time.Millisecond)
	// Jobs flow for 8 s before the kill, and some completed on the first
	// primary.
	loadStart := time.Now()
	for {
		var done int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM load_test_executions WHERE completed_at IS NOT NULL`).Scan(&done))
		if done >= 50 && time.Since(loadStart) >= 8*time.Second {
			break
		}
		require.Less(t, time.Since(loadStart), 30*time.Second, "only %d jobs completed in 30s before the kill", done)
		time.Sleep(200 * time.Millisecond)
	}
	ackedBefore := prod.acked()

	// The moment the standby accepts writes, to 10 ms: ha.sh's own probe
	// (a psql run every 0.1 s) is too coarse to time tierq against.
	writable := probeWrites(ctx, ha.exports["TIERQ_HA_STANDBY_URL"])
	killed := ha.run("kill-primary")
	killedAt := unixTime(t, killed["TIERQ_HA_KILLED_AT"])
	promoted := ha.run("wait-primary")
	require.NotEqual(t, killed["TIERQ_HA_KILLED"], promoted["TIERQ_HA_PRIMARY"])
	var primaryAt time.Time
	select {
	case primaryAt = <-writable:
	case <-time.After(10 * time.Second):
		t.Fatalf("ha.sh saw %s accept writes, the test's probe did not within 10s", promoted["TIERQ_HA_PRIMARY"])
	}
	manager := primaryAt.Sub(killedAt)
	t.Logf("killed %s at %s; %s accepted writes %.2fs later (ha.sh: %ss)", killed["TIERQ_HA_KILLED"],
		killedAt.Format("15:04:05.000"), promoted["TIERQ_HA_PRIMARY"], manager.Seconds(), promoted["TIERQ_HA_FAILOVER_SECONDS"])

	// tierq: the first job started on the new primary, the first insert
	// acknowledged by it, a leader again.
	var firstStart *time.Time
	for firstStart == nil {
		require.Less(t, time.Since(primaryAt), 90*time.Second, "no job started within 90s of the new primary accepting writes")
		// The pool's connections to the dead primary fail once each: errors
		// are expected here until it holds only new ones.
		// Any start after the kill is on the new primary (it is a write).
		_ = s.pool.QueryRow(ctx, `SELECT min(started_at) FROM load_test_executions WHERE started_at >= $1`, killedAt).Scan(&firstStart)
		if firstStart == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	tierq := firstStart.Sub(primaryAt)
	var insertBack time.Duration
	for insertBack == 0 {
		require.Less(t, time.Since(primaryAt), 90*time.Second, "no insert acknowledged within 90s of the new primary accepting writes")
		if at, ok := prod.firstAckAfter(killedAt); ok {
			insertBack = at.Sub(primaryAt)
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader := s.waitLeader(ctx, schedulers...)
	leaderBack := time.Since(primaryAt)

	time.Sleep(5 * time.Second)
	stopLoad()
	waitLoad()
	for _, p := range s.processes() {
		require.True(t, p.alive(), "%s exited during the failover", p.name)
	}
	require.Greater(t, prod.acked(), ackedBefore, "no insert acknowledged after the kill")

	stoppedAt := time.Now()
	tally, settle := s.settle(ctx, 2*time.Minute)
	s.logLate(ctx, stoppedAt.Add(10*time.Second))
	s.check(tally)
	// No worker stops or dies, and a fetch counts only once the standby has
	// its commit: no attempt may start twice (a redelivery is a new attempt).
	s.checkNoAttemptRanTwice(tally)
	s.summary(tally, firstStart.Sub(killedAt), settle,
		fmt.Sprintf("manager=%.1fs", manager.Seconds()), fmt.Sprintf("tierq=%.1fs", tierq.Seconds()),
		fmt.Sprintf("inserts_back=%.1fs", insertBack.Seconds()), fmt.Sprintf("leader_back=%.1fs", leaderBack.Seconds()),
		fmt.Sprintf("leader=%s", leader.name), fmt.Sprintf("insert_errors=%d", prod.failed()),
		fmt.Sprintf("acked_before_kill=%d", ackedBefore), fmt.Sprintf("ran_twice=%d", tally.sameAttempt))
}

// logLate logs the jobs that ended after since, with what River recorded
// of their attempts: a job the failover left running, for instance, ends
// only after the rescuer's RESCUE_STUCK_JOBS_AFTER.
func (s *system) logLate(ctx context.Context, since time.Time) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, queue, state::text, attempt, attempted_by, finalized_at, errors
		FROM river_job WHERE kind = $2 AND finalized_at > $1 ORDER BY finalized_at LIMIT 20`, since, jobs.KindLoadTest)
	if err != nil {
		s.t.Logf("late jobs: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id          int64
			queue, st   string
			attempt     int
			attemptedBy []string
			finalized   time.Time
			errs        []map[string]any
		)
		if err := rows.Scan(&id, &queue, &st, &attempt, &attemptedBy, &finalized, &errs); err != nil {
			s.t.Logf("late jobs: %v", err)
			return
		}
		s.t.Logf("late job %d (%s): %s at %s, %.1fs after the load stopped, attempt %d by %v, errors %v",
			id, queue, st, finalized.Format("15:04:05.000"), finalized.Sub(since.Add(-10*time.Second)).Seconds(), attempt, attemptedBy, errs)
	}
}

// probeWrites tries a write on url every 10 ms over one connection (made
// again when it breaks) and sends the time of the first that commits.
func probeWrites(ctx context.Context, url string) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		for ctx.Err() == nil {
			if conn == nil {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				conn, _ = pgx.Connect(cctx, url)
				cancel()
			}
			if conn != nil {
				qctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := conn.Exec(qctx, `INSERT INTO tierq_ha_probe VALUES (2, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at`)
				cancel()
				if err == nil {
					at <- time.Now()
					return
				}
				if conn.IsClosed() {
					conn = nil
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return at
}

// haFormation is a pg_auto_failover formation run by scripts/ha.sh: a
// monitor, a primary and a synchronous standby on loopback, under dir.
type haFormation struct {
	t       *testing.T
	dir     string
	env     []string
	exports map[string]string // from ha.sh start
}

// startHA starts a formation whose nodes serve database db, and removes it
// when the test ends (keeping its logs beside the scenario's when it fails).
func startHA(t *testing.T, dir, db string) *haFormation {
	t.Helper()
	ha := &haFormation{t: t, dir: dir, env: append(os.Environ(), "TIERQ_HA_DB="+db)}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TIERQ_CHAOS_KEEP") != "" {
			keep := filepath.Join(suite.base, "database-failover-ha-logs")
			out, err := exec.Command("sh", "-c", `mkdir -p "$2" && cd "$1" && for d in */; do mkdir -p "$2/$d" && cp -r "$d"*.log "$d"data/log "$2/$d" 2>/dev/null; done; true`, "sh", dir, keep).CombinedOutput()
			if err != nil {
				t.Logf("keeping the formation's logs: %v: %s", err, out)
			}
			state, _ := ha.script("state")
			t.Logf("formation at the end:\n%s", state)
		}
		if out, err := ha.script("stop"); err != nil {
			t.Errorf("ha.sh stop: %v\n%s", err, out)
		}
	})
	ha.exports = ha.run("start")
	return ha
}

// script runs ha.sh command on the formation and returns its output.
func (ha *haFormation) script(command string) (string, error) {
	cmd := exec.Command(filepath.Join("..", "scripts", "ha.sh"), command, ha.dir)
	cmd.Env = ha.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out) + stderr.String(), err
}

// run runs ha.sh command, failing the test unless it succeeds, and returns
// the variables it exported.
func (ha *haFormation) run(command string) map[string]string {
	ha.t.Helper()
	cmd := exec.Command(filepath.Join("..", "scripts", "ha.sh"), command, ha.dir)
	cmd.Env = ha.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(ha.t, err, "ha.sh %s:\n%s%s", command, out, stderr.String())
	ha.t.Logf("ha.sh %s:\n%s", command, strings.TrimSpace(stderr.String()))
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "export ")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			vars[k] = strings.Trim(v, "'")
		}
	}
	return vars
}

// unixTime parses ha.sh's times: Unix seconds with a fraction.
func unixTime(t *testing.T, s string) time.Time {
	t.Helper()
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	require.NoError(t, err, "time %q", s)
	frac = (frac + "000000000")[:9]
	nsec, err := strconv.ParseInt(frac, 10, 64)
	require.NoError(t, err, "time %q", s)
	return time.Unix(sec, nsec)
}

// production is what produce saw: the times of the acknowledged inserts and
// how many failed.
type production struct {
	mu      sync.Mutex
	ackedAt []time.Time
	errors  int
}

func (p *production) acked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ackedAt)
}

func (p *production) failed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errors
}

// firstAckAfter is when the first insert acknowledged after t was.
func (p *production) firstAckAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.ackedAt {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// produce inserts one recorded load-test job every interval through
// producer.Insert, as a team's producer does, each in its own transaction,
// round-robin over the services, tiers and the load tenants, until ctx
// ends; the returned wait blocks until it stopped. A job goes into the
// ledger once its commit is acknowledged; an insert that fails (the
// database away, or a read-only node) counts as an error: its job may or
// may not exist, and if it does the accounting finds it among the
// unacknowledged ones, which must finish too.
func (s *system) produce(ctx context.Context, interval time.Duration) (*production, func()) {
	p := &production{}
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(8, uint64(time.Now().UnixNano())))
		services := s.registry.Services()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			job := producer.Job{
				Args:    jobs.LoadTestArgs{SleepMS: 20 + r.IntN(181), Record: true, Ref: fmt.Sprintf("failover-%d", i)},
				Service: services[i%len(services)],
				Tier:    tiers.All()[i%4],
				Tenant:  loadTenants[i%len(loadTenants)],
			}
			// Not cut off by ctx: a cut could commit a job the ledger never
			// gets. Bounded instead: a commit waits for the synchronous
			// standby.
			opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			var res producer.Inserted
			err := pgx.BeginFunc(opCtx, s.pool, func(tx pgx.Tx) error {
				var err error
				res, err = producer.Insert(opCtx, s.client, tx, job)
				return err
			})
			cancel()
			p.mu.Lock()
			if err == nil {
				p.ackedAt = append(p.ackedAt, time.Now())
			} else {
				p.errors++
			}
			p.mu.Unlock()
			if err == nil {
				s.ledger.add(entry{
					id: res.Job.ID, kind: jobs.KindLoadTest, queue: res.Job.Queue, priority: res.Job.Priority,
					want: completed, recorded: true,
				})
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return p, wg.Wait
}
