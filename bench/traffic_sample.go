package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/api"
	"github.com/tierq/tierq/internal/db"
	"github.com/tierq/tierq/internal/jobmetasql"
	"github.com/tierq/tierq/internal/riverschema"
	"github.com/tierq/tierq/jobmeta"
)

// metricsFresh is how long after one read of the API's /metrics the next
// reads the database again (api.MetricsCacheFor, and a margin): a sample
// compares only fresh metrics with SQL.
const metricsFresh = api.MetricsCacheFor + 300*time.Millisecond

// waitingSQL reads, per queue, the jobs held now (id@held_at: a job held
// again after an admission has another held_at) and the
// longest wait of a job waiting now (available or held, due, from its due
// time): the definitions of docs/operations.md, read straight from
// river_job.
var waitingSQL = `
SELECT now(), q.queue,
       coalesce((SELECT array_agg(j.id::text || '@' || (j.metadata->>'` + jobmeta.HeldAt + `')) FROM ` + riverschema.JobTable + ` AS j
                 WHERE ` + jobmetasql.HeldSQL("j") + ` AND j.queue = q.queue), '{}'),
       greatest(coalesce(extract(epoch FROM now() - (
           SELECT min(` + jobmetasql.DueAtSQL("j") + `) FROM ` + riverschema.JobTable + ` AS j
           WHERE (j.state = '` + riverschema.StateAvailable + `' OR (` + jobmetasql.HeldSQL("j") + `)) AND j.queue = q.queue
             AND ` + db.FiniteSQL("j.scheduled_at") + ` AND j.scheduled_at <= now())), 0), 0)::float8
FROM unnest($1::text[]) AS q(queue)`

// passedThroughSQL counts, per queue, the jobs that may have been held and
// admitted again between two reads of waitingSQL, seen by neither: not
// held at either read ($2: the ids held at one or the other), and moved
// since $3 (Unix microseconds): admission writes the time of the move,
// jobmeta.MovedAt (so do the newcomer rule's moves: counted too, the bound
// is looser for them).
var passedThroughSQL = `
SELECT q.queue,
       (SELECT count(*) FROM ` + riverschema.JobTable + ` AS j
        WHERE j.queue = q.queue AND NOT (j.id = ANY($2::bigint[])) AND jsonb_typeof(j.metadata) = 'object'
          AND (j.metadata->>'` + jobmeta.MovedAt + `') ~ '^[0-9]{1,18}$'
          AND (j.metadata->>'` + jobmeta.MovedAt + `')::bigint >= $3)::int
FROM unnest($1::text[]) AS q(queue)`

// sqlRead is one read of waitingSQL.
type sqlRead struct {
	at     time.Time
	held   map[string][]string // id@held_at
	oldest map[string]float64
}

func (t *trafficRunner) readSQL(ctx context.Context) (sqlRead, error) {
	r := sqlRead{held: map[string][]string{}, oldest: map[string]float64{}}
	rows, err := t.e.Pool.Query(ctx, waitingSQL, t.queues())
	if err != nil {
		return r, fmt.Errorf("read the waiting jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			queue  string
			held   []string
			oldest float64
		)
		if err := rows.Scan(&r.at, &queue, &held, &oldest); err != nil {
			return r, fmt.Errorf("read the waiting jobs: %w", err)
		}
		r.held[queue], r.oldest[queue] = held, oldest
	}
	return r, rows.Err()
}

// heldBounds are, per queue, the fewest and the most jobs held at any
// moment between the reads before and after: at least those held at both
// with the same hold (not admitted and held again in between), at most
// those held at either and those that may have passed through
// (passedThroughSQL) since a second before the first read.
func (t *trafficRunner) heldBounds(ctx context.Context, before, after sqlRead) (lo, hi map[string]int, err error) {
	lo, hi = map[string]int{}, map[string]int{}
	var either []int64
	for _, queue := range t.queues() {
		holds, ids := map[string]bool{}, map[int64]bool{}
		for _, h := range before.held[queue] {
			holds[h] = true
			ids[heldID(h)] = true
		}
		for _, h := range after.held[queue] {
			if holds[h] {
				lo[queue]++
			}
			ids[heldID(h)] = true
		}
		hi[queue] = len(ids)
		for id := range ids {
			either = append(either, id)
		}
	}
	rows, err := t.e.Pool.Query(ctx, passedThroughSQL, t.queues(), either, before.at.Add(-time.Second).UnixMicro())
	if err != nil {
		return nil, nil, fmt.Errorf("count the jobs moved between two reads: %w", err)
	}
	var (
		queue string
		n     int
	)
	if _, err := pgx.ForEachRow(rows, []any{&queue, &n}, func() error {
		hi[queue] += n
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("count the jobs moved between two reads: %w", err)
	}
	return lo, hi, nil
}

// apiQueue is one queue of GET /v1/queues; a field the API does not send
// stays nil.
type apiQueue struct {
	Name          string   `json:"name"`
	Held          *int     `json:"held"`
	OldestWaiting *float64 `json:"oldest_waiting_seconds"`
	Unfetchable   int      `json:"unfetchable"`
}

func (t *trafficRunner) readAPI(ctx context.Context) ([]apiQueue, error) {
	body, err := t.api.get(ctx, "/v1/queues")
	if err != nil {
		return nil, err
	}
	var out struct {
		Queues []apiQueue `json:"queues"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/queues: %w", err)
	}
	return out.Queues, nil
}

// metricsRead is what a scrape of the API's /metrics says per queue: held
// jobs (tierq_held_jobs), the oldest wait (tierq_oldest_waiting_seconds)
// and the unfetchable jobs (tierq_unfetchable_jobs).
type metricsRead struct {
	held        map[string]float64
	oldest      map[string]float64
	unfetchable map[string]float64
}

func (t *trafficRunner) readMetrics(ctx context.Context) (metricsRead, error) {
	body, err := t.api.get(ctx, "/metrics")
	t.lastScrape = time.Now()
	if err != nil {
		return metricsRead{}, err
	}
	m := metricsRead{held: map[string]float64{}, oldest: map[string]float64{}, unfetchable: map[string]float64{}}
	s := bufio.NewScanner(bytes.NewReader(body))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		name, labels, v, ok := parseSample(s.Text())
		if !ok {
			continue
		}
		switch {
		case name == "tierq_held_jobs":
			m.held[labels["queue"]] = v
		case name == "tierq_oldest_waiting_seconds":
			m.oldest[labels["queue"]] = v
		case name == "tierq_unfetchable_jobs":
			m.unfetchable[labels["queue"]] = v
		}
	}
	return m, s.Err()
}

// parseSample parses one sample line of Prometheus' text format with
// simple label values (no escaped quotes or commas: queue names and
// states).
func parseSample(line string) (name string, labels map[string]string, v float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, ' ')
	if end < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[end+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	if open < 0 {
		return line[:end], labels, v, true
	}
	closing := strings.LastIndexByte(line[:end], '}')
	if closing < open {
		return "", nil, 0, false
	}
	for _, kv := range strings.Split(line[open+1:closing], ",") {
		k, val, found := strings.Cut(kv, "=")
		if found {
			labels[k] = strings.Trim(val, `"`)
		}
	}
	return line[:open], labels, v, true
}

// sampleLog gathers a run's samples.
type sampleLog struct {
	mu         sync.Mutex
	samples    int
	outside    int
	violations []string // the first maxViolations
	heldPeak   int
	slowest    time.Duration // the slowest read of GET /v1/queues and /metrics
}

// maxViolations is how many violations a run describes (all are counted
// in the checks).
const maxViolations = 20

func (l *sampleLog) add(s sampled, err error) {
	violations := s.violations
	if err != nil {
		violations = append(violations, "sample failed: "+err.Error())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples++
	l.heldPeak = max(l.heldPeak, s.held)
	l.slowest = max(l.slowest, s.took)
	l.outside += len(violations)
	l.violations = append(l.violations, violations[:min(len(violations), maxViolations-len(l.violations))]...)
}

func (l *sampleLog) result(r *TrafficRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Samples, r.SamplesOutside, r.SampleViolations, r.HeldPeak = l.samples, l.outside, l.violations, l.heldPeak
	r.APISlowestMs = round(float64(l.slowest.Microseconds())/1000, 1)
}

// sampleUntil takes a sample whenever the API's metrics are fresh again
// (every 5.3 s), at least a second apart, until ctx ends.
func (t *trafficRunner) sampleUntil(ctx context.Context, log *sampleLog) {
	for {
		if err := sleep(ctx, max(time.Second, time.Until(t.lastScrape.Add(metricsFresh)))); err != nil {
			return
		}
		s, err := t.sample(ctx)
		if ctx.Err() != nil {
			return // cut short by the run's end: not a sample
		}
		log.add(s, err)
	}
}

// sample reads SQL, then GET /v1/queues, then /metrics, then SQL again,
// and returns every value of the API and the metrics outside what the two
// SQL reads allow, and the jobs held at the first read. For a queue's held
// jobs that is heldBounds: at least the jobs held at both reads, at most
// those held at either and those that may have been held and admitted in
// between. For its oldest wait, which grows
// with the clock while the oldest job waits and drops when it starts, at
// least the smaller of the first read and the second less the time between
// them, and at most the larger of the first read plus that time and the
// second.
func (t *trafficRunner) sample(ctx context.Context) (s sampled, err error) {
	before, err := t.readSQL(ctx)
	if err != nil {
		return s, err
	}
	began := time.Now()
	if s.queues, err = t.readAPI(ctx); err != nil {
		s.took = time.Since(began)
		return s, err
	}
	s.took = time.Since(began)
	began = time.Now()
	s.metrics, err = t.readMetrics(ctx)
	s.took = max(s.took, time.Since(began))
	if err != nil {
		return s, err
	}
	after, err := t.readSQL(ctx)
	if err != nil {
		return s, err
	}
	lo, hi, err := t.heldBounds(ctx, before, after)
	if err != nil {
		return s, err
	}
	queues, met := s.queues, s.metrics
	var violations []string
	for _, ids := range before.held {
		s.held += len(ids)
	}
	bad := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	byName := map[string]apiQueue{}
	for _, q := range queues {
		byName[q.Name] = q
	}
	dt := after.at.Sub(before.at).Seconds()
	const eps = 0.001
	for _, queue := range t.queues() {
		hb, ha := len(before.held[queue]), len(after.held[queue])
		hLo, hHi := float64(lo[queue]), float64(hi[queue])
		ob, oa := before.oldest[queue], after.oldest[queue]
		oLo, oHi := min(ob, oa-dt)-eps, max(ob+dt, oa)+eps
		q, ok := byName[queue]
		switch {
		case !ok:
			bad("GET /v1/queues lists no %s", queue)
		case q.Held == nil || q.OldestWaiting == nil:
			bad("GET /v1/queues has no held or oldest_waiting_seconds for %s", queue)
		default:
			if v := float64(*q.Held); v < hLo || v > hHi {
				bad("GET /v1/queues %s held %g, SQL %d then %d (bounds %g–%g)", queue, v, hb, ha, hLo, hHi)
			}
			if v := *q.OldestWaiting; v < oLo || v > oHi {
				bad("GET /v1/queues %s oldest_waiting_seconds %.3f, SQL %.3f then %.3f (%.3f s apart)", queue, v, ob, oa, dt)
			}
		}
		if v, ok := met.held[queue]; !ok || v < hLo || v > hHi {
			bad("/metrics tierq_held_jobs{queue=%q} %g (present: %t), SQL %d then %d (bounds %g–%g)", queue, v, ok, hb, ha, hLo, hHi)
		}
		if v, ok := met.oldest[queue]; !ok || v < oLo || v > oHi {
			bad("/metrics tierq_oldest_waiting_seconds{queue=%q} %.3f (present: %t), SQL %.3f then %.3f (%.3f s apart)", queue, v, ok, ob, oa, dt)
		}
	}
	if math.IsNaN(dt) {
		bad("no SQL clock")
	}
	s.violations = violations
	return s, nil
}

// sampled is one sample: what fell outside, the jobs held at its first
// read, how long the slower of the API's two answers took, and the
// answers.
type sampled struct {
	violations []string
	held       int
	took       time.Duration
	queues     []apiQueue
	metrics    metricsRead
}

// heldID is the id of an id@held_at.
func heldID(h string) int64 {
	id, _, _ := strings.Cut(h, "@")
	n, _ := strconv.ParseInt(id, 10, 64)
	return n
}
